// The message of a raised step-deadline check (Executable::deadline_site): the step ran past
// its deadline (JitOptions::step_timeout_s, FJIT_STEP_TIMEOUT) and stopped in the middle of
// its plan. A while_loop that the deadline stopped raises its own site as well (its call site,
// iteration and carry state); this one names where the rest of the step was cut short.
#pragma once

#include <span>
#include <string>

#include "core/compile/executable.h"

namespace fjit {

// From the site's payload (time limit in seconds, top-level instruction, instruction in the
// nested plan or -1, nesting depth): the message, and in *where the site of the top-level
// instruction's op.
std::string deadline_message(const Executable& exe, std::span<const double> values, const Site** where);

}  // namespace fjit
