#include "core/kernels/collective/communicator.h"

#include <cstring>

namespace fjit {

void Communicator::all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype,
                                    void* ctx, ReducedBlockFn apply) {
  if (count <= 0) return;
  if (scratch != src) std::memcpy(scratch, src, count * dtype_size(dtype));
  all_reduce(scratch, count, dtype, ReduceOp::sum);
  apply(ctx, 0, count, scratch);
}

}  // namespace fjit
