// The fast elementwise family's entry point and its broadcast planning (see
// elementwise_common.h). The kernels themselves live in elementwise_{unary,binary,compare}.cc.
#include <cassert>
#include <stdexcept>

#include "core/kernels/elementwise/elementwise_common.h"
#include "core/kernels/families.h"

namespace fjit::kernels {
namespace ew {
namespace {

void noop_kernel(const Instr&, const Frame&) {}

}  // namespace

int plan_broadcast(Instr& instr) {
  const Shape& out = instr.out.shape;
  const int rank = static_cast<int>(out.size());
  const int num_ins = static_cast<int>(instr.ins.size());
  // Per kept output dim: its extent, then each operand's stride along it.
  std::vector<int64_t> ext;
  std::vector<std::vector<int64_t>> st(num_ins);
  std::vector<std::vector<int64_t>> in_strides(num_ins);
  for (int k = 0; k < num_ins; ++k) in_strides[k] = row_major_strides(instr.ins[k].shape);
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    std::vector<int64_t> s(num_ins);
    for (int k = 0; k < num_ins; ++k) {
      const Shape& in = instr.ins[k].shape;
      const int lead = rank - static_cast<int>(in.size());
      assert(lead >= 0);
      s[k] = (d < lead || in[d - lead] == 1) ? 0 : in_strides[k][d - lead];
      assert(d < lead || in[d - lead] == 1 || in[d - lead] == out[d]);
    }
    bool merge = !ext.empty();
    for (int k = 0; k < num_ins && merge; ++k) merge = st[k].back() == s[k] * out[d];
    if (merge) {
      ext.back() *= out[d];
      for (int k = 0; k < num_ins; ++k) st[k].back() = s[k];
    } else {
      ext.push_back(out[d]);
      for (int k = 0; k < num_ins; ++k) st[k].push_back(s[k]);
    }
  }
  if (ext.empty()) {  // a single element: every operand holds exactly one
    ext.push_back(1);
    for (int k = 0; k < num_ins; ++k) st[k].push_back(1);
  }
  const int r = static_cast<int>(ext.size());
  if (r > kMaxCollapsedRank + 1) throw std::logic_error("elementwise: broadcast rank too high");
  instr.p[0] = r;
  instr.p[1] = num_ins;
  int64_t rows = 1;
  for (int d = 0; d + 1 < r; ++d) rows *= ext[d];
  instr.p[2] = rows;
  instr.v = ext;
  int mask = 0;
  for (int k = 0; k < num_ins; ++k) {
    instr.v.insert(instr.v.end(), st[k].begin(), st[k].end());
    const int64_t inner = st[k].back();
    if (inner != 0 && inner != 1)
      throw std::logic_error("elementwise: operand innermost stride is not 0 or 1");
    if (inner == 1) mask |= 1 << k;
  }
  if (mask == 0) throw std::logic_error("elementwise: no operand spans the output row");
  return mask;
}

}  // namespace ew

bool select_elementwise(Instr& instr) {
  if (op_kernel_family(instr.op) != KernelFamily::kElementwiseFamily) return false;
  if (instr.out.size() == 0) {
    instr.fn = &ew::noop_kernel;
    return true;
  }
  if (ew::select_source(instr) || ew::select_unary(instr) || ew::select_binary(instr) ||
      ew::select_compare(instr))
    return true;
  throw std::logic_error(std::string("select_elementwise: no part handles ") + op_name(instr.op));
}

}  // namespace fjit::kernels
