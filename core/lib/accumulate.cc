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
  if (rows < micro_batches) fail(fmt::format("{} rows cannot make {} micro-batches", rows, micro_batches));
  return rows;
}

Tensor micro_slice(const Tensor& x, int64_t begin, int64_t end, Loc loc) {
  if (begin == 0 && end == x.shape()[0]) return x;
  const Shape shape = x.shape();  // by value: one copy for both iterators
  Axes starts(shape.size(), 0), limits(shape.begin(), shape.end());
  starts[0] = begin;
  limits[0] = end;
  return slice(x, starts, limits, Axes(x.rank(), 1), loc);
}

TensorDict accumulate_scaled(const TensorDict& acc, const TensorDict& g, double w, Loc loc) {
  TensorDict out;
  for (const auto& [name, t] : g) {
    const Tensor scaled = w == 1.0 ? t : mul(t, scalar(t.dtype(), w, loc), loc);
    out.set(name, acc.contains(name) ? add(acc.at(name), scaled, loc) : scaled);
  }
  return out;
}

}  // namespace fjit::detail
