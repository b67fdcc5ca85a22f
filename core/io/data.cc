#include "core/io/data.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace fjit::io {
namespace {

// A uniform integer in [0, bound) by rejection: draws below `threshold` are the remainder
// of 2^64 that does not divide evenly into `bound` buckets, so rejecting them removes the
// modulo bias. Written out because std::uniform_int_distribution's algorithm is left to
// each standard library.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // == 2^64 mod bound
  for (;;) {
    uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

Shape with_leading(const Shape& s, int64_t lead) {
  Shape out = s;
  out[0] = lead;
  return out;
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  // Unsigned addition wraps, so every (seed, epoch) pair gives a well-defined seed.
  std::mt19937_64 rng(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::pair<int64_t, int64_t> Shard::rows(int64_t global_rows) const {
  return {split_rows(global_rows, of, first).first,
          split_rows(global_rows, of, first + count - 1).second};
}

Dataset::Dataset(ArrayDict columns) : columns_(std::move(columns)) {
  auto describe = [&] {
    std::string s;
    for (const auto& [name, a] : columns_)
      s += (s.empty() ? "" : ", ") + name + " " +
           (a.defined() ? type_str(a.dtype(), a.shape()) : std::string("undefined"));
    return s;
  };
  if (columns_.size() == 0) throw std::invalid_argument("Dataset: needs at least one column");
  for (const auto& [name, a] : columns_)
    if (!a.defined() || a.rank() < 1)
      throw std::invalid_argument("Dataset: column " + name + " must be an array of rank >= 1 (" +
                                  describe() + ")");
  size_ = columns_.begin()->second.shape()[0];
  for (const auto& [name, a] : columns_)
    if (a.shape()[0] != size_)
      throw std::invalid_argument("Dataset: columns differ in their number of examples (" +
                                  describe() + ")");
}

Dataset Dataset::rows(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > size_)
    throw std::out_of_range("Dataset::rows: examples [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") of a data set of " + std::to_string(size_));
  ArrayDict out;
  for (const auto& [name, a] : columns_) out.set(name, a.rows(begin, end));
  return Dataset(std::move(out));
}

Batch Batch::clone() const {
  Batch out = *this;
  for (auto& [name, a] : out.columns) a = a.clone();
  return out;
}

BatchIterator::BatchIterator(Dataset data, BatchOptions options)
    : data_(std::move(data)), opt_(options) {
  if (data_.empty()) throw std::invalid_argument("BatchIterator: the data set has no columns");
  if (opt_.batch_size < 1)
    throw std::invalid_argument("BatchIterator: batch_size must be >= 1, got " +
                                std::to_string(opt_.batch_size));
  const Shard& s = opt_.shard;
  if (s.first < 0 || s.count < 1 || s.of < 1 || s.first + s.count > s.of)
    throw std::invalid_argument("BatchIterator: shard of replicas [" + std::to_string(s.first) +
                                ", " + std::to_string(s.first + s.count) + ") is not within " +
                                std::to_string(s.of) + " replicas");
  const int64_t rest = data_.size() % opt_.batch_size;
  for (const auto& [name, a] : data_.columns()) {
    auto [b, e] = s.rows(opt_.batch_size);
    full_.columns.set(name, Array(a.dtype(), with_leading(a.shape(), e - b)));
    if (!opt_.drop_last && rest != 0) {
      auto [pb, pe] = s.rows(rest);
      partial_.columns.set(name, Array(a.dtype(), with_leading(a.shape(), pe - pb)));
    }
  }
  set_epoch(0);
}

int64_t BatchIterator::batches_per_epoch() const {
  const int64_t n = data_.size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

void BatchIterator::set_epoch(int64_t epoch) { seek(epoch, 0); }

void BatchIterator::seek(int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0 || index > batches_per_epoch())
    throw std::invalid_argument("BatchIterator::seek: epoch " + std::to_string(epoch) +
                                ", batch " + std::to_string(index) + " is out of range (" +
                                std::to_string(batches_per_epoch()) + " batches per epoch)");
  // Recomputing costs O(N) once per epoch; skip it when only the batch index moves.
  if (perm_.empty() || epoch != epoch_) {
    const int64_t n = data_.size();
    if (opt_.shuffle) {
      perm_ = epoch_permutation(n, opt_.seed, epoch);
    } else {
      perm_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) perm_[i] = i;
    }
  }
  epoch_ = epoch;
  next_index_ = index;
}

void BatchIterator::fill(Array& dst, const Array& src, int64_t first, int64_t count) const {
  // Rows are contiguous in a row-major array, so each example is one memcpy.
  const size_t row = src.size() == 0 ? 0 : src.nbytes() / static_cast<size_t>(data_.size());
  auto* out = static_cast<std::byte*>(dst.raw());
  const auto* in = static_cast<const std::byte*>(src.raw());
  for (int64_t k = 0; k < count; ++k)
    std::memcpy(out + k * row, in + perm_[first + k] * row, row);
}

const Batch* BatchIterator::next() {
  if (next_index_ >= batches_per_epoch()) return nullptr;
  const int64_t first = next_index_ * opt_.batch_size;
  const int64_t count = std::min(opt_.batch_size, data_.size() - first);
  Batch& batch = count == opt_.batch_size ? full_ : partial_;
  auto [b, e] = opt_.shard.rows(count);
  for (auto& [name, dst] : batch.columns) fill(dst, data_[name], first + b, e - b);
  batch.epoch = epoch_;
  batch.index = next_index_++;
  batch.global_rows = count;
  return &batch;
}

}  // namespace fjit::io
