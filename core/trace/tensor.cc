#include "core/trace/tensor.h"

#include <atomic>

#include "core/trace/stack_trace.h"
#include "core/base/log.h"
#include "core/ir/shape_rules.h"

namespace fjit {
namespace {
thread_local TraceContext* t_current = nullptr;

std::string operand_list(const std::vector<Tensor>& inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i)
    s += (i ? ", " : "") + (inputs[i].defined() ? inputs[i].type_string() : std::string("<undefined>"));
  return s;
}

TraceContext& require_trace(const char* name, const std::vector<Tensor>& inputs, const Loc* loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx)
    throw TraceError(std::string("fjit: ") + name + ": called outside a traced function (at " +
                     detail::call_site(loc) + "); ops on Tensors only run inside jit, grad or pmap");
  for (const Tensor& t : inputs) {
    if (!t.defined()) detail::fail(name, {}, "an operand is an undefined Tensor", loc);
    if (t.context() != ctx || t.trace_id() != ctx->trace_id())
      detail::fail(name, {}, "an operand belongs to another trace (a Tensor kept from an "
                   "earlier trace leaked out; pass values as arguments instead)", loc);
  }
  return *ctx;
}
}  // namespace

TraceContext::TraceContext(TraceOptions opts) : options(opts), previous_(t_current) {
  static std::atomic<uint64_t> next_id{1};
  trace_id_ = next_id.fetch_add(1);
  if (options.checks != CheckMode::off) options.capture_stacks = true;
  t_current = this;
}

TraceContext::~TraceContext() { t_current = previous_; }

TraceContext* TraceContext::current() { return t_current; }

Tensor TraceContext::parameter(DType dtype, const Shape& shape, const std::string& name) {
  Node n{Op::Parameter, dtype, shape, {}, {}, {}};
  n.attrs.index = static_cast<int64_t>(graph.parameters.size());
  n.attrs.name = name;
  const int id = graph.add(std::move(n));
  graph.parameters.push_back(id);
  return Tensor::from_node(this, id);
}

Tensor::Tensor(const Array& value, Loc loc) {
  TraceContext& ctx = require_trace("constant", {}, &loc);
  if (!value.defined()) detail::fail("constant", {}, "the captured Array is empty", &loc);
  if (static_cast<int64_t>(value.nbytes()) > ctx.options.large_constant_bytes) {
    std::string msg = "captured a large constant " + type_str(value.dtype(), value.shape()) + " (" +
                      std::to_string(value.nbytes()) + " bytes) at " + Site::from(loc).str() +
                      ": it is baked into the compiled step and never updated; pass it as an "
                      "argument if it is a parameter or state";
    log().warn("{}", msg);
    ctx.warnings.push_back(std::move(msg));
  }
  Attrs attrs;
  attrs.value = std::make_shared<const Array>(value.clone());
  *this = detail::build("constant", Op::Constant, {}, std::move(attrs),
                        ValueType{value.dtype(), value.shape()}, &loc);
}

int64_t Tensor::dim(int axis) const {
  const int r = rank();
  if (axis < -r || axis >= r)
    detail::fail("dim", {*this}, "axis " + std::to_string(axis) + " out of range", nullptr);
  return shape()[axis < 0 ? axis + r : axis];
}

const Node& Tensor::node() const {
  if (!ctx_) throw TraceError("fjit: use of an undefined Tensor");
  return ctx_->graph.node(id_);
}

namespace detail {

std::string call_site(const Loc* loc) {
  if (loc) return Site::from(*loc).str();
  return user_call_site(StackTrace::capture(1));
}

namespace {
thread_local CompositeScope* g_composite = nullptr;  // the innermost one alive
}  // namespace

CompositeScope::CompositeScope(const char* name, std::initializer_list<Tensor> inputs)
    : name_(name), inputs_(inputs), outer_(g_composite) {
  g_composite = this;
}

CompositeScope::~CompositeScope() { g_composite = outer_; }

void fail(const char* name, const std::vector<Tensor>& inputs, const std::string& what,
          const Loc* loc) {
  const CompositeScope* outermost = g_composite;
  while (outermost && outermost->outer_) outermost = outermost->outer_;
  std::string msg = "fjit: ";
  auto op = [&](const char* n, const std::vector<Tensor>& ins) {
    std::string s = n;
    if (!ins.empty()) s += "(" + operand_list(ins) + ")";
    return s;
  };
  if (outermost && std::string(outermost->name_) != name)
    msg += op(outermost->name_, outermost->inputs_) + ": " + what + " (in its " + name + ")";
  else
    msg += op(name, inputs) + ": " + what;
  msg += " (at " + call_site(loc) + ")";
  throw TraceError(msg);
}

Tensor build(const char* name, Op op, const std::vector<Tensor>& inputs, Attrs attrs,
             const ValueType& hint, const Loc* loc) {
  TraceContext& ctx = require_trace(name, inputs, loc);
  std::vector<ValueType> types;
  types.reserve(inputs.size());
  for (const Tensor& t : inputs) types.push_back({t.dtype(), t.shape()});
  ValueType out;
  try {
    out = infer_type(op, attrs, types, hint);
  } catch (const ShapeRuleError& e) {
    fail(name, inputs, e.what(), loc);
  }
  Node n{op, out.dtype, std::move(out.shape), {}, std::move(attrs), {}};
  n.inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) n.inputs.push_back(t.id());
  if (loc) n.site = Site::from(*loc);
  if (ctx.options.capture_stacks)
    n.site.stack = std::make_shared<const StackTrace>(StackTrace::capture(2));
  return Tensor::from_node(&ctx, ctx.graph.add(std::move(n)));
}

}  // namespace detail
}  // namespace fjit
