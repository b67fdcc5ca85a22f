// shard_map(fn, mesh, in_specs, out_specs): JAX's shard_map on a mesh with named axes
// (Mesh::threads({{"data", 2}, {"model", 2}}), parallel/mesh.h). Each argument is split into
// blocks by its spec, every replica runs fn (compiled once) on its own blocks, collectives in
// fn name a mesh axis and run among the replicas that share the other coordinates, and the
// results are reassembled from the replicas' blocks by out_specs.
//
//   Mesh mesh = Mesh::threads({{"data", 2}, {"model", 2}});
//   auto f = shard_map([](const Tensor& x, const Tensor& w) {   // x [B/2, D], w [D, F/2]
//                        return psum(matmul(x, w), "model"); },  // illustrative
//                      mesh, {{"data", ""}, {"", "model"}}, {{"data", ""}});
//   Array y = f(x, w);
//
// A spec (ShardSpec) says, per dimension of an Array, which mesh axis splits it ("" or no
// entry: none); the dimension's size must be a multiple of that axis's size, and an axis splits
// at most one dimension of an argument. A dict argument's spec names its entries
// (ShardSpec::dict), an entry not named being replicated. An argument is replicated along every
// axis its spec does not name (each replica gets the same block); an output spec that does not
// name an axis says the output is the same along it, and the block of the replica at
// coordinate 0 on it is taken (as JAX's out_specs, unchecked; the divergence check of
// PmapOptions compares replicas when enabled). One out spec per result of fn (per tuple
// element). Specs that do not fit throw std::invalid_argument naming shard_map's call site,
// the argument or result, its shape, the dimension and the axis.
//
// Inside fn: psum, pmean, all_gather, psum_scatter, all_to_all, ppermute name an axis, and
// axis_index(name) / axis_size(name) (core/trace/collectives.h) give the replica's coordinate
// and the axis's size. Checks (PmapOptions::jit) behave as under pmap: a check raised on any
// replica is reported by every replica at the same step, whichever axis raised it.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/runtime/jit.h"
#include "core/trace/collectives.h"
#include "parallel/mesh.h"
#include "parallel/pmap_core.h"

namespace fjit {

// Per dimension of an Array, the mesh axis that splits it ("": none).
using PartSpec = std::vector<std::string>;

struct ShardSpec {
  PartSpec dims;                            // an Array's
  std::map<std::string, PartSpec> entries;  // a dict's, by entry name (absent: replicated)
  ShardSpec() = default;
  ShardSpec(std::initializer_list<std::string> d) : dims(d) {}
  static ShardSpec dict(std::map<std::string, PartSpec> e) {
    ShardSpec s;
    s.entries = std::move(e);
    return s;
  }
  // The spec of the dict entry `entry` ("" for an Array: dims).
  const PartSpec& leaf(const std::string& entry) const;
};

namespace shard_map_detail {
// Throws std::invalid_argument unless `spec` fits `shape` on the mesh (see above); `what`
// names the argument or result in the message.
void check(const Mesh& mesh, const PartSpec& spec, const Shape& shape, const std::string& what, const Loc& loc);
// Job replica `replica`'s block of `global`.
Array block(const Mesh& mesh, const PartSpec& spec, const Array& global, int replica);
// The whole array of a result whose blocks (of this process's replicas, in order) are
// `locals`: gathered from every process first when the job has several.
Array assemble(const Mesh& mesh, const PartSpec& spec, const std::vector<const Array*>& locals,
               const std::string& what, const Loc& loc);
}  // namespace shard_map_detail

template <class F>
class ShardMapped {
 public:
  ShardMapped(Mesh mesh, F fn, std::vector<ShardSpec> in_specs, std::vector<ShardSpec> out_specs,
              PmapOptions options, Loc loc)
      : fn_(std::move(fn)), in_specs_(std::move(in_specs)), out_specs_(std::move(out_specs)), loc_(loc),
        core_(std::make_shared<PmapCore>(std::move(mesh), "", std::move(options))) {}

  template <class... A>
  auto operator()(const A&... args) {
    static_assert(detail::check_jit_call<F, A...>());
    if constexpr (detail::kJitCallOk<F, A...>) {
      using R = typename detail::TracedResult<F, A...>::type;
      step(args...);
      return unflatten<R>();
    }
  }

  PmapCore& core() { return *core_; }
  // The flat outputs (blocks) of this process's local replica r in the last call.
  const std::vector<Array>& replica_outputs(int r) const { return outs_.at(static_cast<size_t>(r)); }

 private:
  using Locals = std::shared_ptr<void>;

  std::string arg_name(int arg, const std::string& entry) const {
    return entry.empty() ? fmt::format("argument {}", arg) : fmt::format("argument {} entry '{}'", arg, entry);
  }
  const ShardSpec& in_spec(int arg) const { return in_specs_[static_cast<size_t>(arg)]; }

  template <class A>
  A local_of(const A& a, int arg, int replica) const {
    const Mesh& m = core_->mesh();
    if constexpr (std::is_same_v<A, Array>) {
      return shard_map_detail::block(m, in_spec(arg).dims, a, replica);
    } else {
      ArrayDict d;
      for (size_t i = 0; i < a.size(); ++i)
        d.set(a.name(i), shard_map_detail::block(m, in_spec(arg).leaf(a.name(i)), a.value(i), replica));
      return d;
    }
  }
  template <class A>
  void check_arg(const A& a, int arg) const {
    const Mesh& m = core_->mesh();
    if constexpr (std::is_same_v<A, Array>) {
      shard_map_detail::check(m, in_spec(arg).dims, a.shape(), arg_name(arg, ""), loc_);
    } else {
      for (const auto& kv : in_spec(arg).entries)
        if (!a.contains(kv.first))
          throw std::invalid_argument(fmt::format("shard_map: the spec of {} names an entry the dict lacks", arg_name(arg, kv.first)));
      for (size_t i = 0; i < a.size(); ++i)
        shard_map_detail::check(m, in_spec(arg).leaf(a.name(i)), a.value(i).shape(), arg_name(arg, a.name(i)), loc_);
    }
  }

