// Tests for core/io's token data: the byte tokenizer, token files (written from text, mapped,
// validated) and the sharded, resumable TokenBatches. Token files whose token i is i make
// every window's source position visible in the batch itself, the oracle of the batch tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "core/io/token_batches.h"
#include "core/io/token_file.h"
#include "core/io/tokenizer.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace fjit;
using namespace fjit::io;
using fjit::testing::error_of;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
std::string tiny_corpus() { return fjit::testing::fixture_dir() + "/tiny_corpus.txt"; }

class TokenDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fjit-tokens-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }
  // A token file of n tokens whose token i is i (vocab n: width 2 or 4).
  TokenFile positions(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 0);
    write_token_file(tmp("pos.tok"), t, static_cast<int32_t>(n));
    return TokenFile::open(tmp("pos.tok"));
  }
  fs::path dir_;
};

// Draws `n` batches; each is inputs and targets.
std::vector<std::pair<Array, Array>> draw(TokenBatches& b, int n) {
  std::vector<std::pair<Array, Array>> out;
  for (int i = 0; i < n; ++i) {
    Array x, y;
    b.next(x, y);
    out.emplace_back(x, y);
  }
  return out;
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
  ByteTokenizer tok;
  const auto ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], i < 256 ? int(i) : int(511 - i));
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.encode("h\xC3\xA9llo"), (std::vector<int32_t>{'h', 0xC3, 0xA9, 'l', 'l', 'o'}));
  EXPECT_EQ(ByteTokenizer::kVocab, 256);
}

