// VJP rules of the control-flow ops (core/trace/control_flow.h). Each gets the cotangents of
// all the op's results (VjpArgs::cts) and builds its backward pass as control flow too:
//   scan        a scan over the rows in reverse whose body replays the forward body on the
//               carry the forward loop kept for that row (the op's stacked-carries result)
//               and runs the body's VJP; its carry is the carry's cotangent plus the summed
//               cotangents of the captured values, its ys the cotangents of the xs rows.
//   cond        a cond on the same predicate whose branches replay a branch and run its VJP.
//   custom_vjp  the user's bwd graph, inlined, on the residuals fwd returned.
//   remat       another remat, whose function replays fn on the op's inputs and runs its VJP:
//               the recomputation lives in its own sub-graph, so hash-consing cannot merge it
//               with the forward pass, and its intermediates live only while it runs.
//   while_loop  none: a TraceError (a loop of run-time trip count keeps no carries to replay).
// Only floating-point leaves carry cotangents.
#include "core/autodiff/autodiff.h"
#include "core/trace/control_flow.h"
#include "core/trace/region_trace.h"
#include "core/trace/remat.h"

namespace fjit::autodiff {
namespace {

Tensor zeros_of(const ValueType& t) { return full(t.dtype, t.shape, 0.0); }

Tensor ct_or_zeros(const VjpArgs& a, size_t k) {
  const std::vector<Tensor>& cts = *a.cts;
  if (k < cts.size() && cts[k].defined()) return cts[k];
  return zeros_of(a.node.attrs.region->outputs[k]);
}

std::vector<size_t> floating(const std::vector<Tensor>& ts, size_t first, size_t count) {
  std::vector<size_t> v;
  for (size_t k = first; k < first + count; ++k)
    if (is_floating(ts[k].dtype())) v.push_back(k);
  return v;
}

}  // namespace

std::vector<Tensor> rule_scan(const VjpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nc = r.num_carry, nx = r.num_xs, ncap = a.ins.size() - nc - nx;
  const size_t ny = r.outputs.size() - 2 * nc;
  const Graph& body = *r.graphs[0];
  std::vector<size_t> fy;  // floating ys, by index among the ys
  for (size_t k = 0; k < ny; ++k)
    if (is_floating(r.outputs[nc + k].dtype)) fy.push_back(k);
  const std::vector<size_t> fc = floating(a.ins, 0, nc), fx = floating(a.ins, nc, nx),
                            fcap = floating(a.ins, nc + nx, ncap);
  std::vector<Tensor> result(a.ins.size());
  if (fx.empty() && fc.empty() && fcap.empty()) return result;
  std::vector<Tensor> init, xs;
  for (size_t j : fc) init.push_back(ct_or_zeros(a, j));
  for (size_t c : fcap) init.push_back(zeros_like(a.ins[c]));
  for (size_t j = 0; j < nc; ++j) xs.push_back(detail::control_output(a.out, static_cast<int>(nc + ny + j)));
  for (size_t k = 0; k < nx; ++k) xs.push_back(a.ins[nc + k]);
  for (size_t k : fy) xs.push_back(ct_or_zeros(a, nc + k));
  const std::vector<Tensor> caps(a.ins.begin() + nc + nx, a.ins.end());
  auto backward = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& row) {
    std::vector<Tensor> params(row.begin(), row.begin() + nc + nx);
    params.insert(params.end(), caps.begin(), caps.end());
    const std::vector<Tensor> outs = detail::inline_graph(body, params, false);
    std::vector<Tensor> ys, seeds, wrt;
    for (size_t i = 0; i < fc.size(); ++i) {
      ys.push_back(outs[fc[i]]);
      seeds.push_back(carry[i]);
    }
    for (size_t i = 0; i < fy.size(); ++i) {
      ys.push_back(outs[nc + fy[i]]);
      seeds.push_back(row[nc + nx + i]);
    }
    for (size_t j : fc) wrt.push_back(params[j]);
    for (size_t k : fx) wrt.push_back(params[k]);
    for (size_t c : fcap) wrt.push_back(params[c]);
    const std::vector<Tensor> g = detail::vjp_many(ys, seeds, wrt, Loc::current());
    detail::ScanStep step;
    for (size_t i = 0; i < fc.size(); ++i) step.carry.push_back(g[i]);
    for (size_t i = 0; i < fcap.size(); ++i)
      step.carry.push_back(add(carry[fc.size() + i], g[fc.size() + fx.size() + i]));
    for (size_t i = 0; i < fx.size(); ++i) step.ys.push_back(g[fc.size() + i]);
    return step;
  };
  const detail::ScanLeaves b =
      detail::scan_leaves(r.loop.c_str(), backward, init, xs, Loc::current(), !r.reverse, &r.site);
  for (size_t i = 0; i < fc.size(); ++i) result[fc[i]] = b.carry[i];
  for (size_t i = 0; i < fcap.size(); ++i) result[fcap[i]] = b.carry[fc.size() + i];
  for (size_t i = 0; i < fx.size(); ++i) result[fx[i]] = b.ys[i];
  return result;
}

