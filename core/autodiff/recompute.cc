#include "core/autodiff/recompute.h"

#include <utility>

#include "absl/container/flat_hash_map.h"

namespace fjit {
namespace {

// The marks of the trace this thread records (pmap traces each replica on its own thread):
// cleared when a mark of another trace arrives.
struct Marks {
  const TraceContext* ctx = nullptr;
  uint64_t trace = 0;
  absl::flat_hash_map<int, std::function<Tensor()>> replay;
};

Marks& marks() {
  thread_local Marks m;
  return m;
}

}  // namespace

Tensor recompute_in_backward(const Tensor& value, std::function<Tensor()> replay, Loc loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) detail::fail("recompute_in_backward", {}, "called outside a traced function", &loc);
  if (!value.defined() || value.context() != ctx || value.trace_id() != ctx->trace_id())
    detail::fail("recompute_in_backward", {}, "the value is an undefined Tensor or one of another trace", &loc);
  if (!replay) detail::fail("recompute_in_backward", {value}, "no replay function", &loc);
  Marks& m = marks();
  if (m.ctx != ctx || m.trace != ctx->trace_id()) {
    m.replay.clear();
    m.ctx = ctx;
    m.trace = ctx->trace_id();
  }
  m.replay[value.id()] = std::move(replay);
  return value;
}

namespace detail {

Tensor backward_operand(TraceContext* ctx, int id) {
  const Marks& m = marks();
  if (m.ctx == ctx && m.trace == ctx->trace_id())
    if (const auto it = m.replay.find(id); it != m.replay.end()) return it->second();
  return Tensor::from_node(ctx, id);
}

}  // namespace detail
}  // namespace fjit
