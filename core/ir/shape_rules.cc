#include "core/ir/shape_rules.h"

#include <algorithm>
#include <string>

#include "core/ir/region.h"
#include "core/ir/shape_rules_internal.h"

namespace fjit {
namespace {

using shape_rules_internal::fail;
using shape_rules_internal::max_pool_type;
using shape_rules_internal::patches_type;
using shape_rules_internal::require_dtype;

std::string types(std::span<const ValueType> ins) {
  std::string s;
  for (size_t i = 0; i < ins.size(); ++i) s += (i ? " and " : "") + type_str(ins[i].dtype, ins[i].shape);
  return s;
}

void require_same_dtype(std::span<const ValueType> ins) {
  for (const ValueType& t : ins)
    if (t.dtype != ins[0].dtype) fail("dtype mismatch: " + types(ins));
}

// With attrs.window set (the compiler's patches-products pass, patches_gemm.h): index 0,
// operand 0 is an image (f32 or bf16) and op(A) its patches reshaped to [N*OH*OW, KH*KW*C];
// index 1, the result is the f32 image `hint` whose patches' cotangent the product is
// (patches_adjoint).
ValueType matmul_type(const Attrs& a, std::span<const ValueType> ins, const ValueType& hint) {
  if (!a.window.empty() && a.index == 1) {
    Attrs plain = a;
    plain.window.clear();
    plain.index = 0;
    const ValueType product = matmul_type(plain, ins, hint);
    const ValueType cols = patches_type(Op::Patches, a, hint, hint);
    if (product.dtype != DType::f32 || hint.dtype != DType::f32 ||
        product.shape != Shape{cols.shape[0] * cols.shape[1] * cols.shape[2], cols.shape[3]})
      fail("a product " + type_str(product.dtype, product.shape) + " is not the patches of " +
           type_str(hint.dtype, hint.shape));
    return hint;
  }
  if (!a.window.empty()) {
    const ValueType cols = patches_type(Op::Patches, a, ins[0], ins[0]);
    if (cols.dtype != DType::f32 && cols.dtype != DType::bf16)
      fail("an image operand's patches must be f32 or bf16, got " + types(ins));
    const ValueType flat{cols.dtype, {cols.shape[0] * cols.shape[1] * cols.shape[2], cols.shape[3]}};
    Attrs plain = a;
    plain.window.clear();
    const ValueType both[2] = {flat, ins[1]};
    return matmul_type(plain, both, hint);
  }
  const ValueType &x = ins[0], &y = ins[1];
  require_same_dtype(ins);
  // bf16 operands: products accumulated in f32, result f32 (JAX's preferred_element_type=f32).
  require_dtype(x, is_arithmetic(x.dtype) || x.dtype == DType::bf16, "numeric or bf16 operands");
  if (x.shape.size() < 2 || y.shape.size() < 2)
    fail("operands must have rank >= 2, got " + types(ins));
  const size_t rx = x.shape.size(), ry = y.shape.size();
  const int64_t m = a.trans_a ? x.shape[rx - 1] : x.shape[rx - 2];
  const int64_t kx = a.trans_a ? x.shape[rx - 2] : x.shape[rx - 1];
  const int64_t ky = a.trans_b ? y.shape[ry - 1] : y.shape[ry - 2];
  const int64_t n = a.trans_b ? y.shape[ry - 2] : y.shape[ry - 1];
  if (kx != ky)
    fail("contraction dimensions differ (" + std::to_string(kx) + " vs " + std::to_string(ky) +
         ") for " + types(ins) + (a.trans_a ? " with trans_a" : "") + (a.trans_b ? " with trans_b" : ""));
  Shape bx(x.shape.begin(), x.shape.end() - 2), by(y.shape.begin(), y.shape.end() - 2);
  if (!bx.empty() && !by.empty() && bx != by)
    fail("batch dimensions differ: " + types(ins));
  Shape out = bx.empty() ? by : bx;
  out.push_back(m);
  out.push_back(n);
  return {x.dtype == DType::bf16 ? DType::f32 : x.dtype, out};
}

// attention(q [B,H,Tq,dh], k [B,H,Tk,dh], v [B,H,Tk,dv] [, key_lengths i32 [B]]) ->
// [B,H,Tq,dv+1] (the output and each row's log-sum-exp; f32 for bf16 q, k, v); attention_grad(q, k, v, that result,
// its cotangent [, key_lengths]) -> [B,H,Tq*dh + Tk*dh + Tk*dv] (dq, dk, dv of each head, flat).
// attrs.index: causal (0 or 1).
ValueType attention_type(Op op, const Attrs& a, std::span<const ValueType> ins) {
  const size_t base = op == Op::Attention ? 3 : 5;
  if (ins.size() != base && ins.size() != base + 1)
    fail("expects " + std::to_string(base) + " operands and optional key lengths, got " + std::to_string(ins.size()));
  const ValueType &q = ins[0], &k = ins[1], &v = ins[2];
  require_same_dtype(ins.first(3));
  require_dtype(q, q.dtype == DType::f32 || q.dtype == DType::f64 || q.dtype == DType::bf16,
                "f32, f64 or bf16 q, k and v");
  const DType rt = q.dtype == DType::bf16 ? DType::f32 : q.dtype;  // bf16 operands: f32 results
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
    fail("expects q [B,H,Tq,dh], k [B,H,Tk,dh] and v [B,H,Tk,dv] of rank 4, got " + types(ins.first(3)));
  const int64_t b = q.shape[0], h = q.shape[1], tq = q.shape[2], dh = q.shape[3];
  const int64_t tk = k.shape[2], dv = v.shape[3];
  if (k.shape[0] != b || k.shape[1] != h || k.shape[3] != dh || v.shape[0] != b || v.shape[1] != h ||
      v.shape[2] != tk)
    fail("expects q [B,H,Tq,dh], k [B,H,Tk,dh] and v [B,H,Tk,dv] with equal B, H, dh and Tk, got " +
         types(ins.first(3)));
  if (tk < 1) fail("needs at least one key, got " + types(ins.first(3)));
  if (a.index != 0 && tq > tk)
    fail("causal attention with more queries than keys (Tq " + std::to_string(tq) + " > Tk " +
         std::to_string(tk) + "): the first Tq - Tk query rows would see no key");
  if (ins.size() == base + 1) {
    const ValueType& len = ins[base];
    if (len.dtype != DType::i32 || len.shape != Shape{b})
      fail("expects key lengths i32[" + std::to_string(b) + "], got " + type_str(len.dtype, len.shape));
  }
  const Shape packed{b, h, tq, dv + 1};
  if (op == Op::Attention) return {rt, packed};
  for (size_t i = 3; i < 5; ++i)
    if (ins[i].shape != packed || ins[i].dtype != rt)
      fail("expects the forward's result and its cotangent " + type_str(rt, packed) + ", got " +
           types(ins.subspan(3, 2)));
  return {rt, {b, h, tq * dh + tk * (dh + dv)}};
}

// top_k(x [..., n]) -> i32 [..., k]: the indices of the k largest along the last axis.
ValueType top_k_type(const Attrs& a, const ValueType& x) {
  require_dtype(x, is_arithmetic(x.dtype), "a numeric operand");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) fail("top_k needs an operand of rank >= 1, got " + type_str(x.dtype, x.shape));
  if (a.axis != rank - 1) fail("top_k runs along the last axis (" + std::to_string(rank - 1) + "), not " +
                               std::to_string(a.axis));
  if (a.index < 0 || a.index > x.shape.back())
    fail("k = " + std::to_string(a.index) + " is outside [0, " + std::to_string(x.shape.back()) + "] for " +
         type_str(x.dtype, x.shape));
  Shape out = x.shape;
  out.back() = a.index;
  return {DType::i32, out};
}

ValueType reduce_type(Op op, const Attrs& a, const ValueType& x) {
  if (op == Op::TopK) return top_k_type(a, x);
  if (op == Op::ReduceAll || op == Op::ReduceAny)
    require_dtype(x, x.dtype == DType::boolean, "a bool operand");
  else
    require_dtype(x, is_arithmetic(x.dtype), "a numeric operand");
  const int rank = static_cast<int>(x.shape.size());
  std::vector<int64_t> axes = a.axes;
  const bool arg = op == Op::ArgMax || op == Op::ArgMin;
  if (arg) axes = {a.axis};
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank)
      fail("axis " + std::to_string(axes[i]) + " is out of range for " + type_str(x.dtype, x.shape));
    if (i && axes[i] <= axes[i - 1]) fail("axes must be sorted and unique");
  }
  Shape out;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) out.push_back(x.shape[d]);
    else if (a.keepdims) out.push_back(1);
  }
  if (arg) {
    if (x.shape[a.axis] == 0) fail(std::string(op_name(op)) + " over an empty axis");
    return {DType::i32, out};
  }
  return {x.dtype, out};
}


