// Tests for core/io/checkpoint (safetensors save/load, run configurations): round trips, the
// on-disk format checked byte by byte, every documented load error, and model and
// configuration compatibility checks. Saving and its failures: tests/checkpoint_save_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "tests/checkpoint_testing.h"
#include "tests/test_util.h"

using namespace fjit;
using namespace fjit::io;
using namespace fjit::io::checkpoint_testing;
using fjit::testing::error_of;

TEST_F(CheckpointTest, RoundTripIsBitExactForAllDtypes) {
  Checkpoint in = sample();
  save_checkpoint(path_, in);
  Checkpoint out = load_checkpoint(path_);
  ASSERT_EQ(out.tensors.size(), in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in.tensors[i].first);
    EXPECT_TRUE(out.tensors[i].second.bit_equal(in.tensors[i].second))
        << in.tensors[i].first << ": " << out.tensors[i].second.to_string();
  }
  EXPECT_EQ(out.find("empty")->shape(), (Shape{0, 3}));
  EXPECT_EQ(out.find("lr")->shape(), Shape{});
  EXPECT_EQ(out.find("absent"), nullptr);
  auto expected_meta = in.metadata;
  ASSERT_EQ(out.metadata.count(kChecksumKey), 1u);
  EXPECT_EQ(out.metadata.at(kChecksumKey).size(), 8u);
  expected_meta[kChecksumKey] = out.metadata.at(kChecksumKey);
  EXPECT_EQ(out.metadata, expected_meta);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(CheckpointTest, FileIsStandardSafetensors) {
  uint64_t n = 0;
  std::string bytes = saved(&n);
  ASSERT_GE(bytes.size(), 8 + n);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  std::string header = bytes.substr(8, n);
  // The literal text a safetensors reader will see (checked without our parser). Data is
  // laid out widest dtype first, so every tensor is aligned to its element size.
  EXPECT_EQ(header.rfind("{\"__metadata__\":{", 0), 0u) << header;
  EXPECT_CONTAINS(header, "\"w1\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[16,64]}");
  EXPECT_CONTAINS(header, "\"b1\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}");
  EXPECT_CONTAINS(header, "\"step_count\":{\"dtype\":\"I32\",\"shape\":[5],\"data_offsets\":[64,84]}");
  EXPECT_CONTAINS(header, "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[2,2],\"data_offsets\":[88,92]}");
  EXPECT_CONTAINS(header, "\"lr\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[84,88]}");
  EXPECT_CONTAINS(header, "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[88,88]}");
  EXPECT_CONTAINS(header, "\"step\":\"1200\"");
  EXPECT_CONTAINS(header, "\"note\":\"quote \\\" backslash \\\\ newline \\n ü\"");
  EXPECT_LT(header.find("\"w1\""), header.find("\"b1\"")) << "header keeps the saved order";
  EXPECT_EQ(bytes.size(), 8 + n + 92) << "no bytes after the last tensor";
  // Every documented key, through the parser; the data sits where the offsets say.
  const nlohmann::json root = nlohmann::json::parse(header);
  Checkpoint c = sample();
  for (const auto& [name, a] : c.tensors) {
    ASSERT_TRUE(root.contains(name)) << name;
    const nlohmann::json& spec = root.at(name);
    ASSERT_TRUE(spec.contains("dtype"));
    ASSERT_TRUE(spec.contains("shape"));
    ASSERT_TRUE(spec.contains("data_offsets"));
    const uint64_t begin = spec.at("data_offsets").at(0).get<uint64_t>();
    EXPECT_EQ(bytes.substr(8 + n + begin, a.nbytes()), raw_bytes(a)) << name;
    EXPECT_EQ((8 + n + begin) % dtype_size(a.dtype()), 0u) << name << " misaligned";
  }
  EXPECT_EQ(root.at("__metadata__").at("seed").get<std::string>(), "7");
}

TEST_F(CheckpointTest, LoadsFilesWithoutOurChecksum) {
  // As another tool writes them: no __metadata__, members not in offset order.
  std::string header =
      R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  float a = 2.5f;
  int32_t b = -9;
  write_file(path_, st_file(header, std::string(reinterpret_cast<char*>(&a), 4) +
                                        std::string(reinterpret_cast<char*>(&b), 4)));
  Checkpoint c = load_checkpoint(path_);
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].first, "b") << "tensors come back in the header's order";
  EXPECT_EQ(c.tensors[0].second.item<int32_t>(), -9);
  EXPECT_EQ(c.tensors[1].second.item<float>(), 2.5f);
  EXPECT_TRUE(c.metadata.empty());
}

