#include "parallel/join.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace fjit {

int64_t Join::steps(int64_t local_steps) const {
  if (local_steps < 0)
    throw std::invalid_argument("Join::steps: a process cannot have " + std::to_string(local_steps) +
                                " steps");
  Communicator* pc = mesh_.process_comm();
  if (pc == nullptr) return local_steps;
  std::vector<int64_t> all(static_cast<size_t>(pc->size()));
  pc->all_gather(&local_steps, all.data(), sizeof(int64_t));
  return *std::max_element(all.begin(), all.end());
}

bool Join::any(bool has_batch) const {
  Communicator* pc = mesh_.process_comm();
  int32_t flag = has_batch ? 1 : 0;
  if (pc != nullptr) pc->all_reduce(&flag, 1, DType::i32, ReduceOp::max);
  return flag != 0;
}

io::Batch empty_batch(const io::Dataset& data) {
  io::Batch b;
  for (const auto& [name, a] : data.columns()) {
    Shape s = a.shape();
    s[0] = 0;
    b.columns.set(name, Array(a.dtype(), s));
  }
  return b;
}

JoinedBatches::JoinedBatches(const Mesh& mesh, io::BatchIterator batches)
    : batches_(std::move(batches)),
      steps_per_epoch_(Join(mesh).steps(batches_.batches_per_epoch())),
      empty_(empty_batch(batches_.data())) {
  next_step_ = 0;
  batches_.set_epoch(0);
}

const io::Batch* JoinedBatches::next() {
  joined_ = false;
  if (next_step_ >= steps_per_epoch_) return nullptr;
  const io::Batch* b = batches_.next();
  if (b == nullptr) {
    empty_.epoch = batches_.epoch();
    empty_.index = next_step_;
    empty_.global_rows = 0;
    b = &empty_;
    joined_ = true;
  }
  ++next_step_;
  return b;
}

void JoinedBatches::seek(int64_t epoch, int64_t step) {
  if (epoch < 0 || step < 0 || step > steps_per_epoch_)
    throw std::invalid_argument("JoinedBatches::seek: epoch " + std::to_string(epoch) + ", step " +
                                std::to_string(step) + " is out of range (" +
                                std::to_string(steps_per_epoch_) + " steps per epoch)");
  batches_.seek(epoch, std::min(step, batches_.batches_per_epoch()));
  next_step_ = step;
}

}  // namespace fjit
