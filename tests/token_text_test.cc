// Tests for what core/io takes as text (token_file.h's rule) against an independent oracle:
// the set of every allowed code point's UTF-8 encoding, made by a plain encoder, over every
// one- and two-byte sequence, every three-byte sequence with an E* lead and a sample of
// four-byte ones; and the corpus of a directory (corpus_files), Debian's fortunes included.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/io/token_file.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace fjit::io;
using fjit::testing::error_of;

namespace {

// A byte sequence of 1..4 bytes packed with its length, comparable as an integer.
uint64_t key(const std::vector<uint8_t>& s) {
  uint64_t k = s.size();
  for (uint8_t b : s) k = (k << 8) | b;
  return k;
}

bool allowed(uint32_t cp) {
  return (cp >= 0x07 && cp <= 0x0D) || (cp >= 0x20 && cp != 0x7F && cp < 0xD800) ||
         (cp >= 0xE000 && cp <= 0x10FFFF);
}

std::vector<uint8_t> encode(uint32_t cp) {
  if (cp < 0x80) return {uint8_t(cp)};
  if (cp < 0x800) return {uint8_t(0xC0 | cp >> 6), uint8_t(0x80 | (cp & 0x3F))};
  if (cp < 0x10000)
    return {uint8_t(0xE0 | cp >> 12), uint8_t(0x80 | ((cp >> 6) & 0x3F)), uint8_t(0x80 | (cp & 0x3F))};
  return {uint8_t(0xF0 | cp >> 18), uint8_t(0x80 | ((cp >> 12) & 0x3F)),
          uint8_t(0x80 | ((cp >> 6) & 0x3F)), uint8_t(0x80 | (cp & 0x3F))};
}

// The oracle: sorted keys of every allowed code point's encoding.
const std::vector<uint64_t>& encodings() {
  static const std::vector<uint64_t> all = [] {
    std::vector<uint64_t> v;
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp)
      if (allowed(cp)) v.push_back(key(encode(cp)));
    std::sort(v.begin(), v.end());
    return v;
  }();
  return all;
}

// True when `s` splits into encodings of allowed code points (at most 4 bytes: few splits).
bool oracle_is_text(const std::vector<uint8_t>& s, size_t from = 0) {
  if (from == s.size()) return true;
  for (size_t len = 1; len <= 4 && from + len <= s.size(); ++len) {
    const std::vector<uint8_t> head(s.begin() + from, s.begin() + from + len);
    if (std::binary_search(encodings().begin(), encodings().end(), key(head)) &&
        oracle_is_text(s, from + len))
      return true;
  }
  return false;
}

void expect_agrees(const std::vector<uint8_t>& s) {
  int64_t offset = -1;
  const bool got = is_text(s, &offset);
  if (got != oracle_is_text(s)) {
    std::string hex;
    for (uint8_t b : s) hex += fmt::format("{:02X} ", b);
    ADD_FAILURE() << "is_text(" << hex << ") = " << got;
  }
  if (!got) {
    EXPECT_TRUE(offset >= 0 && offset < static_cast<int64_t>(s.size()));
  }
}

TEST(Text, AgreesWithTheEncoderOracle) {
  for (int a = 0; a < 256; ++a) {
    expect_agrees({uint8_t(a)});
    for (int b = 0; b < 256; ++b) expect_agrees({uint8_t(a), uint8_t(b)});
  }
  for (int a = 0xE0; a <= 0xEF; ++a)
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 256; ++c) expect_agrees({uint8_t(a), uint8_t(b), uint8_t(c)});
  for (int a = 0xF0; a <= 0xFF; ++a)
    for (int b = 0; b < 256; ++b)
      for (int c : {0x41, 0x7F, 0x80, 0xBF, 0xC0})
        for (int d : {0x09, 0x80, 0x9A, 0xBF, 0xC3}) expect_agrees({uint8_t(a), uint8_t(b), uint8_t(c), uint8_t(d)});
}

TEST(Text, ReportsTheFirstBadByte) {
  const std::string s = "ok \xE2\x82\xAC then \xC0\xAF overlong";
  int64_t offset = -1;
  std::string why;
  EXPECT_FALSE(is_text({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, &offset, &why));
  EXPECT_EQ(offset, 12);
  EXPECT_NE(why.find("0xC0"), std::string::npos) << why;
  const std::string surrogate = "a\xED\xA0\x80";
  EXPECT_FALSE(is_text({reinterpret_cast<const uint8_t*>(surrogate.data()), 4}, &offset, &why));
  EXPECT_EQ(offset, 2);
  EXPECT_NE(why.find("starts at offset 1"), std::string::npos) << why;
}

class CorpusFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fjit-corpus-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(CorpusFiles, ADirectoryGivesItsTextFilesSorted) {
  for (const char* f : {"zeta", "alpha", "Beta", "alpha.dat", ".hidden", "real.u8"})
    std::ofstream(tmp(f)) << "text\n";
  fs::create_symlink("alpha", tmp("alpha.u8"));
  fs::create_symlink("zeta", tmp("link"));
  fs::create_directories(tmp("sub"));
  std::ofstream(tmp("sub/inner")) << "text\n";
  EXPECT_EQ(corpus_files(dir_.string()),
            (std::vector<std::string>{tmp("Beta"), tmp("alpha"), tmp("link"), tmp("real.u8"), tmp("zeta")}));
  EXPECT_EQ(corpus_files(tmp("zeta")), std::vector<std::string>{tmp("zeta")});
  EXPECT_EQ(corpus_files(tmp("nope")), std::vector<std::string>{tmp("nope")});
  EXPECT_EQ(corpus_files(tmp("sub")), std::vector<std::string>{tmp("sub/inner")});
  fs::remove(tmp("sub/inner"));
  const std::string empty = error_of([&] { corpus_files(tmp("sub")); });
  EXPECT_NE(empty.find(tmp("sub") + ": the directory holds no text files"), std::string::npos) << empty;
}

TEST_F(CorpusFiles, DebianFortunesAreText) {
  const std::string dir = "/usr/share/games/fortunes";
  if (!fs::exists(dir + "/fortunes")) GTEST_SKIP() << "Debian's fortunes package is not installed";
  const auto files = corpus_files(dir);
  ASSERT_GT(files.size(), 10u);
  int64_t bytes = 0;
  for (const auto& f : files) {
    EXPECT_FALSE(f.ends_with(".dat") || f.ends_with(".u8")) << f;
    bytes += static_cast<int64_t>(fs::file_size(f));
  }
  EXPECT_EQ(write_token_file(tmp("fortunes.tok"), files), bytes);
  TokenFile t = TokenFile::open(tmp("fortunes.tok"));
  EXPECT_EQ(t.size(), bytes);
  t.verify();
}

}  // namespace
