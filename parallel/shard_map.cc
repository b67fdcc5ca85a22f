#include "parallel/shard_map.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace fjit {

const PartSpec& ShardSpec::leaf(const std::string& entry) const {
  static const PartSpec kReplicated;
  if (entry.empty()) return dims;
  auto it = entries.find(entry);
  return it == entries.end() ? kReplicated : it->second;
}

namespace shard_map_detail {
namespace {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// Per dimension: the split count (1: none) and this replica's block index.
struct Split {
  std::vector<int64_t> parts, index;
};
Split split_of(const Mesh& mesh, const PartSpec& spec, size_t rank, int replica) {
  Split s{std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
  const std::vector<int> coords = mesh_coords(mesh.axes(), replica);
  for (size_t d = 0; d < spec.size() && d < rank; ++d) {
    if (spec[d].empty()) continue;
    const int a = mesh_axis_position(mesh.axes(), spec[d]);
    s.parts[d] = mesh.axes()[a].size;
    s.index[d] = coords[a];
  }
  return s;
}

// Copies the block at `begin` of shape `bshape` between a whole array (shape `whole`) and a
// block buffer: to the block when `gather`, else from it.
void copy_block(char* whole, char* blk, const Shape& shape, const Shape& bshape, const std::vector<int64_t>& begin,
                size_t esize, bool gather) {
  const size_t rank = shape.size();
  if (rank == 0) {
    if (gather) std::memcpy(blk, whole, esize);
    else std::memcpy(whole, blk, esize);
    return;
  }
  int64_t total = 1;
  for (int64_t v : bshape) total *= v;
  if (total == 0) return;
  const size_t run = static_cast<size_t>(bshape[rank - 1]) * esize;
  const int64_t rows = total / bshape[rank - 1];
  std::vector<int64_t> idx(rank, 0);  // over the block's leading rank-1 dims
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) off = off * shape[d] + begin[d] + (d + 1 < rank ? idx[d] : 0);
    char* w = whole + off * static_cast<int64_t>(esize);
    char* b = blk + r * static_cast<int64_t>(run);
    if (gather) std::memcpy(b, w, run);
    else std::memcpy(w, b, run);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < bshape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void check(const Mesh& mesh, const PartSpec& spec, const Shape& shape, const std::string& what, const Loc& loc) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("shard_map (called at {}:{}): {} of shape {}: {}", loc.file_name(),
                                            loc.line(), what, shape_str(shape), why));
  };
  if (spec.size() > shape.size())
    fail(fmt::format("the spec names {} dimensions, the array has {}", spec.size(), shape.size()));
  for (size_t d = 0; d < spec.size(); ++d) {
    if (spec[d].empty()) continue;
    const int a = mesh_axis_position(mesh.axes(), spec[d]);
    if (a < 0) {
      std::string have;
      for (const MeshAxis& x : mesh.axes()) have += (have.empty() ? "" : ", ") + x.name;
      fail(fmt::format("dimension {} names axis '{}', which the mesh lacks (its axes: {})", d, spec[d], have));
    }
    for (size_t e = 0; e < d; ++e)
      if (spec[e] == spec[d]) fail(fmt::format("axis '{}' splits dimensions {} and {}", spec[d], e, d));
    const int n = mesh.axes()[a].size;
    if (shape[d] % n != 0)
      fail(fmt::format("dimension {} (size {}) is not divisible by mesh axis '{}' (size {})", d, shape[d], spec[d], n));
  }
}

Array block(const Mesh& mesh, const PartSpec& spec, const Array& global, int replica) {
  bool split = false;
  for (const std::string& s : spec) split = split || !s.empty();
  if (!split) return global;  // replicated: shared, not copied
  const Shape& shape = global.shape();
  const Split s = split_of(mesh, spec, shape.size(), replica);
  Shape bshape = shape;
  std::vector<int64_t> begin(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    bshape[d] = shape[d] / s.parts[d];
    begin[d] = s.index[d] * bshape[d];
  }
  Array out(global.dtype(), bshape);
  copy_block(static_cast<char*>(const_cast<void*>(global.raw())), static_cast<char*>(out.raw()), shape, bshape, begin,
             dtype_size(global.dtype()), true);
  return out;
}

Array assemble(const Mesh& mesh, const PartSpec& spec, const std::vector<const Array*>& locals,
               const std::string& what, const Loc& loc) {
  const Array& first = *locals[0];
  const Shape bshape = first.shape();
  Shape shape = bshape;
  for (size_t d = 0; d < spec.size(); ++d) {
    if (spec[d].empty()) continue;
    const int a = mesh_axis_position(mesh.axes(), spec[d]);
    if (a < 0 || d >= shape.size()) check(mesh, spec, bshape, what, loc);  // throws, naming it
    shape[d] *= mesh.axes()[a].size;
  }
  check(mesh, spec, shape, what, loc);
  // Every replica's block, in job order.
  std::vector<Array> gathered;
  std::vector<const Array*> all = locals;
  if (Communicator* pc = mesh.process_comm(); pc != nullptr && pc->size() > 1) {
    const size_t bytes = first.nbytes() * locals.size();
    std::vector<char> mine(bytes), recv(bytes * static_cast<size_t>(pc->size()));
    for (size_t r = 0; r < locals.size(); ++r)
      if (first.nbytes() > 0) std::memcpy(mine.data() + r * first.nbytes(), locals[r]->raw(), first.nbytes());
    pc->all_gather(mine.data(), recv.data(), bytes);
    all.clear();
    for (int j = 0; j < mesh.size(); ++j) {
      gathered.emplace_back(first.dtype(), bshape);
      if (first.nbytes() > 0) std::memcpy(gathered.back().raw(), recv.data() + j * first.nbytes(), first.nbytes());
    }
    for (const Array& g : gathered) all.push_back(&g);
  }
  Array out(first.dtype(), shape);
  std::vector<bool> named(mesh.axes().size(), false);
  for (const std::string& s : spec)
    if (!s.empty()) named[mesh_axis_position(mesh.axes(), s)] = true;
  for (int j = 0; j < static_cast<int>(all.size()); ++j) {
    // The replica at coordinate 0 on every axis the spec leaves out holds the block.
    const std::vector<int> c = mesh_coords(mesh.axes(), j);
    bool holder = true;
    for (size_t a = 0; a < c.size(); ++a) holder = holder && (named[a] || c[a] == 0);
    if (!holder) continue;
    const Split s = split_of(mesh, spec, shape.size(), j);
    std::vector<int64_t> begin(shape.size(), 0);
    for (size_t d = 0; d < shape.size(); ++d) begin[d] = s.index[d] * bshape[d];
    copy_block(static_cast<char*>(out.raw()), static_cast<char*>(const_cast<void*>(all[j]->raw())), shape, bshape,
               begin, dtype_size(first.dtype()), false);
  }
  return out;
}

}  // namespace shard_map_detail
}  // namespace fjit
