// Checkpoints that cannot lie (issue 30, item 8), at the file level: the whole-file checksum
// refuses an edited header (a step changed as `sed` would, two tensors' offsets swapped), a
// file whose checksum entry was removed or that an older fjit wrote loads only as a plain
// safetensors file and is refused for a resume, a checkpoint of another model is refused
// naming both, and output paths that cannot be written are found before any work.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "core/io/checkpoint.h"
#include "core/io/output_paths.h"
#include "tests/checkpoint_testing.h"
#include "tests/test_util.h"

namespace fjit::io::checkpoint_testing {
namespace {

using fjit::testing::error_of;

// A training-like checkpoint: position metadata and two tensors of the same size.
Checkpoint positioned() {
  Checkpoint c;
  c.tensors.emplace_back("params/w", Array::from_vector<float>({1.f, 2.f}, {2}));
  c.tensors.emplace_back("opt/m.w", Array::from_vector<float>({3.f, 4.f}, {2}));
  c.metadata = {{"step", "30"}, {"epoch", "1"}, {"batch_in_epoch", "4"}, {"seed", "7"}};
  return c;
}

// Replaces `from` by `to` (same length) once in the file, as `sed -i` would.
void edit_in_place(const std::string& path, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  std::string bytes = slurp(path);
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  write_file(path, bytes);
}

TEST_F(CheckpointTest, EditedPositionFieldsAreRefused) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {R"("step":"30")", R"("step":"38")"},
           {R"("epoch":"1")", R"("epoch":"2")"},
           {R"("batch_in_epoch":"4")", R"("batch_in_epoch":"5")"},
           {R"("seed":"7")", R"("seed":"8")"}}) {
    save_checkpoint(path_, positioned());
    edit_in_place(path_, from, to);
    const std::string error = error_of([&] { load_checkpoint(path_); });
    EXPECT_EQ(error.rfind(path_ + ": checksum mismatch: metadata fjit.checksum is ", 0), 0u)
        << from << " -> " << to << ": " << error;
    EXPECT_CONTAINS(error, "header or data changed");
  }
}

TEST_F(CheckpointTest, SwappedTensorOffsetsAreRefused) {
  save_checkpoint(path_, positioned());
  std::string bytes = slurp(path_);
  const std::string a = R"("data_offsets":[0,8])", b = R"("data_offsets":[8,16])";
  const size_t pa = bytes.find(a), pb = bytes.find(b);
  ASSERT_NE(pa, std::string::npos);
  ASSERT_NE(pb, std::string::npos);
  ASSERT_LT(pa, pb);
  // Swapping two strings of different lengths keeps the header's length.
  bytes = bytes.substr(0, pa) + b + bytes.substr(pa + a.size(), pb - pa - a.size()) + a +
          bytes.substr(pb + b.size());
  write_file(path_, bytes);
  const std::string error = error_of([&] { load_checkpoint(path_); });
  EXPECT_EQ(error.rfind(path_ + ": checksum mismatch", 0), 0u) << error;
}

TEST_F(CheckpointTest, RemovedChecksumEntryLoadsUnverifiedAndIsRefusedForResume) {
  save_checkpoint(path_, positioned());
  Checkpoint good = load_checkpoint(path_);
  EXPECT_EQ(good.integrity, Integrity::kWholeFile);
  EXPECT_NO_THROW(require_checksum(good, "so it cannot be resumed from"));
  // The entry is the metadata's last: blank it out (JSON whitespace keeps the length).
  const std::string entry = std::string(",\"") + kChecksumKey + "\":\"" + good.metadata.at(kChecksumKey) + "\"";
  edit_in_place(path_, entry, std::string(entry.size(), ' '));
  Checkpoint bare = load_checkpoint(path_);
  EXPECT_EQ(bare.integrity, Integrity::kNone);
  EXPECT_EQ(bare.metadata.count(kChecksumKey), 0u);
  EXPECT_EQ(error_of([&] { require_checksum(bare, "so it cannot be resumed from"); }),
            path_ + ": has no fjit.checksum entry (removed, or not written by fjit): nothing "
                    "vouches for its header or data, so it cannot be resumed from");
}

TEST_F(CheckpointTest, ChecksumSpelledOtherwiseIsRefused) {
  save_checkpoint(path_, positioned());
  // JSON reads "fjit\u002echecksum" as fjit.checksum; fjit never writes it so.
  std::string bytes = slurp(path_);
  const std::string key = "\"fjit.checksum\"";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  const uint64_t n = le64(bytes);
  std::string header = bytes.substr(8, n);
  header.replace(header.find(key), key.size(), "\"fjit\\u002echecksum\"");
  write_file(path_, le64_bytes(header.size()) + header + bytes.substr(8 + n));
  EXPECT_CONTAINS(error_of([&] { load_checkpoint(path_); }),
                  path_ + ": the header's fjit.checksum entry is not spelled as fjit writes it");
}

