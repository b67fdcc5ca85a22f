// Recomputing a value in the backward pass instead of keeping it alive from the forward pass:
// for values that are cheap to make again and large to keep, such as ZeRO stage 3's gathered
// parameters (parallel/train/zero.h).
//
//   Tensor w = recompute_in_backward(gathered(shard), [=] { return gathered(shard); });
//
// Promises:
//  - The result is `value` (the same traced value). A VJP rule of the reverse-mode walk
//    (core/autodiff/autodiff.h: grad, value_and_grad, vjp) that reads `value` as an operand
//    reads a fresh replay() instead, traced when the walk reaches that rule, so the backward
//    pass's reads no longer keep `value` alive: the memory plan frees it after its last
//    forward read, and each replay lives from its place in the backward pass to its readers.
//  - replay() is traced once per rule that reads the value, in the trace of `value`. It must
//    compute the same bits as `value`: the walk does not check. It must also be a node of its
//    own: the trace merges a node equal to an existing one (core/ir/graph.h, hash-consing), so a
//    replay of the very ops of `value` on the same inputs is `value` again and changes nothing;
//    a collective is a new node at every call. A replay no rule reads is dead code, removed by
//    the compiler.
//  - Only the reverse-mode walk of `value`'s own trace replays it; forward mode, vmap and
//    control-flow bodies that capture `value` read it as it is.
//  - Misuse (an undefined value, one of another trace or outside a trace, no replay) is a
//    TraceError naming recompute_in_backward and the call site.
#pragma once

#include <functional>

#include "core/trace/ops.h"

namespace fjit {

Tensor recompute_in_backward(const Tensor& value, std::function<Tensor()> replay, Loc loc = Loc::current());

namespace detail {
// What a VJP rule reads for node `id` of the current trace: a replay when the node was marked
// by recompute_in_backward, else the node itself.
Tensor backward_operand(TraceContext* ctx, int id);
}  // namespace detail

}  // namespace fjit
