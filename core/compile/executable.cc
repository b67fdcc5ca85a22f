#include "core/compile/executable.h"

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/base/activity.h"
#include "core/compile/kernel_sleep_testing.h"
#include "core/compile/collective_worker.h"
#include "core/base/metrics.h"
#include "core/base/step_deadline.h"
#include "core/base/timeline.h"

namespace fjit {

namespace {

// The test seam of core/compile/kernel_sleep_testing.h.
std::atomic<bool> g_sleep_armed{false};
std::atomic<int> g_sleep_replica{-1};
std::atomic<int> g_sleep_op{-1};
std::atomic<int64_t> g_sleep_ms{0};
std::atomic<bool> g_sleep_until_deadline{false};

void maybe_sleep_in(const Instr& instr, RunContext& ctx) {
  if (!g_sleep_armed.load(std::memory_order_acquire) || g_sleep_replica.load() != ctx.replica ||
      g_sleep_op.load() != static_cast<int>(instr.op))
    return;
  bool armed = true;
  if (!g_sleep_armed.compare_exchange_strong(armed, false)) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(g_sleep_ms.load());
  if (g_sleep_until_deadline.load()) {  // start_past_deadline: the step is not marked stopped
    while (ctx.deadline_ns != 0 && coarse_now_ns() < ctx.deadline_ns && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  while (std::chrono::steady_clock::now() < until && !step_past_deadline(ctx)) {
    activity_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

namespace testing {
void sleep_in_kernel(int replica, Op op, double seconds) {
  g_sleep_replica.store(replica);
  g_sleep_op.store(static_cast<int>(op));
  g_sleep_ms.store(static_cast<int64_t>(seconds * 1000));
  g_sleep_until_deadline.store(false);
  g_sleep_armed.store(true, std::memory_order_release);
}

void start_past_deadline(int replica, Op op, double seconds) {
  g_sleep_replica.store(replica);
  g_sleep_op.store(static_cast<int>(op));
  g_sleep_ms.store(static_cast<int64_t>(seconds * 1000));
  g_sleep_until_deadline.store(true);
  g_sleep_armed.store(true, std::memory_order_release);
}
}  // namespace testing

const char* overlap_name(Overlap mode) {
  switch (mode) {
    case Overlap::off: return "off";
    case Overlap::schedule: return "schedule";
    case Overlap::worker: return "worker";
  }
  return "?";
}

const char* fusion_name(Fusion fusion) {
  switch (fusion) {
    case Fusion::all: return "all";
    case Fusion::off: return "off";
    case Fusion::elementwise: return "elementwise";
    case Fusion::gemm: return "gemm";
    case Fusion::single: return "single";
  }
  return "?";
}

namespace {

// Raises the step-deadline site once, naming the top-level instruction the replica was in
// (core/base/activity.h) and, inside a loop's or branch's plan, the instruction there.
[[gnu::cold, gnu::noinline]] void raise_deadline(RunContext& ctx, int32_t instr) {
  uint32_t& flag = ctx.flags[ctx.deadline_site];
  if (flag != 0) return;
  flag = 1;
  if (ctx.payload == nullptr) return;
  double* values = ctx.payload + static_cast<size_t>(ctx.deadline_site) * kCheckPayloadSlots;
  const ReplicaActivity* a = current_activity();
  const int depth = a ? a->depth.load(std::memory_order_relaxed) : 1;
  values[0] = static_cast<double>(ctx.timeout_ns) / 1e9;
  values[1] = a ? a->instr[0].load(std::memory_order_relaxed) : instr;
  values[2] = depth > 1 ? instr : -1;
  values[3] = depth - 1;
  values[kIterationSlot] = static_cast<double>(ctx.iteration + 1);
}

}  // namespace

void Executable::seam_before(const Instr& instr, RunContext& ctx) {
  if (g_sleep_armed.load(std::memory_order_relaxed)) [[unlikely]] maybe_sleep_in(instr, ctx);
}

void Executable::after_under_deadline(RunContext& ctx, int32_t i) {
  // Names the instruction that ran (or was skipped) as the deadline passed.
  if (step_past_deadline(ctx)) [[unlikely]] raise_deadline(ctx, i);
}

void Executable::run(const void* const* inputs, void* const* outputs, RunContext& ctx,
                     void* workspace) const {
  void** table = static_cast<void**>(workspace);
  std::byte* arena = static_cast<std::byte*>(workspace) + table_bytes_;
  const size_t n = buffers.size();
  for (size_t b = 0; b < n; ++b) {
    const BufferRef& r = buffers[b];
    switch (r.kind) {
      case BufferRef::kInput: table[b] = const_cast<void*>(inputs[r.where]); break;
      case BufferRef::kOutput: table[b] = outputs[r.where]; break;
      case BufferRef::kConstant: table[b] = const_cast<void*>(r.constant); break;
      case BufferRef::kArena: table[b] = arena + r.where; break;
    }
  }
  const Frame frame{table, &ctx};
  // The instruction running, for stall reports (core/base/activity.h).
  const ActivityLevel level(current_activity(), this);
  if (fpe_site >= 0 && ctx.flags != nullptr) {
    run_fpe(frame, outputs, level);
    return;
  }
  if (num_overlapped > 0 && ctx.worker != nullptr && ctx.comm != nullptr) {
    run_overlapped(frame, level);  // under a step deadline too
    return;
  }
  if (ctx.deadline_site >= 0 && ctx.flags != nullptr) {
    run_deadline(frame, level);
    return;
  }
  if (timeline::enabled()) {
    run_recorded(frame, level);
    return;
  }
  const int32_t n_instrs = static_cast<int32_t>(instrs.size());
  const bool seam = g_sleep_armed.load(std::memory_order_relaxed);
  for (int32_t i = 0; i < n_instrs; ++i) {
    level.at(i);
    if (seam) maybe_sleep_in(instrs[i], ctx);
    instrs[i].fn(instrs[i], frame);
  }
}

namespace {

// Runs one instruction and records it in the timeline.
void run_and_record(const Instr& instr, const Frame& frame) {
  const int64_t t0 = now_ns();
  instr.fn(instr, frame);
  const bool collective = op_kind(instr.op) == OpKind::kCollective;
  timeline::event(instr.trace_name ? instr.trace_name : op_name(instr.op),
                  collective ? "collective" : "op", t0, now_ns(),
                  instr.out.size() * dtype_size(instr.out.dtype));
}

}  // namespace

void Executable::run_recorded(const Frame& frame, const ActivityLevel& level) const {
  for (size_t i = 0; i < instrs.size(); ++i) {
    level.at(static_cast<int32_t>(i));
    if (g_sleep_armed.load(std::memory_order_relaxed)) maybe_sleep_in(instrs[i], *frame.ctx);
    run_and_record(instrs[i], frame);
  }
}

void Executable::run_overlapped(const Frame& frame, const ActivityLevel& level) const {
  CollectiveWorker& worker = *frame.ctx->worker;
  worker.begin(num_overlapped);
  // Leaving by an exception: nothing the worker runs may outlive this run's frame.
  struct Drain {
    CollectiveWorker& worker;
    ~Drain() { worker.drain(); }
  } drain{worker};
  const bool recorded = timeline::enabled();
  // Under a step deadline, as run_deadline: the collectives (all on the worker or in `pairs`)
  // still run once the step has stopped, so the replica meets the others in each of them.
  RunContext& ctx = *frame.ctx;
  const bool deadline = ctx.deadline_site >= 0 && ctx.flags != nullptr;
  const ThreadStepDeadline polled(deadline ? ctx.deadline_ns : thread_step_deadline());
  const size_t n = instrs.size();
  for (size_t i = 0; i < n; ++i) {
    level.at(static_cast<int32_t>(i));
    if (await_before[i] > 0) worker.wait(await_before[i]);
    const Instr& instr = instrs[i];
    if (g_sleep_armed.load(std::memory_order_relaxed)) maybe_sleep_in(instr, ctx);
    if (overlapped[i]) {
      worker.submit(instr, frame, recorded);
    } else if (!deadline || runs_under_deadline(ctx, i)) {
      if (recorded) run_and_record(instr, frame);
      else instr.fn(instr, frame);
    }
    if (deadline) after_under_deadline(ctx, static_cast<int32_t>(i));
  }
  worker.wait(num_overlapped);
}

void Executable::run_deadline(const Frame& frame, const ActivityLevel& level) const {
  RunContext& ctx = *frame.ctx;
  const ThreadStepDeadline polled(ctx.deadline_ns);  // for kernels that poll between blocks
  const bool recorded = timeline::enabled();
  const int32_t n = static_cast<int32_t>(instrs.size());
  for (int32_t i = 0; i < n; ++i) {
    level.at(i);
    if (g_sleep_armed.load(std::memory_order_relaxed)) maybe_sleep_in(instrs[i], ctx);
    if (runs_under_deadline(ctx, static_cast<size_t>(i))) {
      if (recorded) run_and_record(instrs[i], frame);
      else instrs[i].fn(instrs[i], frame);
    }
    after_under_deadline(ctx, i);
  }
}

std::string Executable::plan_string() const {
  std::ostringstream os;
  auto buf = [this](int b) {
    if (b < 0) return std::string("-");  // a control op's result nothing reads
    const BufferRef& r = buffers[b];
    switch (r.kind) {
      case BufferRef::kInput: return "in" + std::to_string(r.where);
      case BufferRef::kOutput: return "out" + std::to_string(r.where);
      case BufferRef::kConstant: return "const" + std::to_string(b);
      case BufferRef::kArena: return "arena+" + std::to_string(r.where);
    }
    return std::string("?");
  };
  os << "plan: " << instrs.size() << " instructions, arena " << arena_bytes << " bytes (min live "
     << min_live_bytes << "), " << check_sites.size() << " check sites; overlap "
     << overlap_name(overlap) << ", fusion " << fusion_name(fusion) << "\n";
  int ticket = 0;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    os << "  " << i << ": " << buf(in.out_buf) << " = "
       << (in.label.empty() ? std::string(op_name(in.op)) : in.label) << " "
       << type_str(in.out.dtype, in.out.shape);
    for (size_t k = 0; k < in.in_bufs.size(); ++k) os << (k ? ", " : " ") << buf(in.in_bufs[k]);
    os << "   (%" << in.node << ")";
    if (i < overlapped.size() && overlapped[i]) os << "  [overlapped #" << ++ticket << "]";
    if (i < await_before.size() && await_before[i] > 0) os << "  [waits for overlapped #" << await_before[i] << "]";
    os << "\n";
  }
  if (num_overlapped > 0) os << "  end: waits for overlapped #" << num_overlapped << "\n";
  return os.str();
}

}  // namespace fjit
