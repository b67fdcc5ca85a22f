// JVP rules of the control-flow ops (core/trace/control_flow.h). Each returns the tangent of
// every result of the op (undefined where none flows) and builds its forward pass as control
// flow again, replaying the op's sub-graph beside its tangent:
//   scan        a scan whose carry is [carry..., carry tangents...] and whose rows are [rows...,
//               row tangents...]; its ys are the ys' tangents and the tangents of the carries
//               entering each iteration where the original's stacked carries are read (a
//               scan's VJP reads them: their tangents make forward over reverse through a
//               scan work).
//   cond        a cond on the same predicate whose branches replay a branch and its JVP.
//   while_loop  a while_loop on [carry..., carry tangents...] whose cond_fn reads the carry.
//   remat       a remat whose function replays fn and its JVP.
//   custom_vjp  none: a TraceError, as in JAX (its rule is a VJP only).
// The replays drop checks (the forward op checks the same values).
#include "core/autodiff/jvp.h"
#include "core/trace/region_trace.h"
#include "core/trace/remat.h"

namespace fjit::autodiff {
using Tans = std::vector<Tensor>;

namespace {

bool carries(DType t) { return is_floating(t); }

Tensor zeros_of(DType t, const Shape& s) { return full(tangent_dtype(t), s, 0.0); }

}  // namespace

Tans jvp_scan(const JvpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nc = r.num_carry, nx = r.num_xs, ncap = a.ins.size() - nc - nx;
  const size_t ny = r.outputs.size() - 2 * nc;
  const Graph& body = *r.graphs[0];
  std::vector<size_t> fc, tx, tcap, fy;  // floating carries; rows and captures with tangents
  for (size_t j = 0; j < nc; ++j)
    if (carries(a.ins[j].dtype())) fc.push_back(j);
  for (size_t k = 0; k < nx; ++k)
    if (a.tans[nc + k].defined()) tx.push_back(k);
  for (size_t c = 0; c < ncap; ++c)
    if (a.tans[nc + nx + c].defined()) tcap.push_back(c);
  for (size_t k = 0; k < ny; ++k)
    if (carries(r.outputs[nc + k].dtype)) fy.push_back(k);
  // The stacked carries' tangents only where the stacked carries are read (by a VJP).
  std::vector<size_t> fs;
  for (size_t i = 0; i < fc.size(); ++i)
    if (!a.need || (*a.need)[nc + ny + fc[i]]) fs.push_back(i);
  std::vector<Tensor> init(a.ins.begin(), a.ins.begin() + nc), xs(a.ins.begin() + nc, a.ins.begin() + nc + nx);
  for (size_t j : fc) init.push_back(a.tans[j].defined() ? a.tans[j] : zeros_of(a.ins[j].dtype(), a.ins[j].shape()));
  for (size_t k : tx) xs.push_back(a.tans[nc + k]);
  const std::vector<Tensor> caps(a.ins.begin() + nc + nx, a.ins.end());
  std::vector<Tensor> tcaps;
  for (size_t c : tcap) tcaps.push_back(a.tans[nc + nx + c]);
  auto step = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& row) {
    std::vector<Tensor> params(carry.begin(), carry.begin() + nc);
    params.insert(params.end(), row.begin(), row.begin() + nx);
    params.insert(params.end(), caps.begin(), caps.end());
    const std::vector<Tensor> outs = detail::inline_graph(body, params, false);
    std::vector<Tensor> leaves, tangents, ys;
    for (size_t i = 0; i < fc.size(); ++i) {
      leaves.push_back(params[fc[i]]);
      tangents.push_back(carry[nc + i]);
    }
    for (size_t i = 0; i < tx.size(); ++i) {
      leaves.push_back(params[nc + tx[i]]);
      tangents.push_back(row[nx + i]);
    }
    for (size_t i = 0; i < tcap.size(); ++i) {
      leaves.push_back(params[nc + nx + tcap[i]]);
      tangents.push_back(tcaps[i]);
    }
    for (size_t j : fc) ys.push_back(outs[j]);
    for (size_t k : fy) ys.push_back(outs[nc + k]);
    const std::vector<Tensor> t = detail::jvp_leaves(ys, leaves, tangents, "jvp", Loc::current());
    detail::ScanStep s;
    s.carry.assign(outs.begin(), outs.begin() + nc);
    for (size_t i = 0; i < fc.size(); ++i) s.carry.push_back(t[i]);
    for (size_t i = 0; i < fy.size(); ++i) s.ys.push_back(t[fc.size() + i]);
    for (size_t i : fs) s.ys.push_back(carry[nc + i]);
    return s;
  };
  const detail::ScanLeaves b =
      detail::scan_leaves(r.loop.c_str(), step, init, xs, Loc::current(), r.reverse, &r.site);
  Tans result(r.outputs.size());
  for (size_t i = 0; i < fc.size(); ++i) result[fc[i]] = b.carry[nc + i];
  for (size_t i = 0; i < fy.size(); ++i) result[nc + fy[i]] = b.ys[i];
  for (size_t i = 0; i < fs.size(); ++i) result[nc + ny + fc[fs[i]]] = b.ys[fy.size() + i];
  return result;
}

