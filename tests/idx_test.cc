// Tests for examples/lib/idx_reader and batch_iterator: the real 16-example fixture
// (tests/data, made by tests/data/make_fmnist_fixture.py from the Debian data set), every
// documented error, the full data set when installed, and the deterministic batch order.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/io/data.h"
#include "core/io/idx.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace fjit;
using namespace fjit::io;

namespace {

// Facts of Fashion-MNIST's training set: the first 16 labels, and over the first 16
// images the sum and zlib crc32 of the raw pixel bytes and one pixel of image 0.
const std::vector<int32_t> kFirst16Labels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9, 5, 5, 7, 9};
constexpr int64_t kFirst16PixelSum = 877288;
constexpr uint32_t kFirst16PixelCrc = 0xba9a2acd;
constexpr int kImage0Row14Col14 = 217;

using fjit::testing::fixture_images;
using fjit::testing::fixture_labels;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}
std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}
std::string idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string out = be32(magic);
  for (uint32_t d : dims) out += be32(d);
  return out + data;
}

// A fresh directory per test, removed afterwards.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fjit-idx-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using fjit::testing::error_of;

}  // namespace

TEST(IdxFixture, ShapesLabelsAndPixels) {
  Dataset ds = load_dataset(fixture_images(), fixture_labels());
  EXPECT_EQ(ds["images"].dtype(), DType::f32);
  EXPECT_EQ(ds["images"].shape(), (Shape{16, 784}));
  EXPECT_EQ(ds["labels"].dtype(), DType::i32);
  EXPECT_EQ(ds["labels"].shape(), (Shape{16}));
  EXPECT_EQ(ds["labels"].to_vector<int32_t>(), kFirst16Labels);

  const float* px = ds["images"].data<float>();
  std::string bytes;
  int64_t sum = 0;
  for (int64_t i = 0; i < ds["images"].size(); ++i) {
    ASSERT_GE(px[i], 0.0f);
    ASSERT_LE(px[i], 1.0f);
    long b = std::lround(px[i] * 255.0f);
    ASSERT_EQ(px[i], static_cast<float>(b) / 255.0f) << "pixel " << i << " is not byte/255";
    sum += b;
    bytes += static_cast<char>(b);
  }
  EXPECT_EQ(sum, kFirst16PixelSum);
  EXPECT_EQ(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()), kFirst16PixelCrc);
  EXPECT_EQ(px[14 * 28 + 14], kImage0Row14Col14 / 255.0f);
}

TEST(IdxFixture, ReadIdxKeepsRawBytesAndDims) {
  IdxFile f = read_idx(fixture_images(), kIdxImagesMagic);
  EXPECT_EQ(f.magic, kIdxImagesMagic);
  EXPECT_EQ(f.dims, (std::vector<int64_t>{16, 28, 28}));
  ASSERT_EQ(f.bytes.size(), 16u * 784u);
  EXPECT_EQ(f.bytes[14 * 28 + 14], kImage0Row14Col14);
}

TEST_F(IdxTest, PlainFileReadsLikeGzip) {
  IdxFile f = read_idx(fixture_images(), kIdxImagesMagic);
  write_file(tmp("plain-idx3"), idx_bytes(kIdxImagesMagic, {16, 28, 28},
                                          std::string(f.bytes.begin(), f.bytes.end())));
  EXPECT_TRUE(load_images(tmp("plain-idx3")).bit_equal(load_images(fixture_images())));
}

TEST_F(IdxTest, TruncatedPlainFileSaysWhatHeaderPromised) {
  write_file(tmp("short"), idx_bytes(kIdxImagesMagic, {16, 28, 28}, std::string(1000, '\x7f')));
  EXPECT_EQ(error_of([&] { load_images(tmp("short")); }),
            tmp("short") + ": truncated: header says 16 images of 28x28 (12544 bytes), file "
                           "holds 1000 bytes after the 16-byte header");
}

TEST_F(IdxTest, TruncatedGzipFileNamesFileAndGzipEnd) {
  std::string gz = slurp(fixture_images());
  write_file(tmp("cut.gz"), gz.substr(0, gz.size() / 2));
  std::string msg = error_of([&] { load_images(tmp("cut.gz")); });
  EXPECT_EQ(msg.rfind(tmp("cut.gz") + ": truncated: header says 16 images of 28x28 (12544 bytes), "
                                      "file holds ", 0), 0u) << msg;
  EXPECT_NE(msg.find("gzip stream ends early"), std::string::npos) << msg;
}