TEST(ByteTokenizer, BadIdNamesItsPosition) {
  ByteTokenizer tok;
  std::string e = error_of<std::invalid_argument>([&] { tok.decode({65, 66, 256, 67}); });
  EXPECT_NE(e.find("id 256 at position 2"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { tok.decode({-1}); });
  EXPECT_NE(e.find("id -1 at position 0"), std::string::npos) << e;
}

TEST_F(TokenDataTest, TextFilesRoundTrip) {
  const std::string a = "Tab\there, back\bspace, bell\a, caf\xC3\xA9\n";
  const std::string b = "\xF0\x9F\x99\x82 and \xE2\x82\xAC, no newline at the end";
  write_file(tmp("a.txt"), a);
  write_file(tmp("b.txt"), b);
  EXPECT_EQ(write_token_file(tmp("t.tok"), {tmp("a.txt"), tmp("b.txt")}),
            static_cast<int64_t>(a.size() + b.size()));
  EXPECT_EQ(fs::file_size(tmp("t.tok")), kTokenFileHeaderBytes + a.size() + b.size());
  TokenFile t = TokenFile::open(tmp("t.tok"));
  EXPECT_EQ(t.size(), static_cast<int64_t>(a.size() + b.size()));
  EXPECT_EQ(t.vocab(), 256);
  EXPECT_EQ(t.width(), 1);
  EXPECT_EQ(t.path(), tmp("t.tok"));
  t.verify();
  std::vector<int32_t> ids(static_cast<size_t>(t.size()));
  t.copy(0, t.size(), ids.data());
  EXPECT_EQ(ByteTokenizer().decode(ids), a + b);
  for (int64_t i = 0; i < t.size(); ++i) ASSERT_EQ(t.at(i), ids[i]);
  EXPECT_THROW(t.at(t.size()), std::out_of_range);
  EXPECT_THROW(t.copy(1, t.size(), ids.data()), std::out_of_range);

  TokenFile moved = std::move(t);  // the mapping moves with it
  EXPECT_EQ(moved.at(0), 'T');
  EXPECT_EQ(t.size(), 0);
}

TEST_F(TokenDataTest, TinyCorpusFixture) {
  const std::string text = slurp(tiny_corpus());
  ASSERT_GE(text.size(), 20000u);
  EXPECT_TRUE(is_text({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  EXPECT_EQ(corpus_files(tiny_corpus()), std::vector<std::string>{tiny_corpus()});
  EXPECT_EQ(write_token_file(tmp("c.tok"), {tiny_corpus()}), static_cast<int64_t>(text.size()));
  TokenFile t = TokenFile::open(tmp("c.tok"));
  t.verify();
  std::string back;
  for (uint8_t c : t.bytes()) back += static_cast<char>(c);
  EXPECT_EQ(back, text);

  // Every row is the corpus's text at its window, and its targets the text one byte later.
  TokenBatches batches(t, Split::kTrain, {.context = 64, .global_batch = 4, .seed = 3}, 0, 4);
  Array x, y;
  for (int g = 0; g < 3; ++g) {
    const int64_t pos = batches.position();
    batches.next(x, y);
    for (int64_t r = 0; r < 4; ++r) {
      const auto start = static_cast<size_t>(batches.window_start(pos, r));
      const auto xs = x.rows(r, r + 1).to_vector<int32_t>(), ys = y.rows(r, r + 1).to_vector<int32_t>();
      EXPECT_EQ(ByteTokenizer().decode(xs), text.substr(start, 64));
      EXPECT_EQ(ByteTokenizer().decode(ys), text.substr(start + 1, 64));
    }
  }
}

TEST_F(TokenDataTest, WideTokensRoundTrip) {
  const std::vector<int32_t> t = {0, 1, 999, 256, 65535, 7};
  write_token_file(tmp("w2.tok"), t, 65536);
  TokenFile f2 = TokenFile::open(tmp("w2.tok"));
  EXPECT_EQ(f2.width(), 2);
  EXPECT_EQ(f2.vocab(), 65536);
  std::vector<int32_t> back(t.size());
  f2.copy(0, f2.size(), back.data());
  EXPECT_EQ(back, t);
  f2.verify();
  write_token_file(tmp("w4.tok"), t, 70000);
  TokenFile f4 = TokenFile::open(tmp("w4.tok"));
  EXPECT_EQ(f4.width(), 4);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(f4.at(static_cast<int64_t>(i)), t[i]);
  const std::string e = error_of<std::invalid_argument>([&] { write_token_file(tmp("bad.tok"), t, 1000); });
  EXPECT_NE(e.find("token 65535 at position 4"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp("bad.tok")));
}

TEST_F(TokenDataTest, TextErrorsNameTheFileAndOffset) {
  write_file(tmp("ok.txt"), "fine\n");
  write_file(tmp("empty.txt"), "");
  write_file(tmp("nul.txt"), std::string("abc\0def", 7));
  write_file(tmp("ff.txt"), "abcd\xFF");
  write_file(tmp("esc.txt"), "ab\x1B[0m");
  write_file(tmp("cut.txt"), "euro \xE2\x82");
  auto err = [&](const std::string& f) {
    return error_of([&] { write_token_file(tmp("out.tok"), {tmp("ok.txt"), tmp(f)}); });
  };
  std::string e = err("empty.txt");
  EXPECT_NE(e.find(tmp("empty.txt") + ": empty file"), std::string::npos) << e;
  e = err("nul.txt");
  EXPECT_NE(e.find(tmp("nul.txt") + ": not text at byte offset 3: a NUL"), std::string::npos) << e;
  e = err("ff.txt");
  EXPECT_NE(e.find(tmp("ff.txt") + ": not text at byte offset 4: byte 0xFF"), std::string::npos) << e;
  e = err("esc.txt");
  EXPECT_NE(e.find("offset 2: control byte 0x1B"), std::string::npos) << e;
  e = err("cut.txt");
  EXPECT_NE(e.find("offset 5: a UTF-8 character cut short"), std::string::npos) << e;
  e = err("missing.txt");
  EXPECT_NE(e.find(tmp("missing.txt") + ": cannot open"), std::string::npos) << e;
  e = error_of([&] { write_token_file(tmp("out.tok"), {dir_.string()}); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  EXPECT_THROW(write_token_file(tmp("out.tok"), std::vector<std::string>{}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(tmp("out.tok")));  // nothing half-written

  // Past the first read chunk: a character straddling the chunk boundary is text, and a bad
  // byte's offset counts from the file's start.
  std::string big(size_t{1} << 20, 'x');
  big.replace(big.size() - 1, 1, "\xC3");
  big += "\xA9 ok";
  write_file(tmp("big.txt"), big);
  EXPECT_EQ(write_token_file(tmp("out.tok"), {tmp("big.txt")}), static_cast<int64_t>(big.size()));
  big += '\x01';
  write_file(tmp("big.txt"), big);
  e = error_of([&] { write_token_file(tmp("out.tok"), {tmp("big.txt")}); });
  EXPECT_NE(e.find("offset " + std::to_string(big.size() - 1)), std::string::npos) << e;
}

TEST_F(TokenDataTest, TokenFileErrorsNameThePath) {
  write_file(tmp("a.txt"), std::string(100, 'a'));
  write_token_file(tmp("t.tok"), {tmp("a.txt")});
  const std::string good = slurp(tmp("t.tok"));
  auto open_err = [&](const std::string& bytes) {
    write_file(tmp("x.tok"), bytes);
    return error_of([&] { TokenFile::open(tmp("x.tok")); });
  };
  std::string e = open_err(good.substr(0, good.size() - 1));
  EXPECT_NE(e.find(tmp("x.tok") + ": truncated token file: the header promises 100 tokens"),
            std::string::npos) << e;
  e = open_err(good.substr(0, 30));
  EXPECT_NE(e.find(tmp("x.tok") + ": truncated token file: 30 bytes"), std::string::npos) << e;
  e = open_err("");
  EXPECT_NE(e.find("truncated token file: 0 bytes"), std::string::npos) << e;
  e = open_err(std::string(200, 'a'));
  EXPECT_NE(e.find(tmp("x.tok") + ": not an fjit token file"), std::string::npos) << e;
  e = open_err("\x89PNG");
  EXPECT_NE(e.find("not an fjit token file"), std::string::npos) << e;
  e = open_err(good + "z");
  EXPECT_NE(e.find("1 bytes after the 100 tokens"), std::string::npos) << e;
  std::string corrupt = good;
  corrupt[24] ^= 1;  // the count
  e = open_err(corrupt);
  EXPECT_NE(e.find("header's checksum"), std::string::npos) << e;
  e = error_of([&] { TokenFile::open(tmp("missing.tok")); });
  EXPECT_NE(e.find(tmp("missing.tok") + ": cannot open"), std::string::npos) << e;

  corrupt = good;
  corrupt[kTokenFileHeaderBytes + 50] = 'b';  // a token: open() succeeds, verify() notices
  write_file(tmp("x.tok"), corrupt);
  TokenFile t = TokenFile::open(tmp("x.tok"));
  e = error_of([&] { t.verify(); });
  EXPECT_NE(e.find("checksum of the tokens"), std::string::npos) << e;
}

TEST_F(TokenDataTest, WindowsShiftTileAndCoverEachEpoch) {
  constexpr int64_t T = 7, B = 6;
  // 10 * 6 * 8 training tokens: 60 windows, 10 batches an epoch; the tail is validation.
  TokenFile f = positions(480 + 120);
  TokenBatches b(f, Split::kTrain, {.context = T, .global_batch = B, .validation_fraction = 0.2}, 0, B);
  ASSERT_EQ(b.windows(), 60);
  ASSERT_EQ(b.batches_per_epoch(), 10);
  std::vector<std::vector<int32_t>> order(2);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int32_t> starts;
    for (int g = 0; g < 10; ++g) {
      EXPECT_EQ(b.epoch(), epoch);
      Array x, y;
      b.next(x, y);
      ASSERT_EQ(x.shape(), (Shape{B, T}));
      ASSERT_EQ(y.shape(), (Shape{B, T}));
      for (int64_t r = 0; r < B; ++r) {
        const int32_t s = x.data<int32_t>()[r * T];
        for (int64_t t = 0; t < T; ++t) {  // token i is i: a row is consecutive positions
          ASSERT_EQ(x.data<int32_t>()[r * T + t], s + t);
          ASSERT_EQ(y.data<int32_t>()[r * T + t], s + t + 1);
        }
        EXPECT_EQ(s % (T + 1), 0) << "windows tile the split";
        EXPECT_LT(s + T, 480) << "training reads no validation token";
        starts.insert(s);
        order[epoch].push_back(s);
      }
    }
    EXPECT_EQ(starts.size(), 60u) << "epoch " << epoch << " visits every window once";
  }
  EXPECT_NE(order[0], order[1]) << "each epoch has its own order";
  EXPECT_EQ(b.epoch(), 2);
}

TEST_F(TokenDataTest, ValidationIsTheTailInFileOrder) {
  constexpr int64_t T = 4, B = 3;
  TokenFile f = positions(1000);  // validation: tokens [900, 1000), 20 windows, 6 batches
  TokenBatches v(f, Split::kValidation, {.context = T, .global_batch = B}, 0, B);
  EXPECT_EQ(v.tokens(), (std::pair<int64_t, int64_t>{900, 1000}));
  EXPECT_EQ(split_range(1000, Split::kTrain, 0.1), (std::pair<int64_t, int64_t>{0, 900}));
  ASSERT_EQ(v.batches_per_epoch(), 6);
  auto epoch0 = draw(v, 6), epoch1 = draw(v, 6);
  for (int g = 0; g < 6; ++g) {
    EXPECT_TRUE(epoch0[g].first.bit_equal(epoch1[g].first)) << "the same set every epoch";
    for (int64_t r = 0; r < B; ++r)
      EXPECT_EQ(epoch0[g].first.data<int32_t>()[r * T], 900 + (g * B + r) * (T + 1));
  }
}

TEST_F(TokenDataTest, ShardsOfTwoAndThreeProcessesMakeTheWholeBatch) {
  constexpr int64_t T = 5, B = 7;  // 7 rows: uneven over 2 and over 3 processes
  TokenFile f = positions(3000);
  const TokenBatchOptions o{.context = T, .global_batch = B, .seed = 11};
  TokenBatches whole(f, Split::kTrain, o, 0, B);
  const int n = static_cast<int>(whole.batches_per_epoch()) + 3;  // across an epoch boundary
  const auto expect = draw(whole, n);
  for (int parts : {2, 3}) {
    std::vector<std::vector<std::pair<Array, Array>>> got;
    for (int p = 0; p < parts; ++p) {
      auto [b, e] = split_rows(B, parts, p);
      TokenBatches shard(f, Split::kTrain, o, b, e);
      got.push_back(draw(shard, n));
    }
    for (int g = 0; g < n; ++g) {
      Array x(DType::i32, {B, T}), y(DType::i32, {B, T});
      for (int p = 0; p < parts; ++p) {
        auto [b, e] = split_rows(B, parts, p);
        std::memcpy(x.data<int32_t>() + b * T, got[p][g].first.raw(), got[p][g].first.nbytes());
        std::memcpy(y.data<int32_t>() + b * T, got[p][g].second.raw(), got[p][g].second.nbytes());
      }
      EXPECT_TRUE(x.bit_equal(expect[g].first)) << parts << " processes, batch " << g;
      EXPECT_TRUE(y.bit_equal(expect[g].second)) << parts << " processes, batch " << g;
    }
  }
}

TEST_F(TokenDataTest, ResumeYieldsTheUninterruptedBatches) {
  TokenFile f = positions(2000);
  const TokenBatchOptions o{.context = 9, .global_batch = 4, .seed = 5};
  TokenBatches straight(f, Split::kTrain, o, 1, 3);
  const int per_epoch = static_cast<int>(straight.batches_per_epoch());
  const auto expect = draw(straight, 2 * per_epoch + 4);
  for (int stop : {0, 3, per_epoch - 2, per_epoch, per_epoch + 1}) {
    TokenBatches first(f, Split::kTrain, o, 1, 3);
    draw(first, stop);
    const int64_t saved = first.position();
    EXPECT_EQ(saved, stop);
    TokenBatches resumed(f, Split::kTrain, o, 1, 3);
    resumed.seek(saved);
    const auto got = draw(resumed, per_epoch + 2);  // on over the next epoch boundary
    for (int i = 0; i < per_epoch + 2; ++i) {
      EXPECT_TRUE(got[i].first.bit_equal(expect[stop + i].first)) << "stop " << stop << " +" << i;
      EXPECT_TRUE(got[i].second.bit_equal(expect[stop + i].second)) << "stop " << stop << " +" << i;
    }
  }
  EXPECT_THROW(straight.seek(-1), std::invalid_argument);
}

TEST_F(TokenDataTest, BadOptionsAndAShortCorpus) {
  TokenFile f = positions(100);
  std::string e = error_of<std::invalid_argument>(
      [&] { TokenBatches(f, Split::kTrain, {.context = 10, .global_batch = 9}, 0, 9); });
  EXPECT_NE(e.find(f.path()), std::string::npos) << e;
  EXPECT_NE(e.find("corpus shorter than one batch"), std::string::npos) << e;
  e = error_of<std::invalid_argument>(
      [&] { TokenBatches(f, Split::kValidation, {.context = 4, .global_batch = 3}, 0, 3); });
  EXPECT_NE(e.find("validation split holds 10 tokens, 2 windows"), std::string::npos) << e;
  EXPECT_THROW(TokenBatches(f, Split::kTrain, {.context = 0}, 0, 1), std::invalid_argument);
  EXPECT_THROW(TokenBatches(f, Split::kTrain, {.context = 2, .validation_fraction = 1.0}, 0, 1),
               std::invalid_argument);
  EXPECT_THROW(TokenBatches(f, Split::kTrain, {.context = 2, .global_batch = 2}, 1, 3),
               std::invalid_argument);
  TokenBatches ok(f, Split::kTrain, {.context = 2, .global_batch = 2}, 0, 2);
  Array same;
  EXPECT_THROW(ok.next(same, same), std::invalid_argument);
}

}  // namespace
