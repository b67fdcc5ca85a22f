#include "checks/check.h"

#include <fmt/format.h>

#include "checks/report.h"
#include "core/ir/check_upstream.h"
#include "core/trace/ops.h"

namespace fjit {

int count_format_fields(std::string_view f) {
  int fields = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{') {
      if (i + 1 < f.size() && f[i + 1] == '{') {
        ++i;
        continue;
      }
      ++fields;
      while (i < f.size() && f[i] != '}') ++i;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      ++i;
    }
  }
  return fields;
}

namespace detail {

void check_impl(const Tensor& pred_in, const CheckFormat& format, std::span<const Tensor> values,
                CheckKind kind) {
  const Loc loc = format.loc;
  TraceContext* ctx = TraceContext::current();
  if (check_kind_info(kind).reads != CheckReads::kNothing)
    fail("check", {},
         fmt::format("check kind '{}' scans an op's values: only predicate kinds (user, "
                     "loss_scale_overflow) can be raised by a call", check_kind_name(kind)), &loc);
  if (!ctx)
    throw TraceError("fjit: check: called outside a traced function (at " + call_site(&loc) +
                     "); check() only runs inside jit, grad or pmap");
  std::vector<Tensor> inputs{pred_in};
  inputs.insert(inputs.end(), values.begin(), values.end());
  for (const Tensor& t : inputs)
    if (!t.defined() || t.context() != ctx || t.trace_id() != ctx->trace_id())
      fail("check", {}, "an operand is undefined or belongs to another trace", &loc);
  if (pred_in.dtype() != DType::boolean)
    fail("check", {pred_in}, "the predicate must be a bool Tensor", &loc);
  std::vector<DType> types;
  for (const Tensor& v : values) {
    if (v.rank() != 0)
      fail("check", {v}, "values reported by a check must be scalars (reduce them first)", &loc);
    types.push_back(v.dtype());
  }
  const std::string text(format.text);
  const int fields = count_format_fields(text);
  if (fields != static_cast<int>(values.size()))
    fail("check", {}, "the message \"" + text + "\" has " + std::to_string(fields) +
         " replacement fields but " + std::to_string(values.size()) + " values were given", &loc);
  std::string error;
  if (!validate_check_format(text, types, &error))
    fail("check", {}, "bad message format \"" + text + "\": " + error, &loc);
  // Off records nothing (the plan is unchanged), except the sentinel's check: the run asked for
  // it by itself (--sentinel K), whatever the check mode.
  if (ctx->options.checks == CheckMode::off && kind != CheckKind::sentinel) return;

  if (pred_in.rank() > 0) inputs[0] = all(pred_in, {}, false, loc);
  const int id = static_cast<int>(ctx->check_sites.size());
  Attrs attrs;
  attrs.index = id;  // unique per site, so hash-consing never merges two checks
  Tensor node = build("check", Op::Check, inputs, std::move(attrs), ValueType{DType::boolean, {}}, &loc);
  CheckSite site;
  site.kind = kind;  // the node's kernel treats every predicate kind as a user check
  site.format = text;
  site.num_values = static_cast<int>(values.size());
  site.site = node.node().site;  // file:line of the call and, with checks on, its stack
  site.node = node.id();
  ctx->check_sites.push_back(std::move(site));
  link_new_site(ctx->graph, ctx->check_sites, id);
}

}  // namespace detail
}  // namespace fjit
