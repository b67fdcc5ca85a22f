// Return address -> function, file and line, for StackTrace::symbolize() (core/trace/stack_trace.h);
// nothing else should need this header.
//
// Promises: one process-wide elfutils libdwfl session, created on first use and shared by all
// threads under a mutex (libdw objects are not thread-safe); results cached per address; the
// process's modules reported again when an address falls outside all of them (a library
// dlopen'ed since); never a crash on addresses without debug info or in no module.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/stack_trace.h"

namespace fjit::detail {

// The frames at each return address, innermost first. An address yields one frame per function
// inlined there (innermost first, each with the line where it was inlined into the next) and
// then the real function; at least one frame, which keeps at least its pc.
std::vector<StackFrame> symbolize_return_addresses(const std::vector<uintptr_t>& pcs);

}  // namespace fjit::detail
