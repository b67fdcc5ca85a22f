// Fused attention's kernel geometry (core/trace/attention.h), shared by the f32/f64 kernels
// (attention.cc) and the bf16-operand kernels (attention_bf16.cc): the sizes, the causal flag,
// the key lengths' operand, which keys each query row sees, each task's operands, and the
// tasks' run over the intra-op threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/kernel.h"

namespace fjit::kernels::st {

// p: [0] B, [1] H, [2] Tq, [3] Tk, [4] dh, [5] dv, [6] causal, [7] the key lengths' operand
// (-1: none).
struct AttentionGeometry {
  int64_t b, h, tq, tk, dh, dv, lengths_operand;
  bool causal;
  explicit AttentionGeometry(const Instr& in)
      : b(in.p[0]), h(in.p[1]), tq(in.p[2]), tk(in.p[3]), dh(in.p[4]), dv(in.p[5]),
        lengths_operand(in.p[7]), causal(in.p[6] != 0) {}
  static void fill(Instr& in) {
    const Shape& q = in.ins[0].shape;
    const size_t base = in.op == Op::Attention ? 3 : 5;
    const int64_t p[8] = {q[0], q[1], q[2], in.ins[1].shape[2], q[3], in.ins[2].shape[3],
                          in.attrs.index != 0, in.ins.size() > base ? static_cast<int64_t>(base) : -1};
    std::copy(p, p + 8, in.p);
  }
  // Batch index b's key length, clamped to [0, Tk].
  int64_t key_length(const Instr& in, const Frame& f, int64_t bi) const {
    if (lengths_operand < 0) return tk;
    return std::clamp<int64_t>(in.in<int32_t>(f, static_cast<int>(lengths_operand))[bi], 0, tk);
  }
  // How many keys query row i sees (the first ones): 0 for none.
  int64_t row_length(int64_t length, int64_t i) const {
    return causal ? std::min(length, i + tk - tq + 1) : length;
  }

  // A forward task of the attention op: query rows [i0, i0 + rows) of one (batch, head) bh, in
  // blocks of `bq` rows; q, k, v of type In, the packed [out | lse] rows of type Out.
  template <class In, class Out>
  struct ForwardTask {
    const In *q, *k, *v;  // q at row i0; k, v the head's whole keys
    Out* out;             // at row i0, dv + 1 values a row
    int64_t bh, b, i0, rows, length;
  };
  template <class In, class Out>
  ForwardTask<In, Out> forward_task(const Instr& in, const Frame& f, int64_t task, int64_t bq) const {
    const int64_t blocks = (tq + bq - 1) / bq, bh = task / blocks, i0 = task % blocks * bq;
    return {in.in<In>(f, 0) + (bh * tq + i0) * dh, in.in<In>(f, 1) + bh * tk * dh,
            in.in<In>(f, 2) + bh * tk * dv,         in.output<Out>(f) + (bh * tq + i0) * (dv + 1),
            bh, bh / h, i0, std::min(bq, tq - i0), key_length(in, f, bh / h)};
  }

  // A backward task of attention_grad: one (batch, head) bh's q, k, v (In), its packed forward
  // result and cotangent (Out, dv + 1 a row), and its gradients dq, dk, dv (Out), zeroed here.
  template <class In, class Out>
  struct BackwardTask {
    const In *q, *k, *v;
    const Out *out, *dout;
    Out *dq, *dk, *dv;
    int64_t b, length, max_len;  // max_len: the keys the last query row sees
  };
  template <class In, class Out>
  BackwardTask<In, Out> backward_task(const Instr& in, const Frame& f, int64_t bh) const {
    const int64_t pw = dv + 1, length = key_length(in, f, bh / h);
    Out* dq = in.output<Out>(f) + bh * (tq * dh + tk * (dh + dv));
    std::fill_n(dq, tq * dh + tk * (dh + dv), Out(0));
    return {in.in<In>(f, 0) + bh * tq * dh,  in.in<In>(f, 1) + bh * tk * dh, in.in<In>(f, 2) + bh * tk * dv,
            in.in<Out>(f, 3) + bh * tq * pw, in.in<Out>(f, 4) + bh * tq * pw, dq,
            dq + tq * dh,                    dq + tq * dh + tk * dh,         bh / h,
            length,                          tq == 0 ? 0 : row_length(length, tq - 1)};
  }
};

// Runs an attention (forward) or attention_grad (backward) instruction's tasks:
// forward(task) for each block of `bq` query rows of each (batch, head), or
// backward(bh, deadline) for each (batch, head). Tasks are shared among the intra-op threads
// when the work is large enough; which thread runs a task changes no bit. Past the step's
// deadline (core/base/step_deadline.h) the tasks left are skipped, and a backward task is
// handed the deadline to skip its key blocks left; what runs is computed as without one.
template <class Forward, class Backward>
void run_attention_tasks(const Instr& in, const AttentionGeometry& g, int64_t bq, Forward forward,
                         Backward backward) {
  const bool fwd = in.op == Op::Attention;
  const int64_t tasks = fwd ? g.b * g.h * ((g.tq + bq - 1) / bq) : g.b * g.h;
  const int64_t work = g.b * g.h * g.tq * g.tk * (g.dh + g.dv);
  const int threads = work >= (int64_t{1} << 20) ? static_cast<int>(std::min<int64_t>(tasks, intra_op_threads())) : 1;
  const int64_t deadline = thread_step_deadline();
  auto run = [&](int64_t t) {
    if (deadline_passed(deadline)) [[unlikely]] return;
    if (fwd) forward(t);
    else backward(t, deadline);
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) run(t);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    run(t);
    fpe::collect_worker_flags();
  }
}

// The attention and attention_grad kernels on bf16 q, k and v with f32 results
// (attention_bf16.cc).
void attention_bf16_kernel(const Instr& in, const Frame& f);

}  // namespace fjit::kernels::st
