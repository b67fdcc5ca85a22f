#include "core/lib/param_groups.h"

#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/name_pattern.h"
#include "core/ir/array.h"

namespace fjit {
namespace {

// State names as optimizer.h declares them: "m.<name>", "v.<name>", "step".
const char* const kMoments[] = {"m.", "v."};

std::string some_names(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 6);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(", ... ({} in all)", names.size());
  return s.empty() ? "none" : s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

}  // namespace

std::vector<size_t> param_group_indices(const std::vector<ParamGroup>& groups,
                                        const std::vector<std::string>& names) {
  std::vector<size_t> of(names.size(), groups.size());
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t k = 0; k < groups.size(); ++k)
      if (name_matches_any(groups[k].patterns, names[i])) {
        of[i] = k;
        break;
      }
  return of;
}

void check_param_groups(const std::vector<ParamGroup>& groups, const std::vector<std::string>& names) {
  for (size_t k = 0; k < groups.size(); ++k) {
    const ParamGroup& g = groups[k];
    if (g.patterns.empty())
      throw std::invalid_argument(fmt::format("parameter group '{}' has no patterns", g.name));
    for (size_t j = 0; j < k; ++j)
      if (groups[j].name == g.name)
        throw std::invalid_argument(fmt::format("two parameter groups are named '{}'", g.name));
    // One group serves models with and without some kind of parameter (no decay on "*/b"
    // and "*/g": Llama has no biases), so only a group that selects nothing at all is refused.
    bool any = false;
    for (const std::string& n : names) any = any || name_matches_any(g.patterns, n);
    if (!any)
      throw std::invalid_argument(fmt::format(
          "parameter group '{}': its patterns ({}) select no parameter (the parameters: {})", g.name,
          fmt::join(g.patterns, ", "), some_names(names)));
  }
}

std::string describe(const std::vector<ParamGroup>& groups) {
  std::string s;
  for (const ParamGroup& g : groups) {
    s += fmt::format("{}{}({}: lr x{}", s.empty() ? "" : " ", g.name, joined(g.patterns), g.lr_scale);
    if (g.weight_decay) s += fmt::format(", wd {}", *g.weight_decay);
    s += ")";
  }
  return s;
}

namespace param_group_detail {

Split split(const StateLayout& layout, const std::vector<ParamGroup>& groups,
            const TensorDict& params, const TensorDict& grads, const TensorDict& state,
            const std::vector<std::string>* pattern_names) {
  const std::vector<std::string> names = params.names();
  check_param_groups(groups, pattern_names ? *pattern_names : names);
  const std::vector<size_t> of = param_group_indices(groups, names);
  Split s;
  s.params.resize(groups.size() + 1);
  s.grads.resize(groups.size() + 1);
  s.state.resize(groups.size() + 1);
  // A missing gradient or state entry is left for the optimizer's update to name.
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    s.params[of[i]].set(n, params.value(i));
    if (grads.contains(n)) s.grads[of[i]].set(n, grads.at(n));
  }
  for (int m = 0; m < layout.moments; ++m)
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string key = kMoments[m] + names[i];
      if (state.contains(key)) s.state[of[i]].set(key, state.at(key));
    }
  if (layout.counts_steps && state.contains("step"))
    for (TensorDict& d : s.state) d.set("step", state.at("step"));
  return s;
}

OptimizerUpdate join(const StateLayout& layout, const TensorDict& params,
                     const std::vector<OptimizerUpdate>& parts) {
  auto find = [&](const std::string& key, bool in_state) -> const Tensor& {
    for (const OptimizerUpdate& u : parts) {
      const TensorDict& d = in_state ? u.second : u.first;
      if (d.contains(key)) return d.at(key);
    }
    throw std::logic_error("grouped_update: no group updated '" + key + "'");
  };
  OptimizerUpdate out;
  for (const auto& [name, p] : params) out.first.set(name, find(name, false));
  for (int m = 0; m < layout.moments; ++m)
    for (const auto& [name, p] : params) out.second.set(kMoments[m] + name, find(kMoments[m] + name, true));
  // Every group counted the same step; the first group's count stands for all.
  if (layout.counts_steps) out.second.set("step", find("step", true));
  return out;
}

}  // namespace param_group_detail

std::pair<ArrayDict, ArrayDict> split_trainable(const ArrayDict& all,
                                                const std::vector<std::string>& patterns) {
  const std::vector<std::string> names = all.names();
  if (patterns.empty())
    throw std::invalid_argument("split_trainable: no patterns (every parameter would be frozen)");
  for (const std::string& p : patterns) {
    bool any = false;
    for (const std::string& n : names) any = any || name_matches(p, n);
    if (!any)
      throw std::invalid_argument(fmt::format(
          "split_trainable: pattern '{}' (of '{}') selects no parameter (the parameters: {})", p,
          joined(patterns), some_names(names)));
  }
  std::pair<ArrayDict, ArrayDict> out;
  for (const auto& [name, a] : all) (name_matches_any(patterns, name) ? out.first : out.second).set(name, a);
  return out;
}

}  // namespace fjit
