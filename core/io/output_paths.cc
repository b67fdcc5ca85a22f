#include "core/io/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "core/base/config.h"

namespace fjit::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& problem) {
  throw std::runtime_error(what + " " + path + ": " + problem);
}

void require_writable_dir(const std::string& what, const std::string& path, const fs::path& dir) {
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(what, path, "directory " + dir.string() + " is not writable (" + std::strerror(errno) + ")");
}

// `dir` exists as a writable directory or can be created; errors name `path` (the output).
void check_dir(const fs::path& dir, const std::string& what, const std::string& path) {
  std::error_code ec;
  fs::path p = dir.lexically_normal();
  const fs::file_status st = fs::status(p, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) fail(what, path, p.string() + " exists and is not a directory");
    require_writable_dir(what, path, p);
    return;
  }
  // The first ancestor that exists must be a directory we can create the rest in.
  fs::path up = p;
  for (;;) {
    up = up.has_relative_path() && up.has_parent_path() && up.parent_path() != up ? up.parent_path()
                                                                                   : fs::path();
    if (up.empty()) up = ".";
    const fs::file_status s = fs::status(up, ec);
    if (fs::exists(s)) {
      if (!fs::is_directory(s))
        fail(what, path, up.string() + " is a regular file, not a directory: cannot create the directory under it");
      require_writable_dir(what, path, up);
      return;
    }
    if (up == ".") return;  // not reachable in practice: "." exists
  }
}

}  // namespace

void check_output_dir(const std::string& path, const std::string& what) {
  if (!path.empty()) check_dir(path, what, path);
}

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) return;
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) fail(what, path, "is a directory, not a file");
    if (::access(p.c_str(), W_OK) != 0)
      fail(what, path, std::string("is not writable (") + std::strerror(errno) + ")");
  }
  const fs::path parent = p.parent_path();
  check_dir(parent.empty() ? fs::path(".") : parent, what, path);
}

void check_output_paths(const OutputPaths& paths) {
  for (const auto& [what, path] : paths.dirs) check_output_dir(path, what);
  for (const auto& [what, path] : paths.files) check_output_file(path, what);
  check_output_file(config::timeline(), "FJIT_TIMELINE");
  check_output_dir(config::dump_dir(), "FJIT_DUMP_DIR");
  check_output_dir(config::check_dump_dir(), "FJIT_CHECK_DUMP_DIR");
}

}  // namespace fjit::io
