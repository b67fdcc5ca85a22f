// core/io's scalar logs read back independently: CRC-32C against its published test vector
// and a bit-at-a-time implementation, TensorBoard event files through tests/event_file_reader.h
// (framing, both CRCs, the protobuf fields), and the JSON lines through nlohmann-json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/crc32c.h"
#include "core/io/scalar_log.h"
#include "core/io/tensorboard.h"
#include "tests/event_file_reader.h"

namespace fjit {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("fjit_tb_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<nlohmann::json> json_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Crc32c, PublishedTestVectorAndTheBitwiseDefinition) {
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(testing::bitwise_crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(io::crc32c("", 0), 0u);
  // 32 zero bytes, another published value (RFC 3720, B.4).
  const std::string zeros(32, '\0');
  EXPECT_EQ(io::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes.push_back(static_cast<char>((i * 7919) >> 3));
  for (size_t n : {size_t{1}, size_t{3}, size_t{64}, size_t{999}}) {
    EXPECT_EQ(io::crc32c(bytes.data(), n), testing::bitwise_crc32c(bytes.data(), n)) << n;
    // Continuing a CRC equals the CRC of the whole.
    EXPECT_EQ(io::crc32c(bytes.data() + n / 2, n - n / 2, io::crc32c(bytes.data(), n / 2)),
              io::crc32c(bytes.data(), n)) << n;
  }
  EXPECT_EQ(io::mask_crc(0), 0xa282ead8u);
  EXPECT_EQ(io::mask_crc(0xE3069283u), testing::masked(0xE3069283u));
}

TEST(EventFile, ScalarsReadBackWithVerifiedFramingAndFields) {
  TempDir dir;
  const double before = io::wall_time_now();
  std::string path;
  {
    io::ScalarLog log(dir.path.string());
    path = log.events_path();
    log.write(1, "train/loss", 0.5);
    log.write(int64_t{1} << 40, "odd \"tag\" \\ é", -3.25);  // a many-byte varint, escapes
    log.write(7, "train/nan", std::numeric_limits<double>::quiet_NaN());
    log.flush();
  }
  const double after = io::wall_time_now();
  // events.out.tfevents.<seconds>.<host>
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_TRUE(std::regex_match(fs::path(path).filename().string(),
                               std::regex("events\\.out\\.tfevents\\.[0-9]+\\." +
                                          std::regex_replace(std::string(host), std::regex("[.]"), "\\.") +
                                          "(\\.[0-9]+)?")))
      << path;
  const std::vector<testing::DecodedEvent> ev = testing::read_event_file(path);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_FALSE(ev[0].has_value);
  for (const auto& e : ev) {
    EXPECT_GE(e.wall_time, std::floor(before));
    EXPECT_LE(e.wall_time, after + 1);
  }
  EXPECT_EQ(ev[1].step, 1);
  EXPECT_EQ(ev[1].tag, "train/loss");
  EXPECT_EQ(ev[1].value, 0.5f);
  EXPECT_EQ(ev[2].step, int64_t{1} << 40);
  EXPECT_EQ(ev[2].tag, "odd \"tag\" \\ é");
  EXPECT_EQ(ev[2].value, -3.25f);
  EXPECT_TRUE(std::isnan(ev[3].value));

  const std::vector<nlohmann::json> lines = json_lines(dir.path / io::kScalarLinesFile);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[0]["tag"], "train/loss");
  EXPECT_EQ(lines[0]["value"], 0.5);
  EXPECT_EQ(lines[1]["tag"], "odd \"tag\" \\ é");
  EXPECT_EQ(lines[1]["step"].get<int64_t>(), int64_t{1} << 40);
  EXPECT_TRUE(lines[2]["value"].is_null());  // JSON has no NaN
  // The line and the event of one scalar carry the same wall time.
  EXPECT_EQ(lines[0]["wall_time"].get<double>(), ev[1].wall_time);
}

TEST(EventFile, ACorruptedByteIsCaughtByTheIndependentReader) {
  TempDir dir;
  std::string path;
  {
    io::EventFileWriter w(dir.path.string());
    w.add_scalar("x", 1.0, 3, 100.0);
    path = w.path();
  }
  ASSERT_NO_THROW(testing::read_event_file(path));
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-6, std::ios::end);
  f.put('\x7f');
  f.close();
  EXPECT_THROW(testing::read_event_file(path), std::runtime_error);
}

TEST(ScalarLog, ASecondLogAppendsLinesAndStartsItsOwnEventFile) {
  TempDir dir;
  { io::ScalarLog(dir.path.string()).write(1, "a", 1); }
  { io::ScalarLog(dir.path.string()).write(2, "a", 2); }
  const std::vector<nlohmann::json> lines = json_lines(dir.path / io::kScalarLinesFile);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["step"], 2);
  const std::vector<fs::path> files = event_files(dir.path);
  ASSERT_EQ(files.size(), 2u);  // distinct names even within one second
  EXPECT_EQ(testing::read_event_file(files[0].string()).size(), 2u);
  EXPECT_EQ(testing::read_event_file(files[1].string()).size(), 2u);
}

TEST(ScalarLog, AnUnwritableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "x";
  const std::string bad = (dir.path / "file" / "logs").string();
  try {
    io::ScalarLog log(bad);
    FAIL() << "opened a log under a regular file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fjit
