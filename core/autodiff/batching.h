// Internal: the batching transformation behind vmap (core/autodiff/vmap.h), shared by the
// walk (batching.cc) and the rule files (batching_rules_*.cc).
//
// vmap traces the user's function once on one example (a sub-graph, core/trace/region_trace.h)
// and replays that graph into the current trace, node by node. A node none of whose operands
// is batched is copied as it is; any other node goes to its op's batching rule, named by the
// batch column of core/ir/ops.def. A batched value always carries its batch axis first: the
// rules read [B, ...example shape] and return the same. The user's in_axes and out_axes are
// honoured by transposes at the edges.
#pragma once

#include <vector>

#include "core/trace/ops.h"

namespace fjit {
namespace batching {

// A value of the batched trace: `t` has the example's shape, or [B, ...example shape] when
// `batched`. A control op (scan, cond, ...) batched one op per example keeps the per-example
// ops in `per_example` (its own value is a placeholder); its outputs read them.
struct Batched {
  Tensor t;
  bool batched = false;
  std::vector<Tensor> per_example;
  // A cond with a batched predicate, batched as a select: its results.
  std::vector<Batched> results;
};

struct BatchArgs {
  const Node& node;                  // the example graph's node (a copy)
  const std::vector<Batched>& ins;   // its operands, batched or not
  int64_t size;                      // B
};
using BatchRule = Batched (*)(const BatchArgs& a);

// The rule for `op` (the row's batch column).
BatchRule batch_rule(Op op);

// The rules: batch_<batch> for every row of core/ir/ops.def (declared from the table, so a
// row whose rule is not defined fails to link).
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, finite, input_check, family, builder, batch) \
  Batched batch_##batch(const BatchArgs& a);
#include "core/ir/ops.def"
#undef FJIT_OP

// Shared by the rules.
// Records `like`'s op with `inputs` and `attrs` into the current trace at like's site, typed
// by the op's shape rule with `hint` (the type the rule expects: a mismatch is an internal
// error naming the op). Effects other than checks get a fresh id.
Tensor emit(const Node& like, const std::vector<Tensor>& inputs, const Attrs& attrs,
            const ValueType& hint);
// [B, ...shape]: `b` batched as it is, or an unbatched value broadcast along a new axis 0.
Tensor materialize(const Batched& b, int64_t size);
// A batched value [B, ...s] with `rank` - rank(s) unit axes inserted after the batch axis.
Tensor pad_rank(const Tensor& t, int rank);
// Example `i` of a batched value (axis 0 sliced and dropped).
Tensor example(const Tensor& t, int64_t i);
// Stacks equal-shaped values along a new axis 0.
Tensor stack(const std::vector<Tensor>& ts);
// [B] + s.
Shape with_batch(int64_t size, const Shape& s);
// Moves axis `from` of `t` to position `to`.
Tensor move_axis(const Tensor& t, int from, int to);

// While alive, checks batched for a batch of `size` pass for the examples whose `mask` ([B]
// bool) is false (a batched while_loop's finished examples); nested masks combine.
class ActiveMask {
 public:
  ActiveMask(const Tensor& mask, int64_t size);
  ~ActiveMask();
  ActiveMask(const ActiveMask&) = delete;
  ActiveMask& operator=(const ActiveMask&) = delete;
  // The innermost mask for a batch of `size`, or nullptr.
  static const Tensor* current(int64_t size);
};

// Control ops kept as one op over the batch (batching_control.cc): a cond whose predicate is
// shared by the batch, a while_loop.
Batched cond_shared_predicate(const BatchArgs& a);
Batched while_batched(const BatchArgs& a);

// Replays `g` (an example graph) into the current trace with its parameters bound to
// `params`; returns its outputs.
std::vector<Batched> batch_graph(const Graph& g, const std::vector<Batched>& params, int64_t size);

}  // namespace batching
}  // namespace fjit
