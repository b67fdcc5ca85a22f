// jit(fn): trace a pure function once per input signature, compile it, and run the plan.
//
//   auto f = jit([](const Tensor& x, const Params& p) { return relu(matmul(x, p["w"])); });
//   Array y = f(x_host, params_host);   // traces and compiles on the first call only
//
// Arguments are Arrays or ArrayDicts; inside the function they are Tensors and TensorDicts.
// The function returns a Tensor, a TensorDict, or a std::tuple of those; the call returns the
// same structure of Arrays. `run_into(out, args...)` writes into existing output Arrays and,
// on a cached signature, performs no heap allocation.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "core/runtime/jit_core.h"
#include "core/trace/dict.h"

namespace fjit {
namespace detail {

uint64_t mix_hash(uint64_t h, uint64_t v);
uint64_t hash_string(const std::string& s);

// run_into's outputs are moved out of `out` for the run and back after it. An output that is
// the very object passed as an argument too (run_into(state, std::get<0>(state), ...)) must
// stay where the argument reads it: it is copied instead (a handle, sharing its storage).
inline bool is_argument(const Array* a, const std::vector<const Array*>& args) {
  for (const Array* x : args)
    if (x == a) return true;
  return false;
}

// Host argument -> traced argument, flattening and parameter creation.
template <class A> struct ArgTraits;
template <> struct ArgTraits<Array> {
  using Traced = Tensor;
  static void flatten(const Array& a, FlatArgs& f, int arg) {
    f.leaves.push_back(&a);
    f.arg_of_leaf.push_back(arg);
    f.structure_hash = mix_hash(f.structure_hash, 1);
  }
  static Tensor make(const Array& a, TraceContext& ctx, const std::string& path,
                     std::vector<std::string>& paths) {
    paths.push_back(path);
    return ctx.parameter(a.dtype(), a.shape(), path);
  }
};
template <> struct ArgTraits<ArrayDict> {
  using Traced = TensorDict;
  static void flatten(const ArrayDict& d, FlatArgs& f, int arg) {
    f.structure_hash = mix_hash(f.structure_hash, 2 + d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      f.structure_hash = mix_hash(f.structure_hash, hash_string(d.name(i)));
      f.leaves.push_back(&d.value(i));
      f.arg_of_leaf.push_back(arg);
    }
  }
  static TensorDict make(const ArrayDict& d, TraceContext& ctx, const std::string& path,
                         std::vector<std::string>& paths) {
    TensorDict out;
    for (size_t i = 0; i < d.size(); ++i) {
      paths.push_back(path + "." + d.name(i));
      out.set(d.name(i), ctx.parameter(d.value(i).dtype(), d.value(i).shape(), paths.back()));
    }
    return out;
  }
};

// A host argument jit accepts: one with an ArgTraits (Array, ArrayDict).
template <class A>
concept HostArgument = requires { typename ArgTraits<A>::Traced; };

// Compile-time check of a call: on a mismatch, the error states fjit's rule, and the
// compiler's "required from" note beside it names F (a lambda's parameter list included)
// and the argument types A given.
template <class F, class... A>
constexpr bool check_jit_call() {
  static_assert((HostArgument<A> && ...),
                "fjit::jit/pmap: every argument of a jitted call must be an fjit::Array or an "
                "fjit::ArrayDict (the 'required from' note names the types given: A = {...})");
  if constexpr ((HostArgument<A> && ...)) {
    static_assert(std::is_invocable_v<F, typename ArgTraits<A>::Traced...>,
                  "fjit::jit/pmap: the function cannot be called with these arguments: each Array "
                  "argument becomes a Tensor and each ArrayDict a TensorDict (Params); check the "
                  "number and kinds of the parameters of F against the types A given (the "
                  "'required from' note names both)");
  }
  return true;
}

// The traced result type of F called with the traced forms of A; void when the call is not
// valid (check_jit_call has already said why), so no second, deeper error follows.
template <class F, class... A>
struct TracedResult {
  using type = void;
};
template <class F, class... A>
  requires(HostArgument<A> && ...) && std::is_invocable_v<F, typename ArgTraits<A>::Traced...>
struct TracedResult<F, A...> {
  using type = std::decay_t<std::invoke_result_t<F, typename ArgTraits<A>::Traced...>>;
};

template <class F, class... A>
inline constexpr bool kJitCallOk = !std::is_void_v<typename TracedResult<F, A...>::type>;

// Traced result -> host result.
template <class R> struct OutTraits;
template <> struct OutTraits<Tensor> {
  using Host = Array;
  static void flatten(const Tensor& t, std::vector<Tensor>& leaves, OutTree& tree) {
    leaves.push_back(t);
    tree.leaf_dict.push_back(-1);
  }
  static Array unflatten(std::span<Array> leaves, size_t& pos, const OutTree&, size_t&) {
    return std::move(leaves[pos++]);
  }
};
template <> struct OutTraits<TensorDict> {
  using Host = ArrayDict;
  static void flatten(const TensorDict& d, std::vector<Tensor>& leaves, OutTree& tree) {
    tree.dict_names.push_back(d.names());
    for (const auto& kv : d) {
      leaves.push_back(kv.second);
      tree.leaf_dict.push_back(static_cast<int>(tree.dict_names.size()) - 1);
    }
  }
  static ArrayDict unflatten(std::span<Array> leaves, size_t& pos, const OutTree& tree, size_t& dict) {
    ArrayDict out;
    for (const std::string& name : tree.dict_names[dict]) out.set(name, std::move(leaves[pos++]));
    ++dict;
    return out;
  }
};
template <class... R> struct OutTraits<std::tuple<R...>> {
  using Host = std::tuple<typename OutTraits<R>::Host...>;
  static void flatten(const std::tuple<R...>& t, std::vector<Tensor>& leaves, OutTree& tree) {
    std::apply([&](const auto&... r) { (OutTraits<std::decay_t<decltype(r)>>::flatten(r, leaves, tree), ...); }, t);
  }
  static Host unflatten(std::span<Array> leaves, size_t& pos, const OutTree& tree, size_t& dict) {
    return Host{OutTraits<R>::unflatten(leaves, pos, tree, dict)...};
  }
};

// Marks output leaves that mirror an input dict (same names and types) as state that a
// skipped step keeps.
void find_passthrough(const TraceContext& ctx, const std::vector<Tensor>& outs, OutTree& tree);

}  // namespace detail

template <class F>
class Jitted {
 public:
  Jitted(F fn, JitOptions options) : fn_(std::move(fn)), core_(std::make_shared<JitCore>(std::move(options))) {}