ValueType layout_type(Op op, const Attrs& a, std::span<const ValueType> ins, const ValueType& hint) {
  const ValueType& x = ins[0];
  const int rank = static_cast<int>(x.shape.size());
  switch (op) {
    case Op::Reshape:
      if (num_elements(hint.shape) != x.size())
        fail("cannot reshape " + type_str(x.dtype, x.shape) + " (" + std::to_string(x.size()) +
             " elements) to " + shape_str(hint.shape));
      return {x.dtype, hint.shape};
    case Op::Transpose: {
      if (static_cast<int>(a.axes.size()) != rank)
        fail("permutation has " + std::to_string(a.axes.size()) + " entries for rank " + std::to_string(rank));
      std::vector<bool> seen(rank, false);
      Shape out;
      for (int64_t p : a.axes) {
        if (p < 0 || p >= rank || seen[p]) fail("invalid permutation for " + type_str(x.dtype, x.shape));
        seen[p] = true;
        out.push_back(x.shape[p]);
      }
      return {x.dtype, out};
    }
    case Op::BroadcastTo:
      if (broadcast_shapes(x.shape, hint.shape) != hint.shape)
        fail("cannot broadcast " + type_str(x.dtype, x.shape) + " to " + shape_str(hint.shape));
      return {x.dtype, hint.shape};
    case Op::Concat: {
      if (ins.empty()) fail("needs at least one operand");
      require_same_dtype(ins);
      if (rank == 0) fail("cannot concatenate scalars");
      if (a.axis < 0 || a.axis >= rank) fail("axis " + std::to_string(a.axis) + " out of range");
      Shape out = x.shape;
      out[a.axis] = 0;
      for (const ValueType& t : ins) {
        if (t.shape.size() != x.shape.size()) fail("rank mismatch: " + types(ins));
        for (int d = 0; d < rank; ++d)
          if (d != a.axis && t.shape[d] != x.shape[d]) fail("shapes differ off the axis: " + types(ins));
        out[a.axis] += t.shape[a.axis];
      }
      return {x.dtype, out};
    }
    case Op::Slice: {
      if (static_cast<int>(a.starts.size()) != rank || a.limits.size() != a.starts.size() ||
          a.steps.size() != a.starts.size())
        fail("starts/limits/steps must each have one entry per dimension of " + type_str(x.dtype, x.shape));
      Shape out;
      for (int d = 0; d < rank; ++d) {
        if (a.steps[d] < 1) fail("step must be >= 1");
        if (a.starts[d] < 0 || a.limits[d] > x.shape[d] || a.starts[d] > a.limits[d])
          fail("slice [" + std::to_string(a.starts[d]) + ":" + std::to_string(a.limits[d]) +
               "] out of range for dimension " + std::to_string(d) + " of " + type_str(x.dtype, x.shape));
        out.push_back((a.limits[d] - a.starts[d] + a.steps[d] - 1) / a.steps[d]);
      }
      return {x.dtype, out};
    }
    case Op::Patches: case Op::PatchesAdjoint: return patches_type(op, a, x, hint);
    case Op::MaxPool: case Op::MaxPoolGrad: return max_pool_type(op, a, ins);
    case Op::Cumsum:
      require_dtype(x, is_arithmetic(x.dtype), "a numeric operand");
      if (a.axis < 0 || a.axis >= rank)
        fail("axis " + std::to_string(a.axis) + " is out of range for " + type_str(x.dtype, x.shape));
      return x;
    default: fail("not a layout op");
  }
}

