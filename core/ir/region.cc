#include "core/ir/region.h"

#include <string>

#include "core/ir/shape_rules.h"

namespace fjit {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw ShapeRuleError(msg); }

ValueType param_type(const Graph& g, size_t k) {
  const Node& p = g.node(g.parameters[k]);
  return {p.dtype, p.shape};
}

void require_params(const Graph& g, std::span<const ValueType> ins, const char* what) {
  if (g.parameters.size() != ins.size())
    fail(std::string(what) + " takes " + std::to_string(g.parameters.size()) + " operands, got " +
         std::to_string(ins.size()));
  for (size_t k = 0; k < ins.size(); ++k) {
    const ValueType p = param_type(g, k);
    if (p.dtype != ins[k].dtype || p.shape != ins[k].shape)
      fail(std::string(what) + " operand " + std::to_string(k) + " is " +
           type_str(ins[k].dtype, ins[k].shape) + " but its parameter is " + type_str(p.dtype, p.shape));
  }
}

}  // namespace

void Region::finish() {
  has_effects = false;
  for (const auto& g : graphs) has_effects = has_effects || !g->effects.empty();
}

ValueType control_type(Op op, const Attrs& a, std::span<const ValueType> ins) {
  if (!a.region) fail("a control-flow op needs its region");
  const Region& r = *a.region;
  if (op == Op::Output) {
    if (a.index < 0 || a.index >= static_cast<int64_t>(r.outputs.size()))
      fail("output " + std::to_string(a.index) + " of " + std::to_string(r.outputs.size()) + " results");
    return r.outputs[a.index];
  }
  switch (op) {
    case Op::Scan: {
      if (r.graphs.size() != 1) fail("scan needs one body");
      std::vector<ValueType> params(ins.begin(), ins.end());
      for (int k = r.num_carry; k < r.num_carry + r.num_xs && k < static_cast<int>(params.size()); ++k) {
        Shape& s = params[k].shape;
        if (s.empty() || s[0] != r.length)
          fail("xs operand " + std::to_string(k - r.num_carry) + " " + type_str(params[k].dtype, s) +
               " does not have the leading extent " + std::to_string(r.length));
        s.erase(s.begin());
      }
      require_params(*r.graphs[0], params, "the body");
      break;
    }
    case Op::Cond:
      if (r.graphs.size() != 2) fail("cond needs two branches");
      if (ins.empty() || ins[0].dtype != DType::boolean || !ins[0].shape.empty())
        fail("cond needs a bool scalar predicate");
      require_params(*r.graphs[0], ins.subspan(1), "the true branch");
      require_params(*r.graphs[1], ins.subspan(1), "the false branch");
      break;
    case Op::CustomVjp:
      if (r.graphs.size() != 2) fail("custom_vjp needs fwd and bwd");
      require_params(*r.graphs[0], ins, "fwd");
      break;
    case Op::WhileLoop: {
      if (r.graphs.size() != 2) fail("while_loop needs cond_fn and body_fn");
      require_params(*r.graphs[0], ins, "cond_fn");
      require_params(*r.graphs[1], ins, "body_fn");
      const Graph& c = *r.graphs[0];
      if (c.outputs.size() != 1 || c.node(c.outputs[0]).dtype != DType::boolean ||
          !c.node(c.outputs[0]).shape.empty())
        fail("while_loop's cond_fn must return one bool scalar");
      const Graph& b = *r.graphs[1];
      if (r.num_carry > static_cast<int>(ins.size()) || b.outputs.size() != static_cast<size_t>(r.num_carry))
        fail("while_loop's body_fn must return its " + std::to_string(r.num_carry) + " carry leaves");
      for (int j = 0; j < r.num_carry; ++j) {
        const Node& o = b.node(b.outputs[j]);
        if (o.dtype != ins[j].dtype || o.shape != ins[j].shape)
          fail("while_loop carry " + std::to_string(j) + " is " + type_str(ins[j].dtype, ins[j].shape) +
               " but body_fn returns " + type_str(o.dtype, o.shape));
      }
      break;
    }
    case Op::Remat:
      if (r.graphs.size() != 1) fail("remat needs one function");
      require_params(*r.graphs[0], ins, "the function");
      break;
    default: fail("not a control-flow op");
  }
  return {DType::boolean, {}};
}

}  // namespace fjit
