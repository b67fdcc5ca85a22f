// pmap(mesh, axis, fn): compile fn once per signature and run the same plan on every replica
// of the mesh, the step's collectives (psum, pmean, all_gather, ...) going over `axis`.
//
//   Mesh mesh = Mesh::from_environment(argc, argv);  // mpirun ranks, or --replicas N threads
//   auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& x, const Tensor& y) {
//     auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
//     return std::tuple{sgd(p, pmean(g, "batch")), pmean(loss, "batch")};
//   });
//   auto [params2, loss] = step(params, x, y);
//
// Arguments: ArrayDicts are replicated (every replica gets the same values: make them equal
// first with mesh.replicate()); Arrays are sharded along axis 0 over the threads of this
// process (uneven splits are weighted so pmean stays exact), or under MPI are this rank's
// shard as given. PmapOptions::replicated_args lists Array arguments to replicate instead.
// The call returns this process's first replica's outputs; after pmean they are the same on
// every replica (enable the divergence check to verify that).
// PmapArgOptions::sharded_dicts lists ArrayDict arguments to shard instead: each entry of rank
// >= 1 is split along axis 0 like a sharded Array (a rank's own rows under MPI), entries of
// rank 0 are replicated (a ZeRO step's optimizer state, parallel/train/zero.h). Outputs that
// differ by replica (such a state's new shards) are read with replica_outputs().
// pmap runs on a mesh of one axis; a mesh with named axes (Mesh::threads(axes)) is
// shard_map's (parallel/shard_map.h), and pmap() refuses it with std::invalid_argument.
#pragma once

#include <utility>

#include "checks/step_check_handler.h"
#include "core/runtime/jit.h"
#include "core/trace/collectives.h"
#include "parallel/mesh.h"
#include "parallel/pmap_core.h"

namespace fjit {

struct PmapArgOptions {
  std::vector<int> replicated_args;
  std::vector<int> sharded_dicts;
};

template <class F>
class Pmapped {
 public:
  Pmapped(Mesh mesh, std::string axis, F fn, PmapOptions options, std::vector<int> replicated,
          std::vector<int> sharded_dicts = {})
      : fn_(std::move(fn)), core_(std::make_shared<PmapCore>(std::move(mesh), std::move(axis), std::move(options))),
        replicated_(std::move(replicated)), sharded_dicts_(std::move(sharded_dicts)) {}

  template <class... A>
  auto operator()(const A&... args) {
    static_assert(detail::check_jit_call<F, A...>());  // as jit: fjit's message, nothing deeper
    if constexpr (detail::kJitCallOk<F, A...>) {
      using R = typename detail::TracedResult<F, A...>::type;
      step(args...);
      size_t pos = 0, dict = 0;
      return detail::OutTraits<R>::unflatten(outs_[0], pos, core_->entry(0).out, dict);
    }
  }

  // Writes this process's first replica's outputs into `out` (reusing its Arrays; they must
  // not share storage with an argument: double-buffer state). No allocation once warm.
  template <class Out, class... A>
  StepResult run_into(Out& out, const A&... args) {
    static_assert(detail::check_jit_call<F, A...>());
    if constexpr (!detail::kJitCallOk<F, A...>) return StepResult{};
    else return run_into_checked(out, args...);
  }

  // The flat outputs (leaves in the order of the result's tuple and dicts) of this process's
  // local replica r in the last call. Replica 0's were moved into what the call returned or
  // wrote; those of r >= 1 stay here until the next call.
  std::vector<Array>& replica_outputs(int r) { return outs_.at(static_cast<size_t>(r)); }

  PmapCore& core() { return *core_; }
  JitCore& jit_core() { return core_->jit(); }
  // The step function (what fjit::replay re-traces).
  const F& function() const { return fn_; }

 private:
  template <class Out, class... A>
  StepResult run_into_checked(Out& out, const A&... args) {
    std::vector<Array*> ptrs;
    bind(out, ptrs);
    if (outs_.empty()) outs_.resize(core_->mesh().local_size());
    outs_[0].resize(ptrs.size());
    std::vector<const Array*> arg_arrays;
    (collect(args, arg_arrays), ...);
    for (size_t k = 0; k < ptrs.size(); ++k)
      outs_[0][k] = detail::is_argument(ptrs[k], arg_arrays) ? *ptrs[k] : std::move(*ptrs[k]);
    StepResult r = step(args...);
    using R = typename detail::TracedResult<F, A...>::type;
    if (ptrs.size() != outs_[0].size()) {
      size_t pos = 0, dict = 0;
      out = detail::OutTraits<R>::unflatten(outs_[0], pos, core_->entry(0).out, dict);
    } else {
      for (size_t k = 0; k < ptrs.size(); ++k) *ptrs[k] = std::move(outs_[0][k]);
    }
    return r;
  }

