// Reference kernels for layout, indexing and collective ops: for every output element,
// unravel its index, compute the input index it reads, copy one element.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"
#include "core/kernels/collective/communicator.h"

namespace fjit::kernels::st {
namespace {
using ref::get;
using ref::ravel;
using ref::set;
using ref::unravel;

void transpose(const Attrs& at, const Array& x, Array& result) {
  const std::vector<int64_t>& perm = at.axes;
  for (int64_t i = 0; i < result.size(); ++i) {
    const std::vector<int64_t> oi = unravel(i, result.shape());
    std::vector<int64_t> xi(oi.size());
    for (size_t k = 0; k < perm.size(); ++k) xi[perm[k]] = oi[k];
    set(result, i, get(x, ravel(xi, x.shape())));
  }
}

void broadcast(const Array& x, Array& result) {
  const size_t lead = result.shape().size() - x.shape().size();
  for (int64_t i = 0; i < result.size(); ++i) {
    const std::vector<int64_t> oi = unravel(i, result.shape());
    std::vector<int64_t> xi;
    for (size_t d = 0; d < x.shape().size(); ++d) xi.push_back(x.shape()[d] == 1 ? 0 : oi[lead + d]);
    set(result, i, get(x, ravel(xi, x.shape())));
  }
}

void concat(const Attrs& at, std::span<const Array> ins, Array& result) {
  const size_t axis = static_cast<size_t>(at.axis);
  for (int64_t i = 0; i < result.size(); ++i) {
    std::vector<int64_t> idx = unravel(i, result.shape());
    size_t which = 0;
    while (idx[axis] >= ins[which].shape()[axis]) idx[axis] -= ins[which++].shape()[axis];
    set(result, i, get(ins[which], ravel(idx, ins[which].shape())));
  }
}

void slice(const Attrs& at, const Array& x, Array& result) {
  for (int64_t i = 0; i < result.size(); ++i) {
    std::vector<int64_t> idx = unravel(i, result.shape());
    for (size_t d = 0; d < idx.size(); ++d) idx[d] = at.starts[d] + idx[d] * at.steps[d];
    set(result, i, get(x, ravel(idx, x.shape())));
  }
}

void gather(const Attrs& at, const Array& x, const Array& indices, Array& result) {
  const size_t axis = static_cast<size_t>(at.axis), ir = indices.shape().size();
  const int64_t n = x.shape()[axis];
  for (int64_t i = 0; i < result.size(); ++i) {
    const std::vector<int64_t> oi = unravel(i, result.shape());
    if (n == 0) continue;  // nothing to read: stays zero
    std::vector<int64_t> ji(oi.begin() + axis, oi.begin() + axis + ir);
    int64_t k = static_cast<int64_t>(get(indices, ravel(ji, indices.shape())));
    if (k < 0) k = 0;
    if (k > n - 1) k = n - 1;
    std::vector<int64_t> xi(oi.begin(), oi.begin() + axis);
    xi.push_back(k);
    xi.insert(xi.end(), oi.begin() + axis + ir, oi.end());
    set(result, i, get(x, ravel(xi, x.shape())));
  }
}

void scatter_add(const Attrs& at, const Array& updates, const Array& indices, Array& result) {
  const size_t axis = static_cast<size_t>(at.axis), ir = indices.shape().size();
  const int64_t n = result.shape()[axis];
  std::vector<double> acc(result.size(), 0.0);
  for (int64_t i = 0; i < updates.size(); ++i) {
    const std::vector<int64_t> ui = unravel(i, updates.shape());
    std::vector<int64_t> ji(ui.begin() + axis, ui.begin() + axis + ir);
    const int64_t k = static_cast<int64_t>(get(indices, ravel(ji, indices.shape())));
    if (k < 0 || k >= n) continue;
    std::vector<int64_t> oi(ui.begin(), ui.begin() + axis);
    oi.push_back(k);
    oi.insert(oi.end(), ui.begin() + axis + ir, ui.end());
    const int64_t o = ravel(oi, result.shape());
    if (result.dtype() == DType::boolean) acc[o] = (acc[o] != 0 || get(updates, i) != 0) ? 1 : 0;
    else acc[o] += get(updates, i);
  }
  for (int64_t o = 0; o < result.size(); ++o) set(result, o, acc[o]);
}

void copy_elements(const Array& x, Array& result) {
  for (int64_t i = 0; i < result.size(); ++i) set(result, i, get(x, i));
}

}  // namespace

bool reference_layout_index(Op op, const Attrs& attrs, const ValueType& out,
                            std::span<const Array> ins, const RunContext* ctx, Array& result) {
  Communicator* comm = ctx && ctx->comm ? ctx->comm->for_axis(attrs.name) : nullptr;
  switch (op) {
    case Op::Reshape: copy_elements(ins[0], result); return true;
    case Op::Transpose: transpose(attrs, ins[0], result); return true;
    case Op::BroadcastTo: broadcast(ins[0], result); return true;
    case Op::Concat: concat(attrs, ins, result); return true;
    case Op::Slice: slice(attrs, ins[0], result); return true;
    case Op::Gather: gather(attrs, ins[0], ins[1], result); return true;
    case Op::ScatterAdd: scatter_add(attrs, ins[0], ins[1], result); return true;
    case Op::AllReduce:
      copy_elements(ins[0], result);
      if (comm) comm->all_reduce(result.raw(), result.size(), out.dtype, static_cast<ReduceOp>(attrs.reduce));
      return true;
    case Op::AllGather:
      assert(attrs.axis == 0);
      if (!attrs.axes.empty()) {  // uneven shards: each padded to the largest, then packed
        const int64_t width = result.shape()[0] > 0 ? static_cast<int64_t>(result.nbytes()) / result.shape()[0] : 0;
        const int n = comm ? comm->size() : 1;
        int64_t most = 0;
        for (int64_t r : attrs.axes) most = std::max(most, r);
        std::vector<unsigned char> mine(static_cast<size_t>(most * width), 0), all(mine.size() * n);
        if (ins[0].nbytes() > 0) std::memcpy(mine.data(), ins[0].raw(), ins[0].nbytes());
        if (comm) comm->all_gather(mine.data(), all.data(), mine.size());
        else all = mine;
        auto* out = static_cast<unsigned char*>(result.raw());
        for (int r = 0; r < n; ++r) {
          const size_t b = static_cast<size_t>(attrs.axes[r] * width);
          if (b > 0) std::memcpy(out, all.data() + r * mine.size(), b);
          out += b;
        }
        return true;
      }
      if (comm) {
        comm->all_gather(ins[0].raw(), result.raw(), ins[0].nbytes());
      } else if (ins[0].size() > 0) {
        for (int64_t i = 0; i < result.size(); ++i) set(result, i, get(ins[0], i % ins[0].size()));
      }
      return true;
    case Op::AxisIndex:  // on a mesh with named axes, the coordinate on the axis
      set(result, 0, comm && comm != ctx->comm ? comm->rank() : ctx ? ctx->replica : 0);
      return true;
    case Op::ReduceScatter: {  // the all-reduce of a copy, then this replica's block
      Array all(ins[0].dtype(), ins[0].shape());
      copy_elements(ins[0], all);
      const int me = comm ? comm->rank() : 0;
      if (comm) comm->all_reduce(all.raw(), all.size(), ins[0].dtype(), static_cast<ReduceOp>(attrs.reduce));
      if (result.nbytes() > 0)
        std::memcpy(result.raw(), static_cast<const unsigned char*>(all.raw()) + me * result.nbytes(), result.nbytes());
      return true;
    }
    case Op::AllToAll: case Op::Permute: {  // every replica's whole operand, then the blocks it needs
      const int n = comm ? comm->size() : 1, me = comm ? comm->rank() : 0;
      const size_t bytes = ins[0].nbytes();
      std::vector<unsigned char> all(bytes * n);
      if (comm) comm->all_gather(ins[0].raw(), all.data(), bytes);
      else if (bytes > 0) std::memcpy(all.data(), ins[0].raw(), bytes);
      auto* out = static_cast<unsigned char*>(result.raw());
      if (bytes == 0) return true;
      if (op == Op::AllToAll) {
        const size_t block = bytes / n;
        for (int r = 0; r < n; ++r) std::memcpy(out + r * block, all.data() + r * bytes + me * block, block);
      } else {
        std::memset(out, 0, bytes);
        for (int r = 0; r < n; ++r)
          if (r < static_cast<int>(attrs.axes.size()) && attrs.axes[r] == me) std::memcpy(out, all.data() + r * bytes, bytes);
      }
      return true;
    }
    default: return false;
  }
}

}  // namespace fjit::kernels::st
