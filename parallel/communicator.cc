#include "parallel/communicator.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace fjit {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::logical_or: return "logical_or";
  }
  return "?";
}

namespace {

// A malformed variable keeps the default: a typo in a limit must not end a long job early.
void read_seconds(const char* name, std::chrono::milliseconds* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0) {
    log().warn("{}='{}' is not a number of seconds; keeping {} ms", name, text, out->count());
    return;
  }
  *out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace

void Communicator::all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype,
                                    void* ctx, ReducedBlockFn apply) {
  if (count <= 0) return;
  if (scratch != src) std::memcpy(scratch, src, count * dtype_size(dtype));
  all_reduce(scratch, count, dtype, ReduceOp::sum);
  apply(ctx, 0, count, scratch);
}

StallPolicy StallPolicy::from_environment() {
  StallPolicy policy;
  read_seconds("FJIT_STALL_WARN_S", &policy.warn_after);
  read_seconds("FJIT_STALL_ABORT_S", &policy.abort_after);
  return policy;
}

}  // namespace fjit