  template <class Out> static void bind(Out& out, std::vector<Array*>& ptrs) {
    if constexpr (std::is_same_v<Out, Array>) ptrs.push_back(&out);
    else if constexpr (std::is_same_v<Out, ArrayDict>) for (auto& kv : out) ptrs.push_back(&kv.second);
    else std::apply([&](auto&... h) { (bind(h, ptrs), ...); }, out);
  }
  template <class A> static void collect(const A& a, std::vector<const Array*>& arrays) {
    if constexpr (std::is_same_v<A, Array>) arrays.push_back(&a);
    else if constexpr (std::is_same_v<A, ArrayDict>) for (const auto& kv : a) arrays.push_back(&kv.second);
  }

  bool is_replicated(int arg) const {
    return std::find(replicated_.begin(), replicated_.end(), arg) != replicated_.end();
  }
  bool is_sharded_dict(int arg) const {
    return std::find(sharded_dicts_.begin(), sharded_dicts_.end(), arg) != sharded_dicts_.end();
  }
  // A sharded dict's entry as replica `local` sees it: its rows, or the whole of a scalar.
  const Array& dict_leaf(int arg, size_t i, int local) const {
    const auto& shards = dict_shards_[arg][i];
    return shards.empty() ? *dict_whole_[arg][i] : shards[std::min<size_t>(local, shards.size() - 1)];
  }

  template <class A>
  void add_arg(const A& a, int arg, int local) {
    if constexpr (std::is_same_v<A, Array>) {
      if (!is_replicated(arg)) {
        if (local == 0) {
          shards_[arg] = core_->mesh().shard(a);
          if (rows_source_ < 0) rows_source_ = arg;
        }
        detail::ArgTraits<Array>::flatten(shards_[arg][local], flat_[local], arg);
        return;
      }
    }
    if constexpr (std::is_same_v<A, ArrayDict>) {
      if (is_sharded_dict(arg)) {
        if (local == 0) {
          dict_shards_[arg].assign(a.size(), {});
          dict_whole_[arg].assign(a.size(), nullptr);
          for (size_t i = 0; i < a.size(); ++i) {
            dict_whole_[arg][i] = &a.value(i);
            if (a.value(i).rank() > 0) dict_shards_[arg][i] = core_->mesh().shard(a.value(i));
          }
        }
        FlatArgs& f = flat_[local];
        f.structure_hash = detail::mix_hash(f.structure_hash, 2 + a.size());
        for (size_t i = 0; i < a.size(); ++i) {
          f.structure_hash = detail::mix_hash(f.structure_hash, detail::hash_string(a.name(i)));
          f.leaves.push_back(&dict_leaf(arg, i, local));
          f.arg_of_leaf.push_back(arg);
        }
        return;
      }
    }
    detail::ArgTraits<A>::flatten(a, flat_[local], arg);
  }

  template <class... A>
  StepResult step(const A&... args) {
    const int local = core_->mesh().local_size();
    flat_.resize(local);
    weights_.resize(local);
    outs_.resize(local);
    shards_.resize(sizeof...(A));
    dict_shards_.resize(sizeof...(A));
    dict_whole_.resize(sizeof...(A));
    rows_source_ = -1;
    for (int r = 0; r < local; ++r) {
      flat_[r].clear();
      int arg = 0;
      (add_arg(args, arg++, r), ...);
      if (!weights_[r].defined()) weights_[r] = Array(DType::f64, {});
      flat_[r].leaves.push_back(&weights_[r]);
      flat_[r].arg_of_leaf.push_back(static_cast<int>(sizeof...(A)));
      flat_[r].structure_hash = detail::mix_hash(flat_[r].structure_hash, 0x77);
    }
    std::vector<int64_t> rows(local, 0);
    if (rows_source_ >= 0)
      for (int r = 0; r < local; ++r) rows[r] = shards_[rows_source_][r].shape()[0];
    // Which leaves are split along axis 0: those of the sharded Array arguments.
    sharded_.resize(flat_[0].leaves.size());
    for (size_t i = 0; i < sharded_.size(); ++i) {
      const int arg = flat_[0].arg_of_leaf[i];
      sharded_[i] = arg < static_cast<int>(sizeof...(A)) && !shards_[arg].empty();
    }
    for (int arg = 0; arg < static_cast<int>(sizeof...(A)); ++arg) {
      if (dict_shards_[arg].empty()) continue;
      size_t i = 0;
      while (i < flat_[0].arg_of_leaf.size() && flat_[0].arg_of_leaf[i] != arg) ++i;
      for (size_t j = 0; j < dict_shards_[arg].size(); ++j) sharded_[i + j] = !dict_shards_[arg][j].empty();
    }
    return core_->step(
        flat_, weights_, outs_, rows, sharded_,
        [&](TraceContext& ctx, int replica) {
          lookup_replica_ = replica;
          std::vector<std::string> paths;
          using Tuple = std::tuple<typename detail::ArgTraits<A>::Traced...>;
          // Replica 0's shapes define the traced parameters (braced init: left to right).
          traced_ = [&]<size_t... I>(std::index_sequence<I...>) {
            return std::make_shared<Tuple>(Tuple{make_traced(args, ctx, static_cast<int>(I), paths)...});
          }(std::index_sequence_for<A...>{});
          // f64, so that a float64 pmean over uneven shards is exact to float64 rounding.
          ctx.parameter(DType::f64, {}, "__replica_weight");
          paths.push_back("__replica_weight");
          // pmean's f32 scale (weight / n), built before the user's ops, so that every later
          // pmean finds this node (graphs are hash-consed) and a gradient's matmul can take it
          // as its runtime alpha (core/compile/fusion/fusion.h).
          detail::mean_scale(DType::f32);
          return paths;
        },
        [&](TraceContext& ctx, OutTree& tree) {
          using Tuple = std::tuple<typename detail::ArgTraits<A>::Traced...>;
          using R = std::decay_t<std::invoke_result_t<F, typename detail::ArgTraits<A>::Traced...>>;
          R result = std::apply(fn_, *std::static_pointer_cast<Tuple>(traced_));
          traced_.reset();
          std::vector<Tensor> leaves;
          detail::OutTraits<R>::flatten(result, leaves, tree);
          detail::find_passthrough(ctx, leaves, tree);
          return leaves;
        });
  }

