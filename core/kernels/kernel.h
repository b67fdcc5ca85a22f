// Kernels: how one instruction of a compiled plan computes its value.
//
// The compiler turns each graph node into an Instr, then calls select_kernel(), which picks
// the fast (Eigen) kernel for the op, dtype and shapes and precomputes what the kernel needs
// (strides, sizes) into the Instr. At run time the kernel reads its inputs and writes its
// output through Frame::bufs; it must not allocate, lock, or throw.
//
// Every op also has a reference kernel: plain loops over host Arrays, simple enough to trust.
// It is the oracle for the fast kernels in tests and the evaluator for constant folding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/step_deadline.h"
#include "core/ir/array.h"
#include "core/ir/check_site.h"
#include "core/ir/node.h"

namespace fjit {

class Communicator;

// Per-run state shared by all instructions of one execution.
class CollectiveWorker;

struct RunContext {
  Communicator* comm = nullptr;  // null outside pmap
  int replica = 0;
  int num_replicas = 1;
  uint32_t* flags = nullptr;     // one word per check site; nonzero = raised
  double* payload = nullptr;     // check payloads: kCheckPayloadSlots doubles per site
  // The iteration of the innermost scan or fori_loop running (-1: none); a raised check
  // records it in its payload's kIterationSlot.
  int64_t iteration = -1;
  // Where the plan's overlapped collectives run (core/compile/collective_worker.h); null:
  // every instruction runs on the calling thread, in plan order.
  CollectiveWorker* worker = nullptr;
  // The step's deadline on now_ns()'s clock (core/base/metrics.h); 0: none. The executor
  // polls it between instructions, long kernels between blocks (core/base/step_deadline.h),
  // and a while_loop once per iteration (core/compile/loop_guard.h).
  int64_t deadline_ns = 0;
  int64_t timeout_ns = 0;  // the step's time limit the deadline was set from (for reports)
  // With a deadline: the plan's step-deadline site (Executable::deadline_site), and whether
  // the step has stopped. The executor reads the clock between instructions (and polling
  // kernels between blocks, step_past_deadline); once past the deadline it raises that site
  // and the rest of the step runs only what keeps the replicas paired: its collectives
  // (core/compile/executable.h).
  int deadline_site = -1;
  bool stopped = false;
};

// Whether the step of `ctx` has stopped or has just passed its deadline (then marks it
// stopped; the executor raises the site after the instruction). One load when the step has
// no deadline, else a read of the coarse clock (core/base/step_deadline.h). For long kernels between blocks, and for test seams standing for them.
inline bool step_past_deadline(RunContext& ctx) {
  if (ctx.deadline_ns == 0) return false;
  if (!ctx.stopped && coarse_now_ns() >= ctx.deadline_ns) [[unlikely]] ctx.stopped = true;
  return ctx.stopped;
}

struct Instr;
struct Frame {
  void* const* bufs;  // buffer id -> address, valid for this run
  RunContext* ctx;
};
using KernelFn = void (*)(const Instr&, const Frame&);

struct Instr {
  KernelFn fn = nullptr;
  Op op = Op::Constant;
  int node = -1;                  // id of the node it computes, in the compiled graph
  ValueType out;
  std::vector<ValueType> ins;
  int out_buf = -1;
  std::vector<int> in_bufs;
  Attrs attrs;
  // Kernel-private data filled by select_kernel(); opaque to everyone else.
  int64_t p[8] = {};
  std::vector<int64_t> v;         // e.g. broadcast strides
  std::shared_ptr<const void> prepared;
  // Plan dumps: what a fused instruction computes (empty for a single node).
  std::string label;
  // The timeline's name for it (the label, else the op's name); set by the compiler.
  const char* trace_name = nullptr;

  template <class T> const T* in(const Frame& f, int i) const {
    return static_cast<const T*>(f.bufs[in_bufs[i]]);
  }
  template <class T> T* output(const Frame& f) const { return static_cast<T*>(f.bufs[out_buf]); }
};

// Picks instr.fn and fills the private fields. Throws std::logic_error naming the op and
// types when no kernel exists (a bug: the shape rules admitted something the kernels don't).
void select_kernel(Instr& instr);

// Reference evaluation of one op on host arrays; the result has type `out`.
Array reference_eval(Op op, const Attrs& attrs, const ValueType& out,
                     std::span<const Array> inputs, const RunContext* ctx = nullptr);

}  // namespace fjit