TEST_F(IdxTest, GzipCutJustBeforeItsTrailerIsTruncated) {
  std::string gz = slurp(fixture_labels());
  write_file(tmp("notrailer.gz"), gz.substr(0, gz.size() - 8));  // CRC32 + ISIZE missing
  std::string msg = error_of([&] { load_labels(tmp("notrailer.gz")); });
  EXPECT_NE(msg.find(": truncated: header says 16 labels (16 bytes) are all there; the gzip stream "
                     "ends early"), std::string::npos) << msg;
}

TEST_F(IdxTest, TruncatedHeader) {
  write_file(tmp("h1"), std::string("\0\0", 2));
  EXPECT_EQ(error_of([&] { load_labels(tmp("h1")); }),
            tmp("h1") + ": truncated: expected a 4-byte IDX magic number 0x00000801, file holds 2 bytes");
  write_file(tmp("h2"), be32(kIdxImagesMagic) + be32(16) + be32(28));
  EXPECT_EQ(error_of([&] { load_images(tmp("h2")); }),
            tmp("h2") + ": truncated: header promises 3 dimensions (16-byte header), file holds 12 bytes");
}

TEST_F(IdxTest, CorruptGzipDataIsAGzipError) {
  std::string gz = slurp(fixture_images());
  gz[gz.size() - 8] ^= 0x5a;  // the stored CRC32 of the uncompressed data
  write_file(tmp("bad.gz"), gz);
  std::string msg = error_of([&] { load_images(tmp("bad.gz")); });
  EXPECT_EQ(msg.rfind(tmp("bad.gz") + ": gzip error: ", 0), 0u) << msg;
}

TEST_F(IdxTest, BadMagicSaysExpectedAndFound) {
  std::string msg = error_of([&] { load_images(fixture_labels()); });
  EXPECT_EQ(msg, fixture_labels() + ": bad magic: expected magic 0x00000803 (IDX images: unsigned "
                                    "bytes, 3 dimensions), found 0x00000801 (IDX labels: unsigned "
                                    "bytes, 1 dimension)");
  write_file(tmp("float-idx"), idx_bytes(0x00000D03, {1, 1, 1}, std::string(4, '\0')));
  msg = error_of([&] { load_images(tmp("float-idx")); });
  EXPECT_NE(msg.find("found 0x00000d03 (IDX with element type 0x0d, 3 dimensions)"), std::string::npos) << msg;
  write_file(tmp("text"), "hello, world");
  msg = error_of([&] { load_labels(tmp("text")); });
  EXPECT_NE(msg.find("found 0x68656c6c (not an IDX file"), std::string::npos) << msg;
}

TEST_F(IdxTest, TrailingBytesAreMalformed) {
  write_file(tmp("long"), idx_bytes(kIdxLabelsMagic, {3}, std::string("\1\2\3\4", 4)));
  EXPECT_EQ(error_of([&] { load_labels(tmp("long")); }),
            tmp("long") + ": malformed: header says 3 labels (3 bytes), but the file holds more "
                          "bytes after them");
}

TEST_F(IdxTest, HugeHeaderIsRejectedBeforeAllocating) {
  write_file(tmp("huge"), idx_bytes(kIdxImagesMagic, {0xffffffff, 0xffffffff, 0xffffffff}, ""));
  std::string msg = error_of([&] { load_images(tmp("huge")); });
  EXPECT_NE(msg.find("malformed header"), std::string::npos) << msg;
}