Tans jvp_cond(const JvpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t n = a.ins.size() - 1;
  std::vector<size_t> tops, fout;
  for (size_t k = 1; k <= n; ++k)
    if (a.tans[k].defined()) tops.push_back(k - 1);
  for (size_t k = 0; k < r.outputs.size(); ++k)
    if (carries(r.outputs[k].dtype)) fout.push_back(k);
  Tans result(r.outputs.size());
  if (tops.empty() || fout.empty()) return result;
  std::vector<Tensor> operands(a.ins.begin() + 1, a.ins.end());
  for (size_t k : tops) operands.push_back(a.tans[k + 1]);
  auto branch = [&](int b) {
    return [&, b](const std::vector<Tensor>& l) {
      const std::vector<Tensor> params(l.begin(), l.begin() + n);
      const std::vector<Tensor> outs = detail::inline_graph(*r.graphs[b], params, false);
      std::vector<Tensor> ys, leaves, tangents;
      for (size_t k : fout) ys.push_back(outs[k]);
      for (size_t i = 0; i < tops.size(); ++i) {
        leaves.push_back(params[tops[i]]);
        tangents.push_back(l[n + i]);
      }
      return detail::jvp_leaves(ys, leaves, tangents, "jvp", Loc::current());
    };
  };
  const std::vector<Tensor> t = detail::cond_leaves(a.ins[0], branch(0), branch(1), operands, Loc::current());
  for (size_t i = 0; i < fout.size(); ++i) result[fout[i]] = t[i];
  return result;
}

Tans jvp_while_loop(const JvpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nc = r.num_carry;
  const std::vector<Tensor> caps(a.ins.begin() + nc, a.ins.end());
  std::vector<size_t> fc, tcap;
  for (size_t j = 0; j < nc; ++j)
    if (carries(a.ins[j].dtype())) fc.push_back(j);
  for (size_t c = 0; c < caps.size(); ++c)
    if (a.tans[nc + c].defined()) tcap.push_back(c);
  std::vector<Tensor> init(a.ins.begin(), a.ins.begin() + nc), tcaps;
  for (size_t j : fc) init.push_back(a.tans[j].defined() ? a.tans[j] : zeros_of(a.ins[j].dtype(), a.ins[j].shape()));
  for (size_t c : tcap) tcaps.push_back(a.tans[nc + c]);
  auto params_of = [&](const std::vector<Tensor>& l) {
    std::vector<Tensor> p(l.begin(), l.begin() + nc);
    p.insert(p.end(), caps.begin(), caps.end());
    return p;
  };
  auto cond_fn = [&](const std::vector<Tensor>& l) {
    return detail::inline_graph(*r.graphs[0], params_of(l), false);
  };
  auto body_fn = [&](const std::vector<Tensor>& l) {
    const std::vector<Tensor> params = params_of(l);
    const std::vector<Tensor> outs = detail::inline_graph(*r.graphs[1], params, false);
    std::vector<Tensor> ys, leaves, tangents;
    for (size_t i = 0; i < fc.size(); ++i) {
      ys.push_back(outs[fc[i]]);
      leaves.push_back(params[fc[i]]);
      tangents.push_back(l[nc + i]);
    }
    for (size_t i = 0; i < tcap.size(); ++i) {
      leaves.push_back(params[nc + tcap[i]]);
      tangents.push_back(tcaps[i]);
    }
    std::vector<Tensor> next(outs.begin(), outs.begin() + nc);
    const std::vector<Tensor> t = detail::jvp_leaves(ys, leaves, tangents, "jvp", Loc::current());
    next.insert(next.end(), t.begin(), t.end());
    return next;
  };
  const std::vector<Tensor> out = detail::while_loop_leaves(cond_fn, body_fn, init, Loc::current(), r.max_trips);
  Tans result(r.outputs.size());
  for (size_t i = 0; i < fc.size(); ++i) result[fc[i]] = out[nc + i];
  return result;
}

Tans jvp_remat(const JvpArgs& a) {
  const Region& r = *a.node.attrs.region;
  const size_t nin = a.ins.size();
  std::vector<size_t> tin, fout;
  for (size_t k = 0; k < nin; ++k)
    if (a.tans[k].defined()) tin.push_back(k);
  for (size_t k = 0; k < r.outputs.size(); ++k)
    if (carries(r.outputs[k].dtype)) fout.push_back(k);
  Tans result(r.outputs.size());
  if (fout.empty()) return result;
  std::vector<Tensor> operands = a.ins;
  for (size_t k : tin) operands.push_back(a.tans[k]);
  auto forward = [&](const std::vector<Tensor>& l) {
    const std::vector<Tensor> params(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(nin));
    const std::vector<Tensor> outs = detail::inline_graph(*r.graphs[0], params, false);
    std::vector<Tensor> ys, leaves, tangents;
    for (size_t k : fout) ys.push_back(outs[k]);
    for (size_t i = 0; i < tin.size(); ++i) {
      leaves.push_back(params[tin[i]]);
      tangents.push_back(l[nin + i]);
    }
    return detail::jvp_leaves(ys, leaves, tangents, "jvp", Loc::current());
  };
  const std::vector<Tensor> t = detail::remat_leaves(forward, operands, Loc::current(), &r.site);
  for (size_t i = 0; i < fout.size(); ++i) result[fout[i]] = t[i];
  return result;
}

Tans jvp_custom_vjp(const JvpArgs& a) {
  throw TraceError("fjit: custom_vjp: cannot be differentiated in forward mode (jvp, linearize, "
                   "jacfwd, hessian, hvp): its rule is a VJP only, as in JAX's custom_vjp; use "
                   "reverse mode (grad, jacrev) through it, or a plain function (at " +
                   a.node.attrs.region->site.str() + ")");
}

}  // namespace fjit::autodiff
