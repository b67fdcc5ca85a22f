#include "checks/replay_group.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace fjit {
namespace {

template <class T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_same_v<T, int32_t>)
        return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
      else
        return a + b;
    case ReduceOp::max:
      return (a > b || a != a) ? a : b;
    case ReduceOp::min:
      return (a < b || a != a) ? a : b;
    case ReduceOp::logical_or:
      return (a != T(0) || b != T(0)) ? T(1) : T(0);
  }
  return a;
}

template <class T>
void reduce_into(const std::vector<const void*>& in, void* out, int64_t count, ReduceOp op) {
  auto* o = static_cast<T*>(out);
  const bool normalise = op == ReduceOp::logical_or;
  for (int64_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[i];
    if (normalise) acc = acc != T(0) ? T(1) : T(0);
    for (size_t r = 1; r < in.size(); ++r) acc = combine(acc, static_cast<const T*>(in[r])[i], op);
    o[i] = acc;
  }
}

}  // namespace

struct ReplayGroup::State {
  int size;
  std::chrono::milliseconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool failed = false;
  std::string why;
  std::vector<const void*> slots;
  std::vector<std::unique_ptr<Communicator>> members;
  // A mesh's per-axis groups: axis_groups[a][g], and for each member its group on each axis.
  std::vector<std::string> axis_names;
  std::vector<std::vector<std::unique_ptr<ReplayGroup>>> axis_groups;
  std::vector<std::vector<Communicator*>> member_axes;  // [rank][axis]

  void wait_all(int rank) {
    std::unique_lock<std::mutex> lock(mu);
    if (failed) throw std::runtime_error(why);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    if (!cv.wait_for(lock, timeout, [&] { return generation != gen || failed; })) {
      failed = true;
      why = fmt::format(
          "fjit::replay: replica {} waited {} ms in a collective that the other replicas "
          "never reached (they took different paths through the plan)",
          rank, timeout.count());
      cv.notify_all();
    }
    if (failed) throw std::runtime_error(why);
  }
};

namespace {

class Member final : public Communicator {
 public:
  Member(ReplayGroup::State& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  std::string backend() const override { return "threads"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    s_.slots[rank_] = data;
    s_.wait_all(rank_);
    std::vector<std::byte> tmp(static_cast<size_t>(count) * dtype_size(dtype));
    switch (dtype) {
      case DType::f32:
        reduce_into<float>(s_.slots, tmp.data(), count, op);
        break;
      case DType::f64:
        reduce_into<double>(s_.slots, tmp.data(), count, op);
        break;
      case DType::i32:
        reduce_into<int32_t>(s_.slots, tmp.data(), count, op);
        break;
      case DType::u32:
        reduce_into<uint32_t>(s_.slots, tmp.data(), count, op);
        break;
      case DType::boolean:
        reduce_into<uint8_t>(s_.slots, tmp.data(), count,
                             op == ReduceOp::sum ? ReduceOp::logical_or : op);
        break;
      case DType::u8:
        reduce_into<uint8_t>(s_.slots, tmp.data(), count, op);
        break;
      default: {
        const std::string why =
            fmt::format("fjit::replay: an all_reduce of {} cannot be replayed", dtype_name(dtype));
        s_.wait_all(rank_);  // the others finish reading before anyone leaves
        throw std::runtime_error(why);
      }
    }
    s_.wait_all(rank_);
    std::memcpy(data, tmp.data(), tmp.size());
  }
  void broadcast(void* data, size_t nbytes, int root) override {
    s_.slots[rank_] = data;
    s_.wait_all(rank_);
    if (rank_ != root) std::memcpy(data, s_.slots[root], nbytes);
    s_.wait_all(rank_);
  }
  void all_gather(const void* send, void* recv, size_t nbytes_per_rank) override {
    s_.slots[rank_] = send;
    s_.wait_all(rank_);
    for (int r = 0; r < s_.size; ++r)
      std::memcpy(static_cast<std::byte*>(recv) + r * nbytes_per_rank, s_.slots[r],
                  nbytes_per_rank);
    s_.wait_all(rank_);
  }
  void barrier() override { s_.wait_all(rank_); }
  Communicator* for_axis(const std::string& axis) override {
    if (s_.member_axes.empty()) return this;
    for (size_t a = 0; a < s_.axis_names.size(); ++a)
      if (s_.axis_names[a] == axis) return s_.member_axes[rank_][a];
    return this;
  }
  [[noreturn]] void abort_job(const std::string& message) override {
    throw std::runtime_error("fjit::replay: the replayed step would end the job: " + message);
  }

 private:
  ReplayGroup::State& s_;
  int rank_;
};

}  // namespace

ReplayGroup::ReplayGroup(int size, std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  if (size < 1) throw std::invalid_argument("ReplayGroup: size must be at least 1");
  state_->size = size;
  state_->timeout = timeout;
  state_->slots.assign(size, nullptr);
  for (int r = 0; r < size; ++r) state_->members.push_back(std::make_unique<Member>(*state_, r));
}

ReplayGroup::ReplayGroup(int size, const std::vector<std::string>& axis_names, const std::vector<int>& axis_sizes,
                         std::chrono::milliseconds timeout)
    : ReplayGroup(size, timeout) {
  if (axis_sizes.empty()) return;
  int64_t product = 1;
  for (int n : axis_sizes) product *= n < 1 ? 0 : n;
  if (axis_sizes.size() != axis_names.size() || product != size)
    throw std::invalid_argument(fmt::format("ReplayGroup: {} axis sizes for {} axis names do not make {} replicas",
                                            axis_sizes.size(), axis_names.size(), size));
  const size_t axes = axis_sizes.size();
  State& s = *state_;
  s.axis_names = axis_names;
  s.axis_groups.resize(axes);
  s.member_axes.assign(size, std::vector<Communicator*>(axes, nullptr));
  // Row-major coordinates: the last axis varies fastest. On axis a, replica r's group is
  // numbered by its other coordinates and its rank there is its coordinate on a.
  for (size_t a = 0; a < axes; ++a) {
    int stride = 1;
    for (size_t b = a + 1; b < axes; ++b) stride *= axis_sizes[b];
    const int groups = size / axis_sizes[a];
    for (int g = 0; g < groups; ++g) s.axis_groups[a].push_back(std::make_unique<ReplayGroup>(axis_sizes[a], timeout));
    for (int r = 0; r < size; ++r) {
      const int coord = (r / stride) % axis_sizes[a];
      const int group = (r / (stride * axis_sizes[a])) * stride + r % stride;
      s.member_axes[r][a] = &s.axis_groups[a][group]->member(coord);
    }
  }
}

ReplayGroup::~ReplayGroup() = default;

int ReplayGroup::size() const { return state_->size; }

Communicator& ReplayGroup::member(int rank) { return *state_->members.at(rank); }

void ReplayGroup::fail(int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->failed) return;
  state_->failed = true;
  state_->why = fmt::format("fjit::replay: replica {} stopped: {}", rank, why);
  state_->cv.notify_all();
  for (auto& groups : state_->axis_groups)
    for (auto& g : groups) g->fail(rank, why);
}

}  // namespace fjit
