#include "core/lib/accumulate.h"

#include <fmt/format.h>

#include "core/trace/ops.h"

namespace fjit::detail {

int64_t accumulation_rows(const std::vector<Tensor>& batch, int micro_batches, Loc loc) {
  auto fail = [&](const std::string& what) {
    std::string types;
    for (const Tensor& t : batch) types += (types.empty() ? "" : ", ") + type_str(t.dtype(), t.shape());
    throw TraceError(fmt::format("fjit: accumulate_gradients({} micro-batches) of ({}): {} (at {}:{})",
                                 micro_batches, types, what, loc.file_name(), loc.line()));
  };
  if (micro_batches < 1) fail("needs at least one micro-batch");
  if (batch.empty()) fail("needs at least one batch argument to split");
  for (const Tensor& t : batch)
    if (t.rank() < 1) fail("every batch argument needs a leading axis of rows");
  const int64_t rows = batch[0].shape()[0];
  for (const Tensor& t : batch)
    if (t.shape()[0] != rows) fail("the batch arguments disagree on their number of rows");
  // Zero rows (a replica that joined with no data) are one micro-batch: the empty batch.
  if (rows > 0 && rows < micro_batches)
    fail(fmt::format("{} rows cannot make {} micro-batches", rows, micro_batches));
  return rows;
}

std::vector<MicroGroup> micro_groups(int64_t rows, int micro_batches) {
  std::vector<MicroGroup> groups;
  for (int k = 0; k < micro_batches; ++k) {
    const auto [b, e] = split_rows(rows, micro_batches, k);
    if (!groups.empty() && groups.back().size == e - b) ++groups.back().count;
    else groups.push_back({b, e - b, 1});
  }
  return groups;
}

Tensor group_rows(const Tensor& x, const MicroGroup& g, Loc loc) {
  const Shape shape = x.shape();  // by value: one copy for both iterators
  Tensor rows = x;
  if (g.begin != 0 || g.size * g.count != shape[0]) {
    Axes starts(shape.size(), 0), limits(shape.begin(), shape.end());
    starts[0] = g.begin;
    limits[0] = g.begin + g.size * g.count;
    rows = slice(x, starts, limits, Axes(x.rank(), 1), loc);
  }
  Shape split = shape;
  split[0] = g.size;
  split.insert(split.begin(), g.count);
  return reshape(rows, split, loc);
}

std::vector<Tensor> zero_accumulators(const TensorDict& params, Loc loc) {
  DType loss = DType::f32;
  for (const auto& kv : params)
    if (is_floating(kv.second.dtype())) {
      loss = kv.second.dtype();
      break;
    }
  std::vector<Tensor> acc{scalar(loss, 0.0, loc)};
  for (const auto& kv : params) acc.push_back(zeros_like(kv.second, loc));
  return acc;
}

std::vector<Tensor> accumulate_scaled(const std::vector<Tensor>& acc, const std::vector<Tensor>& v, double w,
                                      Loc loc) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(add(acc[i], mul(v[i], scalar(v[i].dtype(), w, loc), loc), loc));
  return out;
}

}  // namespace fjit::detail
