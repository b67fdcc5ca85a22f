// The one arithmetic kernel behind every all-reduce, shared by the thread and MPI backends.
//
// Promise: element i of the result is ((in[0][i] op in[1][i]) op in[2][i]) op ... in rank
// order, computed in the element type, so both backends and every replica agree bit for bit.
// Semantics per op and dtype:
//  - sum: floats add in IEEE order; i32 wraps modulo 2^32; booleans (bytes) act as logical_or;
//    f16 (the one storage dtype that is combined: sum only) rounds each partial sum to f16.
//  - max/min: floats propagate NaN (any NaN contribution gives NaN); bytes compare unsigned.
//  - logical_or: the result is 1 where any contribution is non-zero, else 0, in any dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ir/dtype.h"
#include "core/kernels/collective/communicator.h"

namespace fjit {

// Reduces elements [begin, begin + count) of the n_inputs arrays and stores the result at the
// same positions of every output array. Inputs may alias outputs: each tile of elements is
// read completely before any output is written.
// REQUIRES: n_inputs >= 1; every array holds at least begin + count elements of `dtype`.
void combine_in_rank_order(const void* const* inputs, int n_inputs, void* const* outputs,
                           int n_outputs, int64_t begin, int64_t count, DType dtype, ReduceOp op);

// True when reducing a single contribution is not the identity (logical_or, and sum on
// booleans, normalise to 0/1), so a one-replica group must still run the kernel.
bool single_contribution_changes(DType dtype, ReduceOp op);

// Splits [0, count) into `parts` chunks whose boundaries fall on 64-byte multiples (so
// replicas writing neighbouring chunks never share a cache line) and returns chunk `part`.
struct ElementRange {
  int64_t begin = 0;
  int64_t count = 0;
};
ElementRange chunk_of(int64_t count, int parts, int part, int elem_size);

}  // namespace fjit
