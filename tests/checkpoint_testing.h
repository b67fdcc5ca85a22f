// What the checkpoint tests share (tests/checkpoint_test.cc: the format and loading;
// tests/checkpoint_save_test.cc: saving, atomicity and the directory): file helpers, a sample
// checkpoint of every dtype and special value, and a fixture with a fresh directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/io/atomic_file_testing.h"
#include "core/io/checkpoint.h"

namespace fjit::io::checkpoint_testing {

namespace fs = std::filesystem;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
inline uint64_t le64(const std::string& s) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
  return v;
}
inline std::string le64_bytes(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
// A safetensors file made by hand, as another tool might write it.
inline std::string st_file(const std::string& header, const std::string& data) {
  return le64_bytes(header.size()) + header + data;
}
inline std::string raw_bytes(const Array& a) {
  return std::string(static_cast<const char*>(a.raw()), a.nbytes());
}


inline Checkpoint sample() {
  Checkpoint c;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  c.tensors.emplace_back("w1", Array::from_vector<float>(
                                   {1.5f, -0.0f, nan, inf, -inf, 1e-42f, 3.25f, -7.f, 0.1f, 2.f, 9.f, 1.f},
                                   {3, 4}));
  c.tensors.emplace_back("b1", Array::from_vector<double>({0.1, -2.5e300}, {2}));
  c.tensors.emplace_back("step_count", Array::from_vector<int32_t>({-3, 0, 2147483647, -2147483647 - 1, 5}, {5}));
  c.tensors.emplace_back("mask", Array::from_vector<uint8_t>({1, 0, 0, 1}, {2, 2}));
  c.tensors.emplace_back("lr", Array::scalar(0.01f));
  c.tensors.emplace_back("empty", Array(DType::f32, {0, 3}));
  c.metadata = {{"step", "1200"}, {"seed", "7"}, {"note", "quote \" backslash \\ newline \n ü"}};
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fjit-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "model.safetensors").string();
  }
  void TearDown() override {
    fjit::testing::set_fail_save_after_bytes(std::nullopt);
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Saves sample() and returns the file's bytes and the header length.
  std::string saved(uint64_t* header_len = nullptr) {
    save_checkpoint(path_, sample());
    std::string bytes = slurp(path_);
    if (header_len) *header_len = le64(bytes);
    return bytes;
  }
  fs::path dir_;
  std::string path_;
};

}  // namespace fjit::io::checkpoint_testing