// No images, but images of 2^32-1 x 2^32-1 pixels: the header's item size alone is too large
// (it once overflowed into a negative extent reported without the file's name).
TEST_F(IdxTest, HugeItemsOfAnEmptyFileAreRejected) {
  write_file(tmp("empty-huge"), idx_bytes(kIdxImagesMagic, {0, 0xffffffff, 0xffffffff}, ""));
  std::string msg = error_of([&] { load_images(tmp("empty-huge")); });
  EXPECT_NE(msg.find(tmp("empty-huge")), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed header"), std::string::npos) << msg;
}

TEST_F(IdxTest, MissingFile) {
  std::string msg = error_of([&] { load_images(tmp("absent.gz")); });
  EXPECT_EQ(msg, tmp("absent.gz") + ": cannot open: No such file or directory");
}

TEST_F(IdxTest, LabelCountMismatchNamesBothFiles) {
  write_gz(tmp("15-labels.gz"), idx_bytes(kIdxLabelsMagic, {15}, std::string(15, '\1')));
  EXPECT_EQ(error_of([&] { load_dataset(fixture_images(), tmp("15-labels.gz")); }),
            fixture_images() + " holds 16 images but " + tmp("15-labels.gz") +
                " holds 15 labels: the counts must match");
}

TEST_F(IdxTest, FashionMnistNamingFallbackAndLabelRange) {
  // Unpacked files (no .gz) are found too.
  IdxFile im = read_idx(fixture_images(), kIdxImagesMagic);
  write_file(tmp("t10k-images-idx3-ubyte"),
             idx_bytes(kIdxImagesMagic, {16, 28, 28}, std::string(im.bytes.begin(), im.bytes.end())));
  std::string labels(kFirst16Labels.begin(), kFirst16Labels.end());
  write_file(tmp("t10k-labels-idx1-ubyte"), idx_bytes(kIdxLabelsMagic, {16}, labels));
  Dataset ds = load_fashion_mnist(dir_.string(), "t10k");
  EXPECT_EQ(ds["labels"].to_vector<int32_t>(), kFirst16Labels);

  labels[5] = 12;
  write_file(tmp("t10k-labels-idx1-ubyte"), idx_bytes(kIdxLabelsMagic, {16}, labels));
  EXPECT_EQ(error_of([&] { load_fashion_mnist(dir_.string(), "t10k"); }),
            tmp("t10k-labels-idx1-ubyte") +
                ": label 12 at index 5 is not a Fashion-MNIST class (expected 0..9)");
  EXPECT_THROW(load_fashion_mnist(dir_.string(), "test"), std::invalid_argument);
  // With neither name present, the error names the .gz file, what belongs there and where it
  // usually comes from.
  const std::string missing = error_of([&] { load_fashion_mnist(dir_.string(), "train"); });
  EXPECT_EQ(missing.find(tmp("train-images-idx3-ubyte.gz") + ": cannot open"), 0u) << missing;
  EXPECT_NE(missing.find("expected Fashion-MNIST's train images"), std::string::npos) << missing;
  EXPECT_NE(missing.find("dataset-fashion-mnist"), std::string::npos) << missing;
}

TEST(IdxRealData, FullFashionMnistWhenInstalled) {
  if (!fs::exists(std::string(kDebianFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << kDebianFashionMnistDir;
  Dataset train = load_fashion_mnist(kDebianFashionMnistDir, "train");
  Dataset test = load_fashion_mnist(kDebianFashionMnistDir, "t10k");
  EXPECT_EQ(train["images"].shape(), (Shape{60000, 784}));
  EXPECT_EQ(train["labels"].shape(), (Shape{60000}));
  EXPECT_EQ(test["images"].shape(), (Shape{10000, 784}));
  EXPECT_EQ(test["labels"].shape(), (Shape{10000}));
  // The classes are balanced: 6000 of each in train, 1000 in t10k.
  std::vector<int> train_count(10), test_count(10);
  for (int32_t y : train["labels"].to_vector<int32_t>()) ++train_count[y];
  for (int32_t y : test["labels"].to_vector<int32_t>()) ++test_count[y];
  EXPECT_EQ(train_count, std::vector<int>(10, 6000));
  EXPECT_EQ(test_count, std::vector<int>(10, 1000));
  // The fixture is the head of the real training set.
  Dataset head = load_dataset(fixture_images(), fixture_labels());
  EXPECT_EQ(std::memcmp(train["images"].raw(), head["images"].raw(), head["images"].nbytes()), 0);
  EXPECT_EQ(std::memcmp(train["labels"].raw(), head["labels"].raw(), head["labels"].nbytes()), 0);
}

// ---- BatchIterator ----

TEST(BatchOrder, PermutationIsFixedAcrossPlatforms) {
  // Golden values, also reproduced by an independent mt19937_64 written in Python: if these
  // change, resumed runs would see different batches than the run that saved them.
  EXPECT_EQ(epoch_permutation(10, 42, 0), (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
  EXPECT_EQ(epoch_permutation(10, 42, 1), (std::vector<int64_t>{2, 4, 3, 8, 1, 7, 5, 9, 0, 6}));
  std::vector<int64_t> p = epoch_permutation(1000, 7, 3);
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 1000u);
  EXPECT_EQ(p, epoch_permutation(1000, 7, 3));
  EXPECT_NE(p, epoch_permutation(1000, 7, 4));
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

TEST(BatchOrder, BatchesFollowThePermutationIntoReusedBuffers) {
  Dataset ds = load_dataset(fixture_images(), fixture_labels());
  BatchIterator it(ds, {.batch_size = 5, .seed = 11, .shuffle = true, .drop_last = true});
  EXPECT_EQ(it.batches_per_epoch(), 3);
  const std::vector<int64_t> perm = it.permutation();
  EXPECT_EQ(perm, epoch_permutation(16, 11, 0));
  Array first_buffer;
  int64_t batches = 0;
  while (auto b = it.next()) {
    ASSERT_EQ((*b)["images"].shape(), (Shape{5, 784}));
    ASSERT_EQ((*b)["labels"].shape(), (Shape{5}));
    EXPECT_EQ(b->index, batches);
    EXPECT_EQ(b->epoch, 0);
    if (batches == 0) first_buffer = (*b)["images"];
    EXPECT_TRUE((*b)["images"].shares_storage_with(first_buffer)) << "batches must reuse one buffer";
    for (int64_t k = 0; k < 5; ++k) {
      int64_t src = perm[batches * 5 + k];
      EXPECT_EQ((*b)["labels"].data<int32_t>()[k], kFirst16Labels[src]);
      EXPECT_EQ(std::memcmp((*b)["images"].data<float>() + k * 784, ds["images"].data<float>() + src * 784,
                            784 * sizeof(float)), 0);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(it.next(), nullptr);
  it.set_epoch(1);
  EXPECT_NE(it.permutation(), perm);
  EXPECT_NE(it.next(), nullptr);
}

TEST(BatchOrder, KeepLastCoversEveryExampleOnce) {
  Dataset ds = load_dataset(fixture_images(), fixture_labels());
  BatchIterator it(ds, {.batch_size = 5, .seed = 3, .shuffle = true, .drop_last = false});
  EXPECT_EQ(it.batches_per_epoch(), 4);
  std::vector<int32_t> seen;
  std::vector<int64_t> sizes;
  while (auto b = it.next()) {
    sizes.push_back((*b)["labels"].shape()[0]);
    for (int32_t y : (*b)["labels"].to_vector<int32_t>()) seen.push_back(y);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 5, 1}));
  std::vector<int32_t> expected = kFirst16Labels;
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
}

TEST(BatchOrder, SeekResumesWhereARunLeftOff) {
  Dataset ds = load_dataset(fixture_images(), fixture_labels());
  BatchOptions opt{.batch_size = 4, .seed = 99};
  BatchIterator a(ds, opt), b(ds, opt);
  a.set_epoch(2);
  a.next();
  a.next();
  Array third = (*a.next())["images"].clone();
  b.seek(2, 2);
  EXPECT_TRUE((*b.next())["images"].bit_equal(third));
  EXPECT_THROW(b.seek(0, 5), std::invalid_argument);
  EXPECT_THROW(b.seek(-1, 0), std::invalid_argument);
}

TEST(BatchOrder, NoShuffleKeepsStoredOrder) {
  Dataset ds = load_dataset(fixture_images(), fixture_labels());
  BatchIterator it(ds, {.batch_size = 16, .shuffle = false});
  auto b = it.next();
  ASSERT_TRUE(b);
  EXPECT_TRUE((*b)["labels"].bit_equal(ds["labels"]));
  EXPECT_TRUE((*b)["images"].bit_equal(ds["images"]));
}

TEST(BatchOrder, RejectsBadArguments) {
  Array x(DType::f32, {4, 2}), y(DType::i32, {3});
  const std::string mismatch = error_of<std::invalid_argument>([&] { Dataset({{"x", x}, {"y", y}}); });
  EXPECT_EQ(mismatch, "Dataset: columns differ in their number of examples (x f32[4,2], y i32[3])");
  const Dataset ok({{"x", x}, {"y", Array(DType::i32, {4})}});
  EXPECT_THROW(BatchIterator(ok, {.batch_size = 0}), std::invalid_argument);
  EXPECT_THROW(Dataset({{"x", Array::scalar(1.0f)}}), std::invalid_argument);
  EXPECT_THROW(BatchIterator(Dataset(), {.batch_size = 1}), std::invalid_argument);
  EXPECT_THROW(BatchIterator(ok, {.batch_size = 2, .shard = {.first = 1, .count = 2, .of = 2}}),
               std::invalid_argument);
  EXPECT_NE(error_of<std::out_of_range>([&] { (void)ok["labels"]; }).find("have: x, y"), std::string::npos);
}
