#include "tests/fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

namespace fjit::fuzz {

const std::string& scratch_dir() {
  // Never destroyed: the exit handler below still reads it.
  static const std::string* const dir = new std::string([] {
    std::string base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    std::string pattern = base + "/fjit-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot make a scratch directory under " + base);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return pattern;
  }());
  return *dir;
}

std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) fail("cannot write " + path);
  return path;
}

void expect_names_file(const std::exception& e, const std::string& path) {
  if (!std::string_view(e.what()).starts_with(path + ": "))
    fail("an error about " + path + " does not start with its path: " + e.what());
}

void fail(const std::string& what) {
  std::fprintf(stderr, "fjit fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fjit::fuzz