  template <class... A>
  void step(const A&... args) {
    const Mesh& m = core_->mesh();
    if (in_specs_.size() != sizeof...(A))
      throw std::invalid_argument(fmt::format("shard_map: {} in_specs for {} arguments", in_specs_.size(), sizeof...(A)));
    {
      int arg = 0;
      (check_arg(args, arg++), ...);
    }
    const int local = m.local_size(), first = m.first_replica();
    using Tuple = std::tuple<A...>;
    auto locals = std::make_shared<std::vector<Tuple>>();
    locals->reserve(local);
    for (int r = 0; r < local; ++r)
      locals->push_back([&]<size_t... I>(std::index_sequence<I...>) {
        return Tuple{local_of(args, static_cast<int>(I), first + r)...};
      }(std::index_sequence_for<A...>{}));
    locals_ = locals;
    flat_.assign(local, FlatArgs{});
    weights_.resize(local);
    outs_.resize(local);
    for (int r = 0; r < local; ++r) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        (detail::ArgTraits<A>::flatten(std::get<I>((*locals)[r]), flat_[r], static_cast<int>(I)), ...);
      }(std::index_sequence_for<A...>{});
      if (!weights_[r].defined()) weights_[r] = Array(DType::f64, {});
    }
    const std::vector<uint8_t> sharded(flat_[0].leaves.size(), 0);
    core_->step(
        flat_, weights_, outs_, std::vector<int64_t>(local, 0), sharded,
        [&](TraceContext& ctx, int replica) {
          std::vector<std::string> paths;
          using Traced = std::tuple<typename detail::ArgTraits<A>::Traced...>;
          traced_ = [&]<size_t... I>(std::index_sequence<I...>) {
            return std::make_shared<Traced>(Traced{detail::ArgTraits<A>::make(
                std::get<I>((*locals)[replica]), ctx, fmt::format("arg{}", I), paths)...});
          }(std::index_sequence_for<A...>{});
          return paths;
        },
        [&](TraceContext& ctx, OutTree& tree) {
          using Traced = std::tuple<typename detail::ArgTraits<A>::Traced...>;
          using R = std::decay_t<std::invoke_result_t<F, typename detail::ArgTraits<A>::Traced...>>;
          R result = std::apply(fn_, *std::static_pointer_cast<Traced>(traced_));
          traced_.reset();
          std::vector<Tensor> leaves;
          detail::OutTraits<R>::flatten(result, leaves, tree);
          detail::find_passthrough(ctx, leaves, tree);
          return leaves;
        });
  }

  template <class R>
  auto unflatten() {
    const OutTree& tree = core_->entry(0).out;
    const size_t n = outs_[0].size();
    // Top-level result of each leaf: a leaf outside a dict, or the first of a dict, starts one.
    std::vector<Array> global(n);
    int top = -1;
    size_t in_dict = 0;
    for (size_t k = 0; k < n; ++k) {
      const int d = k < tree.leaf_dict.size() ? tree.leaf_dict[k] : -1;
      const bool starts = d < 0 || k == 0 || tree.leaf_dict[k - 1] != d;
      if (starts) {
        ++top;
        in_dict = 0;
      }
      if (static_cast<size_t>(top) >= out_specs_.size())
        throw std::invalid_argument(fmt::format("shard_map: {} out_specs for a function with more results",
                                                out_specs_.size()));
      const ShardSpec& s = out_specs_[static_cast<size_t>(top)];
      const std::string entry = d < 0 ? "" : tree.dict_names[static_cast<size_t>(d)][in_dict++];
      std::vector<const Array*> blocks;
      for (auto& o : outs_) blocks.push_back(&o[k]);
      const std::string what = entry.empty() ? fmt::format("result {}", top)
                                             : fmt::format("result {} entry '{}'", top, entry);
      global[k] = shard_map_detail::assemble(core_->mesh(), d < 0 ? s.dims : s.leaf(entry), blocks, what, loc_);
    }
    size_t pos = 0, dict = 0;
    return detail::OutTraits<R>::unflatten(global, pos, tree, dict);
  }

  F fn_;
  std::vector<ShardSpec> in_specs_, out_specs_;
  Loc loc_;
  std::shared_ptr<PmapCore> core_;
  Locals locals_;
  std::vector<FlatArgs> flat_;
  std::vector<Array> weights_;
  std::vector<std::vector<Array>> outs_;
  std::shared_ptr<void> traced_;
};

// REQUIRES: mesh has named axes (Mesh::threads(axes), Mesh::mpi(axes)); std::invalid_argument
// otherwise.
template <class F>
ShardMapped<F> shard_map(F fn, const Mesh& mesh, std::vector<ShardSpec> in_specs, std::vector<ShardSpec> out_specs,
                         PmapOptions options = {}, Loc loc = Loc::current()) {
  if (mesh.axes().empty())
    throw std::invalid_argument("shard_map: the mesh has no named axes (make it with Mesh::threads(axes) or Mesh::mpi(axes))");
  if (options.jit.name == "fn") options.jit.name = "shard_map";
  return ShardMapped<F>(mesh, std::move(fn), std::move(in_specs), std::move(out_specs), std::move(options), loc);
}

}  // namespace fjit