  // The traced argument for the replica being compiled: its shard for sharded Arrays.
  template <class A>
  auto make_traced(const A& a, TraceContext& ctx, int arg, std::vector<std::string>& paths) {
    const std::string path = "arg" + std::to_string(arg);
    if constexpr (std::is_same_v<A, Array>) {
      // The leaf being traced is whichever replica missed; its type is in the parameters the
      // cache compares, so use the shard of the replica whose flat args are being compiled.
      const Array* leaf = compiling_leaf(arg);
      return detail::ArgTraits<Array>::make(leaf ? *leaf : a, ctx, path, paths);
    } else if constexpr (std::is_same_v<A, ArrayDict>) {
      if (!is_sharded_dict(arg)) return detail::ArgTraits<A>::make(a, ctx, path, paths);
      TensorDict out;  // the shapes of the shards of the replica being compiled
      for (size_t i = 0; i < a.size(); ++i) {
        const Array& leaf = dict_leaf(arg, i, lookup_replica_);
        paths.push_back(path + "." + a.name(i));
        out.set(a.name(i), ctx.parameter(leaf.dtype(), leaf.shape(), paths.back()));
      }
      return out;
    } else {
      return detail::ArgTraits<A>::make(a, ctx, path, paths);
    }
  }
  // The shard of `arg` for the replica whose lookup missed (null for unsharded arguments).
  const Array* compiling_leaf(int arg) const {
    if (arg >= static_cast<int>(shards_.size()) || shards_[arg].empty()) return nullptr;
    return &shards_[arg][std::min<int>(lookup_replica_, static_cast<int>(shards_[arg].size()) - 1)];
  }

  F fn_;
  std::shared_ptr<PmapCore> core_;
  std::vector<int> replicated_;
  std::vector<int> sharded_dicts_;
  // Per argument that is a sharded dict, per entry: its local shards (empty for a scalar,
  // which every replica reads whole from dict_whole_).
  std::vector<std::vector<std::vector<Array>>> dict_shards_;
  std::vector<std::vector<const Array*>> dict_whole_;
  std::vector<FlatArgs> flat_;
  std::vector<Array> weights_;
  std::vector<uint8_t> sharded_;  // per leaf of flat_[0]: split along axis 0
  std::vector<std::vector<Array>> outs_;
  std::vector<std::vector<Array>> shards_;
  int rows_source_ = -1;
  int lookup_replica_ = 0;
  std::shared_ptr<void> traced_;
};

template <class F>
Pmapped<F> pmap(const Mesh& mesh, const std::string& axis, F fn, PmapOptions options = {},
                PmapArgOptions args = {}) {
  if (!mesh.axes().empty())
    throw std::invalid_argument("pmap: the mesh has named axes; run on it with shard_map (parallel/shard_map.h)");
  if (options.jit.name == "fn") options.jit.name = "pmap";
  return Pmapped<F>(mesh, axis, std::move(fn), std::move(options), std::move(args.replicated_args),
                    std::move(args.sharded_dicts));
}

}  // namespace fjit
