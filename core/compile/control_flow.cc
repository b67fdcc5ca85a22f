#include "core/compile/control_flow.h"

#include <algorithm>
#include <cstring>

#include "core/compile/loop_guard.h"
#include "core/ir/region.h"

namespace fjit {
namespace {

constexpr size_t kAlign = 64;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const ControlPlan& plan_of(const Instr& in) { return *static_cast<const ControlPlan*>(in.prepared.get()); }

struct Scratch {
  std::byte* base;
  const void** ins;
  void** outs;
  void* workspace;
};

Scratch scratch_of(const Instr& in, const Frame& f, const ControlPlan& p) {
  auto* base = static_cast<std::byte*>(f.bufs[in.in_bufs.back()]);
  return {base, reinterpret_cast<const void**>(base + p.in_table), reinterpret_cast<void**>(base + p.out_table),
          base + p.workspace};
}

// Buffer of result k, or nullptr when nothing reads it.
std::byte* result(const Instr& in, const Frame& f, const ControlPlan& p, int k) {
  const int b = in.in_bufs[p.num_inputs + k];
  return b < 0 ? nullptr : static_cast<std::byte*>(f.bufs[b]);
}

const std::byte* operand(const Instr& in, const Frame& f, int k) {
  return static_cast<const std::byte*>(f.bufs[in.in_bufs[k]]);
}

void scan_kernel(const Instr& in, const Frame& f) {
  const ControlPlan& p = plan_of(in);
  const Region& r = *p.region;
  const Scratch s = scratch_of(in, f, p);
  const int nc = r.num_carry, nx = r.num_xs;
  const int nout = static_cast<int>(p.out_bytes.size()), ny = nout - nc;
  for (int j = 0; j < nc; ++j) std::memcpy(s.base + p.carry[0][j], operand(in, f, j), p.out_bytes[j]);
  for (int k = nc + nx; k < p.num_inputs; ++k) s.ins[k] = operand(in, f, k);
  const int64_t saved = f.ctx->iteration;
  int cur = 0;
  for (int64_t step = 0; step < r.length; ++step) {
    const int64_t i = r.reverse ? r.length - 1 - step : step;
    for (int j = 0; j < nc; ++j) {
      std::byte* c = s.base + p.carry[cur][j];
      s.ins[j] = c;
      s.outs[j] = s.base + p.carry[1 - cur][j];
      if (std::byte* stack = result(in, f, p, nc + ny + j)) std::memcpy(stack + i * p.out_bytes[j], c, p.out_bytes[j]);
    }
    for (int k = nc; k < nc + nx; ++k) s.ins[k] = operand(in, f, k) + i * p.row_bytes[k];
    for (int k = 0; k < ny; ++k) {
      std::byte* ys = result(in, f, p, nc + k);
      s.outs[nc + k] = ys ? ys + i * p.out_bytes[nc + k] : s.base + p.sink[nc + k];
    }
    f.ctx->iteration = i;
    p.plans[0]->run(s.ins, s.outs, *f.ctx, s.workspace);
    cur = 1 - cur;
  }
  f.ctx->iteration = saved;
  for (int j = 0; j < nc; ++j)
    if (std::byte* out = result(in, f, p, j)) std::memcpy(out, s.base + p.carry[cur][j], p.out_bytes[j]);
  *in.output<uint8_t>(f) = 1;
}

// cond_fn on the carry, then body_fn into the other carry buffer, until cond_fn is false.
void while_kernel(const Instr& in, const Frame& f) {
  const ControlPlan& p = plan_of(in);
  const Scratch s = scratch_of(in, f, p);
  const int nc = p.region->num_carry;
  for (int j = 0; j < nc; ++j) std::memcpy(s.base + p.carry[0][j], operand(in, f, j), p.out_bytes[j]);
  for (int k = nc; k < p.num_inputs; ++k) s.ins[k] = operand(in, f, k);
  auto* flag = reinterpret_cast<uint8_t*>(s.base + p.flag);
  const bool guarded = p.region->trip_site >= 0 || p.region->timeout_site >= 0;
  const bool deadline = p.region->timeout_site >= 0 && f.ctx->deadline_ns != 0;
  const bool agree = p.plans[0]->holds_collective || p.plans[1]->holds_collective;
  const std::span<const std::byte* const> carry{reinterpret_cast<const std::byte* const*>(s.ins),
                                                static_cast<size_t>(nc)};
  const int64_t saved = f.ctx->iteration;
  int cur = 0;
  for (int64_t i = 0;; ++i) {
    for (int j = 0; j < nc; ++j) s.ins[j] = s.base + p.carry[cur][j];
    f.ctx->iteration = i;
    s.outs[0] = flag;
    p.plans[0]->run(s.ins, s.outs, *f.ctx, s.workspace);
    if (deadline && while_deadline_stops(*p.region, *f.ctx, agree, i, carry, p.plans[1]->output_types)) break;
    if (!*flag) break;
    if (guarded && while_guard_stops(*p.region, *f.ctx, i, carry, p.plans[1]->output_types)) break;
    for (int j = 0; j < nc; ++j) s.outs[j] = s.base + p.carry[1 - cur][j];
    p.plans[1]->run(s.ins, s.outs, *f.ctx, s.workspace);
    // A body the deadline cut short left a partial carry: the loop keeps the last whole one
    // and stops at the next iteration's check.
    if (!(deadline && f.ctx->stopped)) cur = 1 - cur;
  }
  f.ctx->iteration = saved;
  for (int j = 0; j < nc; ++j)
    if (std::byte* out = result(in, f, p, j)) std::memcpy(out, s.base + p.carry[cur][j], p.out_bytes[j]);
  *in.output<uint8_t>(f) = 1;
}

// Runs sub-plan `which` on operands [first, num_inputs) into the results.
void run_once(const Instr& in, const Frame& f, int which, int first) {
  const ControlPlan& p = plan_of(in);
  const Scratch s = scratch_of(in, f, p);
  for (int k = first; k < p.num_inputs; ++k) s.ins[k - first] = operand(in, f, k);
  for (int k = 0; k < p.num_results; ++k) {
    std::byte* out = result(in, f, p, k);
    s.outs[k] = out ? out : s.base + p.sink[k];
  }
  p.plans[which]->run(s.ins, s.outs, *f.ctx, s.workspace);
  *in.output<uint8_t>(f) = 1;
}

void cond_kernel(const Instr& in, const Frame& f) {
  const ControlPlan& p = plan_of(in);
  RunContext& ctx = *f.ctx;
  if (ctx.deadline_site >= 0 && ctx.deadline_ns != 0 &&
      (p.plans[0]->holds_collective || p.plans[1]->holds_collective) && replicas_stop_together(ctx)) {
    run_once(in, f, 0, 1);  // loop_guard.h: the same branch on every replica
    return;
  }
  run_once(in, f, *in.in<uint8_t>(f, 0) ? 0 : 1, 1);
}

void call_kernel(const Instr& in, const Frame& f) { run_once(in, f, 0, 0); }

}  // namespace

void prepare_control(Instr& instr, const Node& n, const std::vector<int>& results,
                     const GraphCompiler& compile_graph) {
  auto p = std::make_shared<ControlPlan>();
  p->region = n.attrs.region;
  const Region& r = *p->region;
  p->num_inputs = static_cast<int>(n.inputs.size());
  p->num_results = static_cast<int>(r.outputs.size());
  const size_t runs = n.op == Op::CustomVjp ? 1 : r.graphs.size();  // bwd is inlined by the VJP
  for (size_t g = 0; g < runs; ++g) p->plans.push_back(compile_graph(*r.graphs[g]));
  const bool loop = n.op == Op::Scan || n.op == Op::WhileLoop;
  // The plan whose outputs are the results (while_loop: body_fn's, the carry).
  const Executable& first = *p->plans[n.op == Op::WhileLoop ? 1 : 0];
  for (const ValueType& t : first.output_types) p->out_bytes.push_back(t.size() * dtype_size(t.dtype));
  p->row_bytes.assign(p->num_inputs, 0);
  for (int k = r.num_carry; n.op == Op::Scan && k < r.num_carry + r.num_xs; ++k) {
    const ValueType& t = instr.ins[k];
    p->row_bytes[k] = t.size() / std::max<int64_t>(t.shape[0], 1) * dtype_size(t.dtype);
  }
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t off = at;
    at += aligned(std::max<size_t>(bytes, 1));
    return off;
  };
  p->in_table = take(sizeof(void*) * std::max<size_t>(p->num_inputs, 1));
  p->out_table = take(sizeof(void*) * std::max<size_t>(p->out_bytes.size(), 1));
  if (loop)
    for (int b = 0; b < 2; ++b)
      for (int j = 0; j < r.num_carry; ++j) p->carry[b].push_back(take(p->out_bytes[j]));
  if (n.op == Op::WhileLoop) p->flag = take(1);  // its results come from the carry buffers
  // A sink for each sub-plan output whose result nobody reads; a loop's carries go to its
  // carry buffers instead.
  p->sink.assign(p->out_bytes.size(), 0);
  for (size_t k = loop ? r.num_carry : 0; k < p->out_bytes.size(); ++k)
    if (k >= results.size() || results[k] < 0) p->sink[k] = take(p->out_bytes[k]);
  size_t ws = 0;
  for (const auto& plan : p->plans) ws = std::max(ws, plan->workspace_bytes());
  p->workspace = take(ws);
  p->scratch_bytes = at;
  switch (n.op) {
    case Op::Scan: instr.fn = scan_kernel; break;
    case Op::Cond: instr.fn = cond_kernel; break;
    case Op::WhileLoop: instr.fn = while_kernel; break;
    default: instr.fn = call_kernel; break;  // custom_vjp, remat
  }
  instr.label = std::string(op_name(n.op)) + "{" + std::to_string(first.instrs.size()) + " instructions" +
                (n.op == Op::Scan ? " x " + std::to_string(r.length) : "") +
                (n.op == Op::WhileLoop ? " while " + std::to_string(p->plans[0]->instrs.size()) + " instructions" : "") +
                "}";
  instr.prepared = std::move(p);
}

}  // namespace fjit