  template <class... A>
  auto operator()(const A&... args) {
    static_assert(detail::check_jit_call<F, A...>());
    if constexpr (detail::kJitCallOk<F, A...>) {
      using R = typename detail::TracedResult<F, A...>::type;
      auto entry = prepare(args...);
      thread_local std::vector<Array> outs;
      outs.clear();
      outs.resize(entry->exe->output_types.size());
      core_->run(*entry, flat(), outs);
      size_t pos = 0, dict = 0;
      return detail::OutTraits<R>::unflatten(outs, pos, entry->out, dict);
    }
  }

  // Writes the results into `out` (a host value of the result type), reusing its Arrays when
  // their types match and they do not share storage with an argument. Returns whether the
  // step was skipped by the check policy.
  template <class Out, class... A>
  StepResult run_into(Out& out, const A&... args) {
    static_assert(detail::check_jit_call<F, A...>());
    if constexpr (!detail::kJitCallOk<F, A...>) {
      return StepResult{};
    } else {
      using R = typename detail::TracedResult<F, A...>::type;
      static_assert(std::is_same_v<Out, typename detail::OutTraits<R>::Host>,
                    "run_into: `out` must have the function's host result type");
      auto entry = prepare(args...);
      thread_local std::vector<Array*> ptrs;
      thread_local std::vector<Array> tmp;
      ptrs.clear();
      bind(out, ptrs);
      if (ptrs.size() != entry->exe->output_types.size()) {  // first use: build the structure
        tmp.clear();
        tmp.resize(entry->exe->output_types.size());
        StepResult r = core_->run(*entry, flat(), tmp);
        size_t pos = 0, dict = 0;
        out = detail::OutTraits<R>::unflatten(tmp, pos, entry->out, dict);
        return r;
      }
      tmp.resize(ptrs.size());
      for (size_t k = 0; k < ptrs.size(); ++k)
        tmp[k] = detail::is_argument(ptrs[k], flat().leaves) ? *ptrs[k] : std::move(*ptrs[k]);
      StepResult r = core_->run(*entry, flat(), tmp);
      for (size_t k = 0; k < ptrs.size(); ++k) *ptrs[k] = std::move(tmp[k]);
      return r;
    }
  }

  JitCore& core() { return *core_; }
  // The traced function (what fjit::replay re-traces).
  const F& function() const { return fn_; }
  const JitCore& core() const { return *core_; }

 private:
  static FlatArgs& flat() {
    thread_local FlatArgs f;
    return f;
  }
  template <class Out> static void bind(Out& out, std::vector<Array*>& ptrs) {
    if constexpr (std::is_same_v<Out, Array>) ptrs.push_back(&out);
    else if constexpr (std::is_same_v<Out, ArrayDict>) for (auto& kv : out) ptrs.push_back(&kv.second);
    else std::apply([&](auto&... h) { (bind(h, ptrs), ...); }, out);
  }

  template <class... A>
  const CompiledEntry* prepare(const A&... args) {
    FlatArgs& f = flat();
    f.clear();
    int arg = 0;
    (detail::ArgTraits<A>::flatten(args, f, arg++), ...);
    if (const CompiledEntry* hit = core_->find(f)) return hit;  // no std::function on a hit
    return core_->lookup(
        f,
        [&](TraceContext& ctx) {
          std::vector<std::string> paths;
          // Braced initialisation evaluates left to right: parameters follow the flat order.
          using Tuple = std::tuple<typename detail::ArgTraits<A>::Traced...>;
          traced_args_ = [&]<size_t... I>(std::index_sequence<I...>) {
            return std::make_shared<Tuple>(
                Tuple{detail::ArgTraits<A>::make(args, ctx, "arg" + std::to_string(I), paths)...});
          }(std::index_sequence_for<A...>{});
          return paths;
        },
        [&](TraceContext& ctx, OutTree& tree) {
          auto& targs = *std::static_pointer_cast<std::tuple<typename detail::ArgTraits<A>::Traced...>>(traced_args_);
          using R = std::decay_t<std::invoke_result_t<F, typename detail::ArgTraits<A>::Traced...>>;
          R result = std::apply(fn_, targs);
          std::vector<Tensor> leaves;
          detail::OutTraits<R>::flatten(result, leaves, tree);
          traced_args_.reset();
          detail::find_passthrough(ctx, leaves, tree);
          return leaves;
        }).get();
  }

  F fn_;
  std::shared_ptr<JitCore> core_;
  std::shared_ptr<void> traced_args_;
};

template <class F>
Jitted<F> jit(F fn, JitOptions options = {}) {
  return Jitted<F>(std::move(fn), std::move(options));
}

}  // namespace fjit