TEST_F(CheckpointTest, LegacyDataOnlyChecksumLoadsButIsRefusedForResume) {
  // As fjit up to 4284e34 wrote it: fjit.crc32, the crc32 of the tensor data alone.
  float v[2] = {1.5f, -2.f};
  const std::string data(reinterpret_cast<const char*>(v), sizeof v);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08lx",
                crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  const std::string header = std::string(R"({"__metadata__":{"step":"3","fjit.crc32":")") + crc +
                             R"("},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_file(path_, st_file(header, data));
  Checkpoint legacy = load_checkpoint(path_);
  EXPECT_EQ(legacy.integrity, Integrity::kDataOnly);
  EXPECT_EQ(legacy.tensors.at(0).second.data<float>()[1], -2.f);
  EXPECT_CONTAINS(error_of([&] { require_checksum(legacy, "so it cannot be resumed from"); }),
                  path_ + ": written by fjit up to commit 4284e34 (metadata fjit.crc32, a checksum "
                          "of the tensor data only): its header is not protected");
  // Its data crc is still verified.
  std::string bytes = slurp(path_);
  bytes.back() ^= 0x40;
  write_file(path_, bytes);
  EXPECT_CONTAINS(error_of([&] { load_checkpoint(path_); }),
                  path_ + ": checksum mismatch: metadata fjit.crc32 is ");
}

TEST_F(CheckpointTest, CheckpointOfAnotherModelIsRefusedNamingBoth) {
  Checkpoint c = positioned();
  set_config(c, {{"model", "mlp 784,512,256,10"}});
  save_checkpoint(path_, c);
  Checkpoint loaded = load_checkpoint(path_);
  EXPECT_NO_THROW(check_model(loaded, "mlp 784,512,256,10"));
  EXPECT_EQ(error_of([&] { check_model(loaded, "cnn dropout 0"); }),
            path_ + ": the checkpoint holds model mlp 784,512,256,10, this run's is cnn dropout 0: "
                    "it cannot be resumed with another model");
  Checkpoint unrecorded = positioned();
  EXPECT_CONTAINS(error_of([&] { check_model(unrecorded, "cnn dropout 0"); }),
                  "holds model (not recorded), this run's is cnn dropout 0");
}

TEST_F(CheckpointTest, OutputPathUnderARegularFileIsRefused) {
  const std::string file = (dir_ / "plain").string();
  write_file(file, "x");
  EXPECT_EQ(error_of([&] { check_output_dir(file + "/ckpts", "--checkpoint-dir"); }),
            "--checkpoint-dir " + file + "/ckpts: " + file +
                " is a regular file, not a directory: cannot create the directory under it");
  EXPECT_CONTAINS(error_of([&] { check_output_dir(file + "/a/b", "--log-dir"); }),
                  file + " is a regular file");
  EXPECT_EQ(error_of([&] { check_output_dir(file, "--checkpoint-dir"); }),
            "--checkpoint-dir " + file + ": " + file + " exists and is not a directory");
  EXPECT_CONTAINS(error_of([&] { check_output_file(file + "/t.json", "FJIT_TIMELINE"); }),
                  "FJIT_TIMELINE " + file + "/t.json: " + file + " exists and is not a directory");
  EXPECT_EQ(error_of([&] { check_output_file(dir_.string(), "FJIT_TIMELINE"); }),
            "FJIT_TIMELINE " + dir_.string() + ": is a directory, not a file");
  // Usable paths pass, and nothing is created.
  EXPECT_NO_THROW(check_output_dir((dir_ / "new" / "deeper").string(), "--checkpoint-dir"));
  EXPECT_NO_THROW(check_output_file((dir_ / "t.json").string(), "FJIT_TIMELINE"));
  EXPECT_NO_THROW(check_output_dir("", "--log-dir"));
  EXPECT_FALSE(fs::exists(dir_ / "new"));
}

TEST_F(CheckpointTest, OutputPathInAnUnwritableDirectoryIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_CONTAINS(error_of([&] { check_output_dir((dir_ / "ckpts").string(), "--checkpoint-dir"); }),
                  "directory " + dir_.string() + " is not writable");
  fs::permissions(dir_, fs::perms::owner_all);
}

}  // namespace
}  // namespace fjit::io::checkpoint_testing
