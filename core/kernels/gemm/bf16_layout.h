// The packed layout of op(B) that bf16_pack_b writes and both native bf16 paths read (internal
// to core/kernels/gemm/): depth blocks of kPairs pairs (the last one shorter), each block's pairs
// rounded up to a multiple of 16 with zero pairs (whole AMX tiles), and within a block slivers
// of kNr columns: pair q of sliver j at bp + q0 * ns * kNr * 2 + j * round16(np) * kNr * 2 +
// q * kNr * 2, kNr columns of two bf16 each (B[2q][col], B[2q + 1][col]).
#pragma once

#include <cstdint>

namespace fjit {

constexpr int64_t kNr = 32, kPairs = 128, kChunk = 16;

constexpr int64_t round16(int64_t pairs) { return (pairs + kChunk - 1) / kChunk * kChunk; }

// The AMX path of bf16_gemm.h (bf16_gemm_amx.cc) on op(B) packed so: C [m, n] = (accumulate ? C
// : 0) + op(A) op(B), op(A) from A row-major with row stride lda or, with trans_a, stored [k, m];
// only C's slivers [j0, j1) of kNr columns (C's row stride stays n).
void amx_gemm_on_packed(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                        const uint16_t* bp, float* c, bool accumulate, int64_t j0, int64_t j1);

}  // namespace fjit
