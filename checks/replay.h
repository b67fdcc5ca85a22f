// fjit::replay: run one raising step again from its replay bundle (checks/replay_bundle.h)
// and say which op first went bad.
//
//   ReplayResult r = fjit::replay("/tmp/dumps/step149_replica1", TrainStepFn{...});
//   std::puts(r.text.c_str());
//
// C++ cannot serialize a function, so the caller passes the same step function (a lambda, a
// function object or a function pointer whose parameters are `const Tensor&` or
// `const Params&`) that jit or pmap ran. `bundle_dir` is any replica's part of the step
// (checks/replay_bundle.h). replay
//  1. loads the part, and the parts of every other replica of that step (its sibling
//     directories step<N>_replica<R>) when they are all there: then the whole step is
//     replayed, N thread replicas in this process whose collectives meet in memory and
//     combine in rank order as the real backends do (checks/replay_group.h); otherwise the
//     part's replica is replayed alone (below). A corrupt part throws std::runtime_error
//     naming the file at fault;
//  2. traces the function on the part's input types as jit/pmap did (the same axis names,
//     replica count, replica weight) in the recorded check mode and compares the plan's
//     fingerprint with the part's; a different function, model, shape or check mode throws
//     ReplayMismatchError saying so;
//  3. runs that plan on every replayed replica and compares each replica's outputs with
//     those the part recorded, bit for bit (output_mismatches lists the ones that differ);
//  4. traces it again with every automatic check on (CheckMode::all) and runs that plan once
//     on the inputs, giving the check report of the replayed step;
//  5. evaluates the same graph op by op with the reference kernels on every replica at once,
//     keeping values, walking into the graphs of scan, fori_loop, while_loop, cond, remat
//     and custom_vjp (its forward) as the plan runs them, and finds the first op that
//     produced a non-finite value from finite operands or read an index outside its
//     operand's extent: the earliest in the walk, on the lowest-numbered replica among
//     those that reached it first. A collective is never named when its peers are replayed
//     (its bad value came from another replica, whose op is named). It reports that op with
//     its replica, its operands (types, ranges, the values at the offending element), the
//     multi-index of the first bad element (its row: the row of this replica's shard), the
//     loops around it with their iterations, and its stack at trace time.
//     When the bad values came with the inputs, it names the input leaf, its first bad
//     element and the first op the user wrote that reads it (the comparisons the automatic
//     checks insert in front of an op are not named).
// A step of shard_map on a mesh with named axes records the axes' sizes: it is traced with
// them, and replayed together its replicas form one group per axis (checks/replay_group.h),
// as the mesh did.
// Limits: a part replayed alone (the other parts missing, or a bundle of an older format)
// has its collectives return this replica's own value (an all-reduce over one replica), so
// values downstream of one differ from the real step's; the result says when the op found
// is downstream of a collective. Alone, axis_index gives the part's replica number, which on
// a mesh with several axes is not its coordinate.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "checks/replay_bundle.h"
#include "core/runtime/jit.h"

