// Tests for saving checkpoints through core/io/atomic_file: a failed save leaves the previous
// file and no temporary file, bad names are refused before the disk is touched, the latest
// checkpoint of a directory, and the removal of dead processes' leftovers.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/io/atomic_file.h"
#include "core/io/atomic_file_testing.h"
#include "core/io/checkpoint.h"
#include "tests/checkpoint_testing.h"
#include "tests/test_util.h"

using namespace fjit;
using namespace fjit::io;
using namespace fjit::io::checkpoint_testing;
using fjit::testing::error_of;

TEST_F(CheckpointTest, FailedSaveLeavesPreviousFileAndNoTempFiles) {
  std::string before = saved();
  Checkpoint next = sample();
  next.tensors[0].second.data<float>()[0] = 99.f;
  next.metadata["step"] = "1300";
  for (uint64_t k : {uint64_t{0}, uint64_t{5}, uint64_t{8}, uint64_t{40}, uint64_t{before.size() - 1}}) {
    fjit::testing::set_fail_save_after_bytes(k);
    std::string msg = error_of([&] { save_checkpoint(path_, next); });
    EXPECT_EQ(msg, path_ + ": write failed after " + std::to_string(k) +
                       " bytes (injected by testing::set_fail_save_after_bytes): No space left on device");
    EXPECT_EQ(slurp(path_), before) << "previous checkpoint changed after a failure at byte " << k;
    EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"}) << "after failing at byte " << k;
  }
  // A limit at the file's size lets the save through.
  fjit::testing::set_fail_save_after_bytes(before.size());
  save_checkpoint(path_, next);
  fjit::testing::set_fail_save_after_bytes(std::nullopt);
  EXPECT_EQ(load_checkpoint(path_).metadata.at("step"), "1300");
  EXPECT_EQ(load_checkpoint(path_).tensors[0].second.data<float>()[0], 99.f);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(CheckpointTest, SaveIntoMissingDirectory) {
  std::string missing = (dir_ / "no-such-dir" / "model.safetensors").string();
  std::string msg = error_of([&] { save_checkpoint(missing, sample()); });
  EXPECT_EQ(msg.rfind(missing + ": cannot create temporary file " + missing + ".tmp-", 0), 0u) << msg;
  EXPECT_CONTAINS(msg, ": No such file or directory");
  EXPECT_TRUE(listing().empty());
}

TEST_F(CheckpointTest, SaveIntoReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  std::string before = saved();
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_CONTAINS(error_of([&] { save_checkpoint(path_, Checkpoint{}); }), "Permission denied");
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(slurp(path_), before);
}

TEST_F(CheckpointTest, SaveRejectsBadNamesBeforeTouchingDisk) {
  Array a(DType::f32, {1});
  EXPECT_THROW(save_checkpoint(path_, Checkpoint{{{"a", a}, {"a", a}}, {}}), std::invalid_argument);
  EXPECT_THROW(save_checkpoint(path_, Checkpoint{{{"", a}}, {}}), std::invalid_argument);
  EXPECT_THROW(save_checkpoint(path_, Checkpoint{{{"__metadata__", a}}, {}}), std::invalid_argument);
  EXPECT_THROW(save_checkpoint(path_, Checkpoint{{{"u", Array()}}, {}}), std::invalid_argument);
  EXPECT_TRUE(listing().empty());
}

TEST_F(CheckpointTest, CallerChecksumIsReplacedAndEmptyCheckpointWorks) {
  Checkpoint c = sample();
  c.metadata[kChecksumKey] = "00000000";
  save_checkpoint(path_, c);
  EXPECT_NE(load_checkpoint(path_).metadata.at(kChecksumKey), "00000000");
  save_checkpoint(path_, Checkpoint{});
  Checkpoint empty = load_checkpoint(path_);
  EXPECT_TRUE(empty.tensors.empty());
  // The checksum is zlib's crc32 of the whole file with its own digits written as zeros.
  std::string bytes = slurp(path_);
  const size_t at = bytes.find(empty.metadata.at(kChecksumKey));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 8, "00000000");
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx",
                crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
  EXPECT_EQ(empty.metadata.at(kChecksumKey), hex);
  EXPECT_EQ(empty.integrity, Integrity::kWholeFile);
}

TEST_F(CheckpointTest, LatestCheckpointPicksHighestStep) {
  EXPECT_EQ(latest_checkpoint(dir_.string()), "");
  EXPECT_EQ(latest_checkpoint((dir_ / "absent").string()), "");
  EXPECT_EQ(checkpoint_path(dir_.string(), 40), (dir_ / "ckpt-40.safetensors").string());
  for (int64_t step : {5, 100, 40}) save_checkpoint(checkpoint_path(dir_.string(), step), sample());
  write_file((dir_ / "ckpt-200.safetensors.tmp-1-0").string(), "partial");
  write_file((dir_ / "ckpt-300.safetensors.tmp-somehost-1-0").string(), "partial");
  write_file((dir_ / "ckpt-x.safetensors").string(), "junk");
  write_file((dir_ / "ckpt-.safetensors").string(), "junk");
  EXPECT_EQ(latest_checkpoint(dir_.string()), (dir_ / "ckpt-100.safetensors").string());
}

// A save removes what killed saves left in its directory, but never the temporary file of a
// live process or of another host.
TEST_F(CheckpointTest, SaveRemovesStaleTemporaryFilesOnly) {
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  // A pid that cannot be running: above the kernel's pid_max.
  const std::string dead = std::string(host) + "-2147483646-0";
  const std::string live = std::string(host) + "-" + std::to_string(::getpid()) + "-77";
  const auto stale = dir_ / ("ckpt-1.safetensors.tmp-" + dead);
  const auto mine = dir_ / ("ckpt-2.safetensors.tmp-" + live);
  const auto other_host = dir_ / "ckpt-3.safetensors.tmp-not-this-host-2147483646-0";
  for (const auto& p : {stale, mine, other_host}) write_file(p.string(), "partial");
  save_checkpoint(checkpoint_path(dir_.string(), 4), sample());
  EXPECT_FALSE(std::filesystem::exists(stale)) << "a dead process's leftover stays";
  EXPECT_TRUE(std::filesystem::exists(mine)) << "a live process's temporary file was removed";
  EXPECT_TRUE(std::filesystem::exists(other_host)) << "another host's temporary file was removed";
  EXPECT_EQ(remove_stale_temporaries(dir_.string()), 0);
}
