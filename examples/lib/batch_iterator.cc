#include "lib/batch_iterator.h"

#include <cstring>
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

BatchIterator::BatchIterator(Array images, Array labels, BatchOptions options)
    : images_(std::move(images)), labels_(std::move(labels)), opt_(options) {
  if (!images_.defined() || !labels_.defined() || images_.rank() < 1 || labels_.rank() < 1)
    throw std::invalid_argument("BatchIterator: images and labels must be arrays of rank >= 1");
  if (images_.shape()[0] != labels_.shape()[0])
    throw std::invalid_argument("BatchIterator: images " +
                                type_str(images_.dtype(), images_.shape()) + " and labels " +
                                type_str(labels_.dtype(), labels_.shape()) +
                                " differ in their number of examples");
  if (opt_.batch_size < 1)
    throw std::invalid_argument("BatchIterator: batch_size must be >= 1, got " +
                                std::to_string(opt_.batch_size));
  n_ = images_.shape()[0];
  full_images_ = Array(images_.dtype(), with_leading(images_.shape(), opt_.batch_size));
  full_labels_ = Array(labels_.dtype(), with_leading(labels_.shape(), opt_.batch_size));
  const int64_t rest = n_ % opt_.batch_size;
  if (!opt_.drop_last && rest != 0) {
    partial_images_ = Array(images_.dtype(), with_leading(images_.shape(), rest));
    partial_labels_ = Array(labels_.dtype(), with_leading(labels_.shape(), rest));
  }
  set_epoch(0);
}

int64_t BatchIterator::batches_per_epoch() const {
  return opt_.drop_last ? n_ / opt_.batch_size : (n_ + opt_.batch_size - 1) / opt_.batch_size;
}

void BatchIterator::set_epoch(int64_t epoch) { seek(epoch, 0); }

void BatchIterator::seek(int64_t epoch, int64_t index) {
  if (epoch < 0 || index < 0 || index > batches_per_epoch())
    throw std::invalid_argument("BatchIterator::seek: epoch " + std::to_string(epoch) +
                                ", batch " + std::to_string(index) + " is out of range (" +
                                std::to_string(batches_per_epoch()) + " batches per epoch)");
  // Recomputing costs O(N) once per epoch; skip it when only the batch index moves.
  if (perm_.empty() || epoch != epoch_) {
    if (opt_.shuffle) {
      perm_ = epoch_permutation(n_, opt_.seed, epoch);
    } else {
      perm_.resize(static_cast<size_t>(n_));
      for (int64_t i = 0; i < n_; ++i) perm_[i] = i;
    }
  }
  epoch_ = epoch;
  next_index_ = index;
}

void BatchIterator::fill(Array& dst, const Array& src, int64_t first, int64_t count) const {
  // Rows are contiguous in a row-major array, so each example is one memcpy.
  const size_t row = src.size() == 0 ? 0 : src.nbytes() / static_cast<size_t>(n_);
  auto* out = static_cast<std::byte*>(dst.raw());
  const auto* in = static_cast<const std::byte*>(src.raw());
  for (int64_t k = 0; k < count; ++k)
    std::memcpy(out + k * row, in + perm_[first + k] * row, row);
}

std::optional<Batch> BatchIterator::next() {
  if (next_index_ >= batches_per_epoch()) return std::nullopt;
  const int64_t first = next_index_ * opt_.batch_size;
  const int64_t count = std::min(opt_.batch_size, n_ - first);
  const bool full = count == opt_.batch_size;
  Array& x = full ? full_images_ : partial_images_;
  Array& y = full ? full_labels_ : partial_labels_;
  fill(x, images_, first, count);
  fill(y, labels_, first, count);
  return Batch{x, y, epoch_, next_index_++};
}

}  // namespace fjit::io
