// The accumulator macros of the AVX-512 micro-kernels (ukernel_avx512.cc, f32, and
// ukernel_avx512bf16.cc, bf16 dot products): a 32-column tile's row r in two zmm accumulators,
// named c<r>_0 and c<r>_1. Text only, expanded inside each kernel's target-attributed function,
// so the two files share no compiled code (ukernel.h says why that matters). Named variables,
// not an array: GCC keeps an array of accumulators on the stack around the loop.
#pragma once

// Row r's two accumulators, zero.
#define FJIT_ZERO(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();

// Row r's accumulators into row r of C (float* c, row stride ldc): added to it where `add`.
#define FJIT_STORE(r)                                    \
  {                                                      \
    float* row = c + (r) * ldc;                          \
    __m512 lo = c##r##_0, hi = c##r##_1;                 \
    if (add) {                                           \
      lo = _mm512_add_ps(_mm512_loadu_ps(row), lo);      \
      hi = _mm512_add_ps(_mm512_loadu_ps(row + 16), hi); \
    }                                                    \
    _mm512_storeu_ps(row, lo);                           \
    _mm512_storeu_ps(row + 16, hi);                      \
  }
