// Embedding (see core/nn/embedding.h).
#include "core/nn/embedding.h"

#include <cmath>
#include <stdexcept>

#include "core/lib/initializers.h"

namespace fjit {

Tensor embedding(const Params& p, const std::string& name, const Tensor& ids, Loc loc) {
  const Tensor& table = p[name + "/table"];
  detail::CompositeScope scope("embedding", {table, ids});
  if (!ids.defined() || ids.dtype() != DType::i32)
    detail::fail("embedding", {table, ids}, "expects i32 token ids", &loc);
  if (!table.defined() || table.rank() != 2)
    detail::fail("embedding", {table, ids}, "expects a table [vocab, dim]", &loc);
  Tensor rows = gather(table, ids, 0, loc);
  // A half-precision table: the rows gathered, then cast to f32 (the compute dtype).
  const DType t = table.dtype();
  return t == DType::bf16 || t == DType::f16 ? cast(rows, DType::f32, loc) : rows;
}

void embedding_params(ArrayDict& d, const std::string& name, int64_t vocab, int64_t dim,
                      uint64_t seed, DType dtype) {
  if (vocab < 1 || dim < 1)
    throw std::invalid_argument("embedding_params: '" + name + "' needs positive sizes");
  d.set(name + "/table",
        normal_array({vocab, dim}, seed, 1.0 / std::sqrt(static_cast<double>(dim)), dtype));
}

}  // namespace fjit