TEST_F(CheckpointTest, TruncatedFiles) {
  uint64_t n = 0;
  std::string bytes = saved(&n);
  write_file(path_, bytes.substr(0, 5));
  EXPECT_EQ(error_of([&] { load_checkpoint(path_); }),
            path_ + ": truncated: file holds 5 bytes, too few for the 8-byte header length");
  write_file(path_, bytes.substr(0, 8 + n - 10));
  EXPECT_EQ(error_of([&] { load_checkpoint(path_); }),
            path_ + ": header length " + std::to_string(n) + " is larger than the rest of the file (" +
                std::to_string(n - 10) + " bytes): truncated or not a safetensors file");
  write_file(path_, bytes.substr(0, bytes.size() - 1));
  EXPECT_CONTAINS(error_of([&] { load_checkpoint(path_); }),
                  path_ + ": tensor \"mask\": data_offsets [88, 92] run past the end of the data (91 bytes");
}

TEST_F(CheckpointTest, CorruptedDataByteFailsTheChecksum) {
  uint64_t n = 0;
  std::string bytes = saved(&n);
  bytes[8 + n + 50] ^= 0x01;  // inside w1
  write_file(path_, bytes);
  std::string msg = error_of([&] { load_checkpoint(path_); });
  EXPECT_EQ(msg.rfind(path_ + ": checksum mismatch: metadata fjit.checksum is ", 0), 0u) << msg;
  EXPECT_CONTAINS(msg, "(its header or data changed after it was written)");
}

TEST_F(CheckpointTest, CorruptedHeaderJson) {
  uint64_t n = 0;
  std::string bytes = saved(&n);
  size_t colon = bytes.find("\"w1\":") + 4;
  bytes[colon] = ';';
  write_file(path_, bytes);
  const std::string error = error_of([&] { load_checkpoint(path_); });
  EXPECT_EQ(error.rfind(path_ + ": malformed header: ", 0), 0u) << error;
  EXPECT_CONTAINS(error, "parse error");
}

TEST_F(CheckpointTest, HeaderLengthLargerThanFile) {
  std::string bytes = saved();
  std::string forged = le64_bytes(uint64_t{1} << 40) + bytes.substr(8);
  write_file(path_, forged);
  EXPECT_EQ(error_of([&] { load_checkpoint(path_); }),
            path_ + ": header length 1099511627776 is larger than the rest of the file (" +
                std::to_string(bytes.size() - 8) + " bytes): truncated or not a safetensors file");
}

TEST_F(CheckpointTest, HeaderContentErrors) {
  auto load_with = [&](const std::string& header, const std::string& data) {
    write_file(path_, st_file(header, data));
    return error_of([&] { load_checkpoint(path_); });
  };
  const std::string d8(8, '\0');
  EXPECT_EQ(load_with(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", d8),
            path_ + ": tensor \"x\": dtype \"I64\" is not supported (fjit reads F32, F64, I32, "
            "BOOL, U8, U32, F16, BF16)");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8),
            path_ + ": tensor \"x\": f32[3] needs 12 bytes but data_offsets [0, 8] span 8");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", d8),
            path_ + ": tensor \"y\" overlaps the tensor before it (begins at byte 2, previous one ends at 4)");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
            path_ + ": gap of 4 bytes before tensor \"x\" (begins at byte 4)");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8),
            path_ + ": the tensors cover 4 bytes but the file holds 8 bytes of data after the header");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\1\2", 2)),
            path_ + ": tensor \"x\": BOOL element 1 holds 2, expected 0 or 1");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
            path_ + ": tensor \"x\": shape must hold non-negative integers");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", "1234"),
            path_ + ": tensor \"x\": unexpected key \"extra\" (expected dtype, shape, data_offsets)");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", "1234"),
            path_ + ": header names \"x\" twice");
  EXPECT_EQ(load_with(R"({"__metadata__":{"step":3}})", ""),
            path_ + ": __metadata__ value for \"step\" must be a string, found number");
  EXPECT_EQ(load_with(R"({"__metadata__":{"step":"3","step":"4"}})", ""),
            path_ + ": header names \"step\" twice");
  EXPECT_EQ(load_with(R"([1,2])", ""), path_ + ": malformed header: the JSON header must start with '{'");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "1234"),
            path_ + ": tensor \"x\": shape must hold non-negative integers");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", "1234"),
            path_ + ": tensor \"x\": needs \"data_offsets\" as [begin, end]");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", "1234"),
            path_ + ": tensor \"x\": shape must hold non-negative integers");
  // Hostile headers: deep nesting and bytes that are not UTF-8 are errors, not crashes.
  EXPECT_CONTAINS(load_with("{\"a\":" + std::string(100000, '['), ""), path_ + ": malformed header: ");
  EXPECT_CONTAINS(load_with("{\"\xff\":1}", ""), path_ + ": malformed header: ");
  EXPECT_CONTAINS(load_with(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""),
                  "has too many elements");
  EXPECT_EQ(load_with(R"({"x":{"dtype":"F64","shape":[1000000000000,1000],"data_offsets":[0,8]}})", d8),
            path_ + ": tensor \"x\": f64[1000000000000,1000] needs 8000000000000000 bytes but data_offsets "
                    "[0, 8] span 8");
  // A zero extent empties the tensor, however large the other extents are.
  write_file(path_, st_file(R"({"x":{"dtype":"F64","shape":[1000000000000,0],"data_offsets":[0,0]}})", ""));
  EXPECT_EQ(load_checkpoint(path_).tensors.at(0).second.shape(), (Shape{1000000000000, 0}));
}

