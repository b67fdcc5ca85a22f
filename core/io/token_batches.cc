#include "core/io/token_batches.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "core/io/data.h"

namespace fjit::io {
namespace {

const char* split_name(Split s) { return s == Split::kTrain ? "training" : "validation"; }

}  // namespace

std::pair<int64_t, int64_t> split_range(int64_t tokens, Split split, double validation_fraction) {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0))
    throw std::invalid_argument(
        fmt::format("split_range: validation_fraction must be in [0, 1), got {}", validation_fraction));
  if (tokens < 0) throw std::invalid_argument(fmt::format("split_range: {} tokens", tokens));
  const auto tail = static_cast<int64_t>(std::floor(static_cast<double>(tokens) * validation_fraction));
  const int64_t cut = tokens - tail;
  return split == Split::kTrain ? std::pair<int64_t, int64_t>{0, cut}
                                : std::pair<int64_t, int64_t>{cut, tokens};
}

TokenBatches::TokenBatches(const TokenFile& file, Split split, TokenBatchOptions o,
                           int64_t shard_begin, int64_t shard_end)
    : file_(&file), split_(split), opt_(o), shard_begin_(shard_begin), shard_end_(shard_end) {
  const std::string& path = file.path();
  if (opt_.context < 1 || opt_.global_batch < 1)
    throw std::invalid_argument(fmt::format(
        "TokenBatches {}: context and global_batch must be >= 1, got context {}, global_batch {}",
        path, opt_.context, opt_.global_batch));
  if (!(opt_.validation_fraction >= 0.0 && opt_.validation_fraction < 1.0))
    throw std::invalid_argument(fmt::format(
        "TokenBatches {}: validation_fraction must be in [0, 1), got {}", path, opt_.validation_fraction));
  if (shard_begin < 0 || shard_begin > shard_end || shard_end > opt_.global_batch)
    throw std::invalid_argument(fmt::format(
        "TokenBatches {}: rows [{}, {}) are not within a global batch of {}", path, shard_begin,
        shard_end, opt_.global_batch));
  std::tie(begin_, end_) = split_range(file.size(), split, opt_.validation_fraction);
  windows_ = (end_ - begin_) / (opt_.context + 1);
  if (windows_ < opt_.global_batch)
    throw std::invalid_argument(fmt::format(
        "TokenBatches {}: corpus shorter than one batch: the {} split holds {} tokens, {} "
        "windows of context {} + 1, and a global batch takes {}",
        path, split_name(split), end_ - begin_, windows_, opt_.context, opt_.global_batch));
}

void TokenBatches::seek(int64_t position) {
  if (position < 0)
    throw std::invalid_argument(fmt::format("TokenBatches::seek {}: position {} is negative",
                                            file_->path(), position));
  position_ = position;
}

int64_t TokenBatches::window_start(int64_t position, int64_t row) {
  const int64_t per_epoch = batches_per_epoch();
  const int64_t epoch = position / per_epoch;
  const int64_t slot = (position % per_epoch) * opt_.global_batch + row;
  int64_t window = slot;
  if (split_ == Split::kTrain) {
    if (perm_epoch_ != epoch) {
      perm_ = epoch_permutation(windows_, opt_.seed, epoch);
      perm_epoch_ = epoch;
    }
    window = perm_[static_cast<size_t>(slot)];
  }
  return begin_ + window * (opt_.context + 1);
}

void TokenBatches::next(Array& inputs, Array& targets) {
  if (&inputs == &targets)
    throw std::invalid_argument("TokenBatches::next " + file_->path() +
                                ": inputs and targets must be two arrays");
  const Shape shape{rows(), opt_.context};
  auto ready = [&](Array& a) {
    if (!a.defined() || a.dtype() != DType::i32 || a.shape() != shape) a = Array(DType::i32, shape);
  };
  ready(inputs);
  ready(targets);
  if (inputs.shares_storage_with(targets))
    throw std::invalid_argument("TokenBatches::next " + file_->path() +
                                ": inputs and targets share storage");
  const int64_t t = opt_.context;
  int32_t* x = inputs.data<int32_t>();
  int32_t* y = targets.data<int32_t>();
  for (int64_t r = shard_begin_; r < shard_end_; ++r) {
    const int64_t start = window_start(position_, r);
    file_->copy(start, t, x + (r - shard_begin_) * t);
    file_->copy(start + 1, t, y + (r - shard_begin_) * t);
  }
  ++position_;
}

}  // namespace fjit::io
