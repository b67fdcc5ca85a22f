// Collectives: all_reduce, all_gather (axis 0), axis_index, reduce_scatter, all_to_all and
// ppermute, through RunContext::comm (its group for the instruction's axis: Communicator::for_axis).
//
// Without a communicator (a plain jit outside pmap, or constant folding) a collective is the
// identity of a one-replica group: all_reduce copies, all_gather copies its input into every
// block of the output (one block when the group has one replica), axis_index is 0,
// reduce_scatter keeps block 0, all_to_all copies, ppermute copies if replica 0 sends to
// itself and gives zeros otherwise.
// Every replica reaches the same communicator calls in the same order with the same sizes,
// including zero-size ones, because every replica runs the same plan.
#include <cassert>
#include <cstring>
#include <vector>

#include "core/base/activity.h"
#include "core/kernels/structural/structural.h"
#include "core/kernels/collective/communicator.h"

namespace fjit::kernels::st {
namespace {

// Names the axis of the collective instruction a replica runs, for stall reports
// (core/base/activity.h), while it runs.
class AxisNote {
 public:
  AxisNote(const Instr& in, const Frame& f) : a_(replica_activity(f.ctx->replica)) {
    if (a_) a_->axis.store(in.attrs.name.c_str(), std::memory_order_relaxed);
  }
  ~AxisNote() {
    if (a_) a_->axis.store(nullptr, std::memory_order_relaxed);
  }
  AxisNote(const AxisNote&) = delete;
  AxisNote& operator=(const AxisNote&) = delete;