// random_bits(key u32[2]) -> u32[hint]; fold_in(key u32[2], data i32/u32 scalar) -> u32[2];
// random_unit(bits u32[...]) -> hint's float dtype, same shape.
ValueType random_type(Op op, std::span<const ValueType> ins, const ValueType& hint) {
  auto require_key = [](const ValueType& k) {
    if (k.dtype != DType::u32 || k.shape != Shape{2})
      fail("expects a key of type u32[2] (from PRNGKey or split), got " + type_str(k.dtype, k.shape));
  };
  switch (op) {
    case Op::RandomBits:
      require_key(ins[0]);
      return {DType::u32, hint.shape};
    case Op::FoldIn:
      require_key(ins[0]);
      if ((ins[1].dtype != DType::i32 && ins[1].dtype != DType::u32) || !ins[1].shape.empty())
        fail("fold_in data must be an i32 or u32 scalar, got " + type_str(ins[1].dtype, ins[1].shape));
      return ins[0];
    case Op::RandomUnit:
      require_dtype(ins[0], ins[0].dtype == DType::u32, "u32 random bits");
      if (!is_floating(hint.dtype))
        fail(std::string("expects a floating-point result dtype, got ") + dtype_name(hint.dtype));
      return {hint.dtype, ins[0].shape};
    default: fail("not a random op");
  }
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      fail("shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

ValueType infer_type(Op op, const Attrs& a, std::span<const ValueType> ins, const ValueType& hint) {
  const int arity = op_arity(op);
  if (arity >= 0 && static_cast<int>(ins.size()) != arity)
    fail("expects " + std::to_string(arity) + " operands, got " + std::to_string(ins.size()));
  switch (op_kind(op)) {
    case OpKind::kSource:
      if (op == Op::Constant && a.value &&
          (a.value->dtype() != hint.dtype || a.value->shape() != hint.shape))
        fail("constant data does not match its type");
      return hint;
    case OpKind::kUnary: {
      const ValueType& x = ins[0];
      switch (op_dtype_rule(op)) {  // the row's dtype rule (core/ir/ops.def)
        case DTypeRule::kGiven: return {hint.dtype, x.shape};
        case DTypeRule::kToBool:
          require_dtype(x, is_arithmetic(x.dtype), "a numeric operand");
          return {DType::boolean, x.shape};
        case DTypeRule::kNumeric:
          require_dtype(x, is_arithmetic(x.dtype), "a numeric operand");
          return x;
        case DTypeRule::kFloat:
          require_dtype(x, is_floating(x.dtype), "a floating-point operand");
          return x;
        default:
          fail("unary op without a unary dtype rule in core/ir/ops.def");
      }
    }
    case OpKind::kBinary:
      require_same_dtype(ins);
      require_dtype(ins[0], is_arithmetic(ins[0].dtype), "numeric operands");
      return {ins[0].dtype, broadcast_shapes(ins[0].shape, ins[1].shape)};
    case OpKind::kCompare:
      require_same_dtype(ins);
      require_dtype(ins[0], is_arithmetic(ins[0].dtype) || ins[0].dtype == DType::boolean,
                    "numeric or bool operands");
      return {DType::boolean, broadcast_shapes(ins[0].shape, ins[1].shape)};
    case OpKind::kLogical:
      for (const ValueType& t : ins) require_dtype(t, t.dtype == DType::boolean, "bool operands");
      return {DType::boolean, ins.size() == 1 ? ins[0].shape : broadcast_shapes(ins[0].shape, ins[1].shape)};
    case OpKind::kSelect: {
      require_dtype(ins[0], ins[0].dtype == DType::boolean, "a bool condition");
      if (ins[1].dtype != ins[2].dtype) fail("branch dtypes differ: " + types(ins.subspan(1)));
      Shape s = broadcast_shapes(broadcast_shapes(ins[0].shape, ins[1].shape), ins[2].shape);
      return {ins[1].dtype, s};
    }
    case OpKind::kMatMul: return matmul_type(a, ins, hint);
    case OpKind::kAttention: return attention_type(op, a, ins);
    case OpKind::kReduce: return reduce_type(op, a, ins[0]);
    case OpKind::kLayout: return layout_type(op, a, ins, hint);
    case OpKind::kIndex: {
      const ValueType &x = ins[0], &idx = ins[1];
      require_dtype(idx, idx.dtype == DType::i32, "i32 indices");
      if (op == Op::SoftmaxXent || op == Op::SoftmaxXentGrad) {
        // logits [..., V], labels [...] (axis: the last axis of the logits), ct [...].
        require_dtype(x, x.dtype == DType::f32 || x.dtype == DType::f64, "f32 or f64 logits");
        const int rank = static_cast<int>(x.shape.size());
        if (rank < 1 || a.axis != rank - 1)
          fail("logits " + type_str(x.dtype, x.shape) + " need rank >= 1 and axis = the last axis");
        const Shape rows(x.shape.begin(), x.shape.end() - 1);
        if (idx.shape != rows)
          fail("labels " + type_str(idx.dtype, idx.shape) + " must have the shape " + shape_str(rows) +
               " of the logits " + type_str(x.dtype, x.shape) + " without the last axis");
        if (op == Op::SoftmaxXent) return {x.dtype, rows};
        if (ins[2].dtype != x.dtype || ins[2].shape != rows)
          fail("cotangent " + type_str(ins[2].dtype, ins[2].shape) + " must be " + type_str(x.dtype, rows));
        return x;
      }
      if (op == Op::Gather) {
        const int rank = static_cast<int>(x.shape.size());
        if (a.axis < 0 || a.axis >= rank)
          fail("axis " + std::to_string(a.axis) + " out of range for " + type_str(x.dtype, x.shape));
        Shape out(x.shape.begin(), x.shape.begin() + a.axis);
        out.insert(out.end(), idx.shape.begin(), idx.shape.end());
        out.insert(out.end(), x.shape.begin() + a.axis + 1, x.shape.end());
        return {x.dtype, out};
      }
      // scatter_add(updates, indices) into an operand of type `hint`: the inverse of gather.
      Shape expect(hint.shape.begin(), hint.shape.begin() + a.axis);
      expect.insert(expect.end(), idx.shape.begin(), idx.shape.end());
      expect.insert(expect.end(), hint.shape.begin() + a.axis + 1, hint.shape.end());
      require_dtype(x, is_arithmetic(x.dtype), "numeric updates");
      if (expect != x.shape || x.dtype != hint.dtype)
        fail("updates " + type_str(x.dtype, x.shape) + " do not match gather of " +
             type_str(hint.dtype, hint.shape) + " by " + type_str(idx.dtype, idx.shape));
      return hint;
    }
    case OpKind::kCollective:
      if (op == Op::AxisIndex) return {DType::i32, {}};
      if (op == Op::AllGather) {
        if (ins[0].shape.empty()) fail("all_gather needs rank >= 1");
        // attrs.axes, when set: every replica's rows (pmap's uneven split), summed here.
        int64_t rows = 0;
        for (int64_t r : a.axes) rows += r;
        const bool stacked = a.axes.empty()
            ? !hint.shape.empty() && hint.shape[0] % std::max<int64_t>(ins[0].shape[0], 1) == 0
            : !hint.shape.empty() && hint.shape[0] == rows;
        if (!stacked || !std::equal(hint.shape.begin() + 1, hint.shape.end(), ins[0].shape.begin() + 1,
                                    ins[0].shape.end()))
          fail("all_gather output must stack whole replica shards");
        return {ins[0].dtype, hint.shape};
      }
      if (op == Op::ReduceScatter) {
        const Shape& s = ins[0].shape;
        if (s.empty() || hint.shape.size() != s.size() ||
            !std::equal(s.begin() + 1, s.end(), hint.shape.begin() + 1) ||
            (hint.shape[0] == 0 ? s[0] != 0 : s[0] % hint.shape[0] != 0))
          fail("reduce_scatter output must be one of the operand's equal blocks along axis 0");
      }
      if (op == Op::AllToAll || op == Op::Permute) {
        if (ins[0].shape.empty() && op == Op::AllToAll) fail("all_to_all needs rank >= 1");
        return ins[0];
      }
      // f16 may be summed (gradients carried in half precision: each partial sum rounds to
      // f16, parallel/communicator_reduce.h); other storage dtypes are gathered, not reduced.
      require_dtype(ins[0], is_arithmetic(ins[0].dtype) || ins[0].dtype == DType::boolean ||
                                (ins[0].dtype == DType::f16 && a.reduce == static_cast<uint8_t>(ReduceOp::sum)),
                    "a numeric or bool operand, or f16 for a sum (storage dtypes can be gathered, not reduced)");
      return op == Op::ReduceScatter ? ValueType{ins[0].dtype, hint.shape} : ins[0];
    case OpKind::kRandom: return random_type(op, ins, hint);
    case OpKind::kEffect:
      if (ins.empty() || ins[0].dtype != DType::boolean || !ins[0].shape.empty())
        fail("check needs a bool scalar predicate, got " + types(ins));
      return {DType::boolean, {}};
    case OpKind::kControl: return control_type(op, a, ins);
  }
  fail("unknown op");
}

}  // namespace fjit