TEST_F(CheckpointTest, MissingFile) {
  EXPECT_EQ(error_of([&] { load_checkpoint(path_); }),
            path_ + ": cannot open checkpoint: No such file or directory");
}

TEST_F(CheckpointTest, CheckCompatibleNamesTheFirstMismatch) {
  Checkpoint c;
  c.tensors = {{"w1", Array(DType::f32, {784, 512})}, {"b1", Array(DType::f32, {512})}};
  NamedArrays same = {{"w1", Array(DType::f32, {784, 512})}, {"b1", Array(DType::f32, {512})}};
  EXPECT_NO_THROW(check_compatible(c, same));
  EXPECT_EQ(error_of([&] { check_compatible(c, {{"w1", Array(DType::f32, {784, 256})}, same[1]}); }),
            "checkpoint: incompatible checkpoint: checkpoint has w1 f32[784,512], model expects f32[784,256]");
  EXPECT_EQ(error_of([&] { check_compatible(c, {same[0], {"b1", Array(DType::f64, {512})}}); }),
            "checkpoint: incompatible checkpoint: checkpoint has b1 f32[512], model expects f64[512]");
  EXPECT_EQ(error_of([&] { check_compatible(c, {same[0], same[1], {"w2", Array(DType::f32, {512, 10})}}); }),
            "checkpoint: incompatible checkpoint: it lacks w2, model expects f32[512,10]");
  EXPECT_EQ(error_of([&] { check_compatible(c, {same[0]}); }),
            "checkpoint: incompatible checkpoint: checkpoint has b1 f32[512], which the model does not expect");
}

TEST_F(CheckpointTest, RunConfigDifferencesAreListedWithTheFile) {
  Checkpoint c;
  c.path = "/runs/ckpt-9.safetensors";
  set_config(c, {{"lr", "0.001"}, {"layers", "784,10"}, {"schedule", "cosine"}});
  EXPECT_EQ(config_of(c).size(), 3u);
  EXPECT_TRUE(config_differences(c, config_of(c)).empty());
  EXPECT_NO_THROW(check_config(c, config_of(c), "hint"));
  const std::vector<std::string> diff =
      config_differences(c, {{"lr", "0.002"}, {"layers", "784,10"}, {"warmup", "5"}});
  EXPECT_EQ(diff, (std::vector<std::string>{"lr: checkpoint 0.001, now 0.002",
                                            "schedule: checkpoint cosine, now (not set)",
                                            "warmup: checkpoint (not set), now 5"}));
  EXPECT_EQ(error_of([&] { check_config(c, {{"lr", "0.002"}, {"layers", "784,10"}, {"schedule", "cosine"}},
                                        "pass --force"); }),
            "/runs/ckpt-9.safetensors: this run's configuration differs from the checkpoint's: "
            "lr: checkpoint 0.001, now 0.002; pass --force");
  // Saved and loaded, the configuration travels in the metadata.
  Checkpoint saved_config = sample();
  set_config(saved_config, config_of(c));
  save_checkpoint(path_, saved_config);
  const Checkpoint loaded = load_checkpoint(path_);
  EXPECT_EQ(loaded.path, path_);
  EXPECT_EQ(config_of(loaded), config_of(c));
  EXPECT_EQ(error_of([&] { check_config(loaded, {}, ""); }).rfind(path_ + ": this run's configuration", 0), 0u);
  // Model mismatches name the file too, every one of them.
  EXPECT_EQ(error_of([&] { check_compatible(loaded, {{"w1", Array(DType::f32, {3, 5})}}); }).rfind(
                path_ + ": incompatible checkpoint: checkpoint has w1 f32[3,4], model expects f32[3,5]; "
                        "checkpoint has b1 ", 0), 0u);
}
