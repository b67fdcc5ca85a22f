// Internal to the replay (checks/replay.h): the op-by-op search for the first bad op, and the
// replay's text.
#pragma once

#include <string>

#include "checks/replay.h"

namespace fjit {

// Evaluates `exe`'s graph node by node with the reference kernels on the bundle's inputs (as
// replica b.replica alone) and fills r's op fields (found, op, type, site, stack, index,
// problem, operands, after_collective) and bad-input fields, as checks/replay.h describes.
void search_first_bad_op(const Executable& exe, const ReplayBundle& b, ReplayResult& r);

// The whole replay result as text (ReplayResult::text).
std::string format_replay(const ReplayResult& r);

}  // namespace fjit
