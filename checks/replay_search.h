// Internal to the replay (checks/replay.h): the op-by-op search for the first bad op, and the
// replay's text.
#pragma once

#include <string>

#include "checks/replay.h"

namespace fjit {

// Evaluates `exe`'s graph node by node with the reference kernels on the bundle's inputs (as
// replica ctx.replica; its collectives go through ctx.comm when set, so every replica of
// ctx.comm must walk at once), the graphs of loops and branches included, and fills r's op
// fields (found, op, type, site, stack, index, problem, operands, after_collective, replica,
// inside, iteration) and bad-input fields, as checks/replay.h describes. With other replicas
// replayed alongside, a collective is never the op found (its bad value came from a peer).
// Returns the position of the op found in the walk (ops walked before it), or -1.
int64_t search_first_bad_op(const Executable& exe, const ReplayBundle& b, const RunContext& ctx, ReplayResult& r);

// The whole replay result as text (ReplayResult::text).
std::string format_replay(const ReplayResult& r);

}  // namespace fjit