std::vector<Tensor> rule_cond(const VjpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t n = a.ins.size() - 1;
  const std::vector<size_t> fops = floating(a.ins, 1, n);
  std::vector<Tensor> result(a.ins.size());
  std::vector<size_t> fout;
  for (size_t k = 0; k < r.outputs.size(); ++k)
    if (is_floating(r.outputs[k].dtype)) fout.push_back(k);
  if (fops.empty() || fout.empty()) return result;
  std::vector<Tensor> operands(a.ins.begin() + 1, a.ins.end());
  for (size_t k : fout) operands.push_back(ct_or_zeros(a, k));
  auto branch = [&](int b) {
    return [&, b](const std::vector<Tensor>& l) {
      const std::vector<Tensor> params(l.begin(), l.begin() + n);
      const std::vector<Tensor> outs = detail::inline_graph(*r.graphs[b], params, false);
      std::vector<Tensor> ys, seeds, wrt;
      for (size_t i = 0; i < fout.size(); ++i) {
        ys.push_back(outs[fout[i]]);
        seeds.push_back(l[n + i]);
      }
      for (size_t k : fops) wrt.push_back(params[k - 1]);
      return detail::vjp_many(ys, seeds, wrt, Loc::current());
    };
  };
  const std::vector<Tensor> g = detail::cond_leaves(a.ins[0], branch(0), branch(1), operands, Loc::current());
  for (size_t i = 0; i < fops.size(); ++i) result[fops[i]] = g[i];
  return result;
}

std::vector<Tensor> rule_custom_vjp(const VjpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nargs = r.num_carry, nout = r.num_xs, nres = r.outputs.size() - nout;
  const Graph& bwd = *r.graphs[1];
  std::vector<Tensor> params;
  for (size_t k = 0; k < nres; ++k) params.push_back(detail::control_output(a.out, static_cast<int>(nout + k)));
  for (size_t k = 0; k < nout; ++k) params.push_back(ct_or_zeros(a, k));
  const size_t nbcap = bwd.parameters.size() - nres - nout;
  params.insert(params.end(), a.ins.end() - static_cast<std::ptrdiff_t>(nbcap), a.ins.end());
  const std::vector<Tensor> g = detail::inline_graph(bwd, params, true);
  std::vector<Tensor> result(a.ins.size());
  for (size_t k = 0; k < nargs; ++k)
    if (is_floating(a.ins[k].dtype())) result[k] = g[k];
  return result;
}

std::vector<Tensor> rule_remat(const VjpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nin = a.ins.size();
  std::vector<size_t> wrt, fout;
  for (size_t k = 0; k < nin; ++k)
    if (a.need[k] && is_floating(a.ins[k].dtype())) wrt.push_back(k);
  for (size_t k = 0; k < r.outputs.size(); ++k)
    if (is_floating(r.outputs[k].dtype) && k < a.cts->size() && (*a.cts)[k].defined()) fout.push_back(k);
  std::vector<Tensor> result(nin);
  if (wrt.empty() || fout.empty()) return result;
  std::vector<Tensor> operands = a.ins;
  for (size_t k : fout) operands.push_back((*a.cts)[k]);
  auto backward = [&](const std::vector<Tensor>& l) {
    const std::vector<Tensor> params(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(nin));
    const std::vector<Tensor> outs = detail::inline_graph(*r.graphs[0], params, false);
    std::vector<Tensor> ys, seeds, xs;
    for (size_t i = 0; i < fout.size(); ++i) {
      ys.push_back(outs[fout[i]]);
      seeds.push_back(l[nin + i]);
    }
    for (size_t k : wrt) xs.push_back(params[k]);
    return detail::vjp_many(ys, seeds, xs, Loc::current());
  };
  const std::vector<Tensor> g = detail::remat_leaves(backward, operands, Loc::current(), &r.site);
  for (size_t i = 0; i < wrt.size(); ++i) result[wrt[i]] = g[i];
  return result;
}

std::vector<Tensor> rule_while_loop(const VjpArgs& a) {
  throw TraceError("fjit: while_loop: cannot be differentiated in reverse mode (its trip count is "
                   "decided at run time, so no carries are kept to replay); use scan or fori_loop "
                   "for a loop of known length, or apply stop_gradient to its inputs (at " +
                   a.node.attrs.region->site.str() + ")");
}

}  // namespace fjit::autodiff