 private:
  ReplicaActivity* a_;
};

// The communicator of the instruction's axis (Communicator::for_axis); null outside pmap.
Communicator* axis_comm(const Instr& in, const Frame& f) {
  return f.ctx && f.ctx->comm ? f.ctx->comm->for_axis(in.attrs.name) : nullptr;
}

// p: [0]=elements [1]=bytes
void all_reduce_kernel(const Instr& in, const Frame& f) {
  const void* src = in.in<void>(f, 0);
  void* dst = in.output<void>(f);
  if (src != dst && in.p[1] > 0) std::memcpy(dst, src, in.p[1]);
  if (Communicator* c = axis_comm(in, f)) {
    const AxisNote axis(in, f);
    c->all_reduce(dst, in.p[0], in.out.dtype, static_cast<ReduceOp>(in.attrs.reduce));
  }
}

// p: [0]=input bytes [1]=output bytes
void all_gather_kernel(const Instr& in, const Frame& f) {
  const char* src = in.in<char>(f, 0);
  char* dst = in.output<char>(f);
  const int64_t block = in.p[0], total = in.p[1];
  if (Communicator* c = axis_comm(in, f)) {
    const AxisNote axis(in, f);
    c->all_gather(src, dst, static_cast<size_t>(block));
    return;
  }
  if (block == 0) return;
  for (int64_t off = 0; off + block <= total; off += block) std::memcpy(dst + off, src, block);
}

// An uneven all_gather (pmap's split): attrs.axes = every replica's rows; p[0] = bytes per row.
void all_gather_uneven_kernel(const Instr& in, const Frame& f) {
  const char* src = in.in<char>(f, 0);
  char* dst = in.output<char>(f);
  std::vector<int64_t> bytes(in.attrs.axes.size());
  for (size_t r = 0; r < bytes.size(); ++r) bytes[r] = in.attrs.axes[r] * in.p[0];
  if (Communicator* c = axis_comm(in, f)) {
    const AxisNote axis(in, f);
    c->all_gather_uneven(src, dst, bytes.data());
    return;
  }
  if (in.p[1] > 0) std::memcpy(dst, src, in.p[1]);  // one replica: its own rows
}

// p: [0]=output elements
void reduce_scatter_kernel(const Instr& in, const Frame& f) {
  const void* src = in.in<void>(f, 0);
  void* dst = in.output<void>(f);
  if (Communicator* c = axis_comm(in, f)) {
    const AxisNote axis(in, f);
    c->reduce_scatter(src, dst, in.p[0], in.out.dtype, static_cast<ReduceOp>(in.attrs.reduce));
    return;
  }
  if (in.p[0] > 0) std::memcpy(dst, src, in.p[0] * dtype_size(in.out.dtype));
}

// p: [0]=bytes
void all_to_all_kernel(const Instr& in, const Frame& f) {
  const void* src = in.in<void>(f, 0);
  void* dst = in.output<void>(f);
  if (Communicator* c = axis_comm(in, f)) {
    const AxisNote axis(in, f);
    c->all_to_all(src, dst, static_cast<size_t>(in.p[0] / c->size()));
    return;
  }
  if (in.p[0] > 0) std::memcpy(dst, src, in.p[0]);
}

// p: [0]=bytes
void permute_kernel(const Instr& in, const Frame& f) {
  const void* src = in.in<void>(f, 0);
  void* dst = in.output<void>(f);
  const auto& to = in.attrs.axes;
  Communicator* c = axis_comm(in, f);
  const int me = c ? c->rank() : 0;
  int from = -1;
  for (size_t s = 0; s < to.size(); ++s)
    if (to[s] == me) from = static_cast<int>(s);
  const int send_to = me < static_cast<int>(to.size()) ? static_cast<int>(to[me]) : -1;
  if (c) {
    const AxisNote axis(in, f);
    c->permute(src, dst, static_cast<size_t>(in.p[0]), send_to, from);
    return;
  }
  if (in.p[0] == 0) return;
  if (from == 0) std::memcpy(dst, src, in.p[0]);
  else std::memset(dst, 0, in.p[0]);
}

void axis_index_kernel(const Instr& in, const Frame& f) {
  // On a mesh with named axes, the replica's coordinate on the axis (its rank in the axis's
  // group); on one axis, the replica index.
  Communicator* c = axis_comm(in, f);
  *in.output<int32_t>(f) = c && c != f.ctx->comm ? c->rank() : f.ctx ? static_cast<int32_t>(f.ctx->replica) : 0;
}

}  // namespace

bool select_collective(Instr& instr) {
  switch (instr.op) {
    case Op::AllReduce:
      assert(instr.ins.size() == 1 && instr.ins[0].shape == instr.out.shape &&
             instr.ins[0].dtype == instr.out.dtype);
      assert(instr.attrs.reduce <= static_cast<uint8_t>(ReduceOp::logical_or));
      instr.p[0] = instr.out.size();
      instr.p[1] = instr.out.size() * dtype_size(instr.out.dtype);
      instr.fn = all_reduce_kernel;
      return true;
    case Op::AllGather:
      if (!instr.attrs.axes.empty()) {
        const Shape& s = instr.ins[0].shape;
        instr.p[0] = (s[0] > 0 ? instr.ins[0].size() / s[0] : num_elements(Shape(s.begin() + 1, s.end()))) *
                     dtype_size(instr.out.dtype);
        instr.p[1] = instr.ins[0].size() * dtype_size(instr.out.dtype);
        instr.fn = all_gather_uneven_kernel;
        return true;
      }
      assert(instr.ins.size() == 1 && instr.attrs.axis == 0 && instr.ins[0].dtype == instr.out.dtype);
      assert(instr.ins[0].size() == 0 || instr.out.size() % instr.ins[0].size() == 0);
      instr.p[0] = instr.ins[0].size() * dtype_size(instr.out.dtype);
      instr.p[1] = instr.out.size() * dtype_size(instr.out.dtype);
      instr.fn = all_gather_kernel;
      return true;
    case Op::ReduceScatter:
      instr.p[0] = instr.out.size();
      instr.fn = reduce_scatter_kernel;
      return true;
    case Op::AllToAll:
    case Op::Permute:
      assert(instr.ins[0].shape == instr.out.shape);
      instr.p[0] = instr.out.size() * dtype_size(instr.out.dtype);
      instr.fn = instr.op == Op::AllToAll ? all_to_all_kernel : permute_kernel;
      return true;
    case Op::AxisIndex:
      assert(instr.out.dtype == DType::i32 && instr.out.size() == 1);
      instr.fn = axis_index_kernel;
      return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
