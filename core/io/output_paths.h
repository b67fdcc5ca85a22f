// Checks that a program can write where it was told to, before it does any work: a training
// run finds an unusable --checkpoint-dir, --log-dir, export path or timeline file at
// start-up, not after its last step.
//
// Promises:
//  - Nothing is created or changed on disk; the checks read metadata only (stat, access).
//  - A failure throws std::runtime_error "<what> <path>: <problem>", the problem naming the
//    path that is in the way: a regular file where a directory must be (or would have to be
//    created), a directory where a file must be, a directory without write permission.
//  - An empty path is not checked (the output is off).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fjit::io {

// `path` is a directory that exists and is writable, or can be created: its first existing
// ancestor is a writable directory.
void check_output_dir(const std::string& path, const std::string& what);

// `path` is a file that can be written: it is not a directory, is writable if it exists, and
// its directory passes check_output_dir.
void check_output_file(const std::string& path, const std::string& what);

// The paths a run writes: {what, path}, `what` as the user names it ("--checkpoint-dir").
struct OutputPaths {
  std::vector<std::pair<std::string, std::string>> dirs, files;
};
// Checks every path of `paths`, then the process-wide ones of core/base/config.def
// (FJIT_TIMELINE, FJIT_DUMP_DIR, FJIT_CHECK_DUMP_DIR); throws on the first that fails.
void check_output_paths(const OutputPaths& paths);

}  // namespace fjit::io