namespace fjit {

// The bundle was written by a different program than the function given to replay.
struct ReplayMismatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ReplayResult {
  ReplayBundle bundle;
  std::string check_report;        // the replayed step's report ("" when nothing raised)
  bool found = false;              // an op was found (below)
  std::string op;                  // its name ("log", "div", "gather")
  std::string type;                // its result type ("f32[8,3]")
  std::string site;                // "file:line in function", where the user built it
  std::string stack;               // its stack at trace time (user frames)
  std::vector<int64_t> index;      // the first bad element of its result (or of its index operand)
  std::string problem;             // "produced 1 NaN and 0 Inf values from finite operands"
  std::vector<std::string> operands;  // one summary line per operand
  bool after_collective = false;   // it depends on a collective's (replayed) value
  int replica = 0;                 // the replica it went bad on
  std::string inside;              // the loops and branches around it, innermost first:
                                   // "iteration 3 of scan at f.cc:12 (fn)"; "" at top level
  int64_t iteration = -1;          // the innermost loop's iteration (-1: not in a loop)
  int replicas_replayed = 1;       // the replicas replayed together (the step's, or 1)
  bool outputs_compared = false;   // the parts held outputs and they were compared
  std::vector<std::string> output_mismatches;  // "replica 1 out0": replayed != recorded
  std::string note;                // why the parts were not replayed together, if they were not
  std::string bad_input;           // the input leaf holding non-finite values, if any
  std::vector<int64_t> bad_input_index;
  std::string bad_input_note;      // its bad values and the first op that reads it
  std::string text;                // everything above for people (the check report cut to its head)
};

using ReplayTraceFn = std::function<std::vector<Tensor>(TraceContext& ctx, const std::vector<Tensor>& leaves)>;

// The non-template part: `trace` builds the function's arguments from the parameter leaves
// (made here, in the bundle's order) and returns its output leaves.
ReplayResult replay_traced(const std::string& bundle_dir, const ReplayTraceFn& trace);

namespace detail {

template <class F> struct ReplaySignature : ReplaySignature<decltype(&F::operator())> {};
template <class C, class R, class... P> struct ReplaySignature<R (C::*)(P...) const> {
  using Args = std::tuple<std::decay_t<P>...>;
};
template <class C, class R, class... P> struct ReplaySignature<R (C::*)(P...)> {
  using Args = std::tuple<std::decay_t<P>...>;
};
template <class R, class... P> struct ReplaySignature<R (*)(P...)> {
  using Args = std::tuple<std::decay_t<P>...>;
};

// Argument `arg` of the replayed function from the leaves whose path is "arg<arg>" (a Tensor)
// or "arg<arg>.<name>" (a TensorDict); marks the leaves used. Throws ReplayMismatchError when
// the bundle's leaves do not fit the parameter's kind.
Tensor replay_tensor_arg(const std::vector<Tensor>& leaves, const std::vector<std::string>& paths,
                         std::vector<bool>& used, int arg);
TensorDict replay_dict_arg(const std::vector<Tensor>& leaves, const std::vector<std::string>& paths,
                           std::vector<bool>& used, int arg);
// Throws ReplayMismatchError naming the leaves no parameter took.
void replay_check_all_used(const std::vector<std::string>& paths, const std::vector<bool>& used);
const std::vector<std::string>& replay_leaf_paths();  // the paths of the bundle being traced

}  // namespace detail

template <class F>
ReplayResult replay(const std::string& bundle_dir, const F& fn) {
  using Args = typename detail::ReplaySignature<std::decay_t<F>>::Args;
  return replay_traced(bundle_dir, [&fn](TraceContext&, const std::vector<Tensor>& leaves) {
    const std::vector<std::string>& paths = detail::replay_leaf_paths();
    std::vector<bool> used(paths.size(), false);
    auto make = [&]<size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<class T>(std::type_identity<T>, int arg) -> T {
        if constexpr (std::is_same_v<T, Tensor>) return detail::replay_tensor_arg(leaves, paths, used, arg);
        else if constexpr (std::is_same_v<T, TensorDict>) return detail::replay_dict_arg(leaves, paths, used, arg);
        else static_assert(std::is_same_v<T, Tensor>, "replay: parameters must be Tensor or Params");
      };
      return Args{one(std::type_identity<std::tuple_element_t<I, Args>>{}, static_cast<int>(I))...};
    };
    Args args = make(std::make_index_sequence<std::tuple_size_v<Args>>{});
    detail::replay_check_all_used(paths, used);
    auto result = std::apply(fn, args);
    std::vector<Tensor> outs;
    OutTree tree;
    detail::OutTraits<std::decay_t<decltype(result)>>::flatten(result, outs, tree);
    return outs;
  });
}

}  // namespace fjit
