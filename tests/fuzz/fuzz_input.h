// What the fuzz harnesses share: the parsers under test read files by path, so each input is
// written to a scratch file first, and every error they raise about a user's file must start
// with that file's path ("<path>: <problem>").
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace fjit::fuzz {

// A path holding exactly data[0, size), rewritten on each call. The file lives in a
// directory made for this process at its first call (under /dev/shm when it can be written,
// so that a save's fsync costs nothing, else $TMPDIR or /tmp) and `name` is its file name.
std::string write_input(const uint8_t* data, size_t size, const std::string& name);

// The directory write_input uses (for harnesses that write files of their own there).
const std::string& scratch_dir();

// Aborts, printing both, unless e's message starts with "<path>: ".
void expect_names_file(const std::exception& e, const std::string& path);

// Prints `what` and aborts: the input found a broken promise of the parser.
[[noreturn]] void fail(const std::string& what);

}  // namespace fjit::fuzz
