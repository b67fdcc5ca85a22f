// Training some parameters differently from others, or not at all, selected by name pattern
// (core/base/name_pattern.h).
//
// Parameter groups, as torch.optim's param_groups: each group scales the learning rate and
// may set its own weight decay; a parameter belongs to the first group with a pattern that
// selects it, else to the default group (the optimizer's own settings).
//
//   std::vector<ParamGroup> groups = {{.name = "no_decay", .patterns = {"*/b", "*/g"}, .weight_decay = 0.0}};
//   auto [p2, s2] = grouped_update(AdamW{.lr = lr, .weight_decay = 0.1}, groups, p, g, s);
//
// grouped_update equals running the optimizer once per group on that group's parameters, with
// lr * lr_scale and the group's weight decay, and is traced into the one step (the names are
// static): the plan runs each group's update as the optimizer's compiled program. The state is
// the optimizer's own (init_state of all the parameters): groups change no state names, so a
// checkpoint does not depend on them.
//
// Frozen parameters: split_trainable divides a parameter dict into the entries a set of
// patterns selects (trained) and the rest (read only).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/array.h"
#include "core/lib/optimizer.h"

namespace fjit {

struct ParamGroup {
  std::string name;
  std::vector<std::string> patterns;
  double lr_scale = 1.0;
  std::optional<double> weight_decay;  // unset: the optimizer's
};

// The group of each of `names`: an index into `groups`, or groups.size() for the default group.
std::vector<size_t> param_group_indices(const std::vector<ParamGroup>& groups,
                                        const std::vector<std::string>& names);
// Throws std::invalid_argument naming the group and its patterns when together they select
// none of `names` (one of them alone may select nothing: "*/b" in a Llama, which has no biases),
// or when two groups share a name or a group has no patterns.
void check_param_groups(const std::vector<ParamGroup>& groups, const std::vector<std::string>& names);
// "no_decay(*/b,*/g: lr x1, wd 0)", for logs and run configurations; "" for no groups.
std::string describe(const std::vector<ParamGroup>& groups);

// The optimizer a group runs: lr * lr_scale (a traced rate stays traced) and its weight decay.
template <class O>
O group_optimizer(const O& o, const ParamGroup& group) {
  O g = o;
  if (group.lr_scale != 1.0)
    g.lr = o.lr.is_tensor() ? Scalar(mul(o.lr.as(DType::f64), scalar(DType::f64, group.lr_scale)))
                            : Scalar(o.lr.value() * group.lr_scale);
  if (group.weight_decay) g.weight_decay = *group.weight_decay;
  return g;
}

namespace param_group_detail {
// The parameters, gradients and state of each group (the default last), the step counter in
// every state that has one, and the assembly of the groups' results in the optimizer's order.
struct Split {
  std::vector<TensorDict> params, grads, state;
};
Split split(const StateLayout& layout, const std::vector<ParamGroup>& groups,
            const TensorDict& params, const TensorDict& grads, const TensorDict& state,
            const std::vector<std::string>* pattern_names);
OptimizerUpdate join(const StateLayout& layout, const TensorDict& params,
                     const std::vector<OptimizerUpdate>& parts);
}  // namespace param_group_detail

// The optimizer's update with each group's settings. The patterns are checked against
// `pattern_names` when given (a step with frozen parameters passes every name, so a pattern
// that selects only frozen ones is no error), else against the params' names.
template <class O>
  requires ElementwiseOptimizer<O> && requires(O o) { o.lr = Scalar(1.0); o.weight_decay = 0.0; }
OptimizerUpdate grouped_update(const O& o, const std::vector<ParamGroup>& groups,
                               const TensorDict& params, const TensorDict& grads,
                               const TensorDict& state,
                               const std::vector<std::string>* pattern_names = nullptr) {
  if (groups.empty()) return o.update(params, grads, state);
  const param_group_detail::Split s =
      param_group_detail::split(o.layout(), groups, params, grads, state, pattern_names);
  std::vector<OptimizerUpdate> parts(groups.size() + 1);
  for (size_t k = 0; k <= groups.size(); ++k) {
    if (s.params[k].empty()) continue;
    const O gk = k < groups.size() ? group_optimizer(o, groups[k]) : o;
    parts[k] = gk.update(s.params[k], s.grads[k], s.state[k]);
  }
  return param_group_detail::join(o.layout(), params, parts);
}

// {entries a pattern selects, the others}, each in `all`'s order. Throws std::invalid_argument
// naming the pattern and a few of the names when a pattern selects nothing.
std::pair<ArrayDict, ArrayDict> split_trainable(const ArrayDict& all,
                                                const std::vector<std::string>& patterns);

}  // namespace fjit
