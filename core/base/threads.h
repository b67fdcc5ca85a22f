// Intra-op threads: how many threads the kernels of one plan run may use.
//
// The multi-threaded kernels (GEMMs on fjit's driver or BLIS, batched and bf16 products, fused
// attention, large fused elementwise passes, and the memory-bound kernels that
// core/kernels/split_work.h splits: patches, elementwise, casts, layout copies, reductions,
// random bits) use OpenMP, which keeps its worker threads alive between parallel
// regions (no per-call thread start-up), and split only work large enough to pay for it, so
// small ones always run on the calling thread. Threads only ever take whole output blocks
// fixed by the shapes, so no result depends on the thread count (README: reproducibility).
//
// The setting is per calling thread (OpenMP's nthreads ICV), so thread replicas in one process
// each get their own share: Mesh gives every replica max(1, cores / replicas on this machine)
// threads unless FJIT_INTRA_OP_THREADS says otherwise (read at Mesh start-up, parallel/). A plain jit() call outside pmap runs
// with the calling thread's setting: OpenMP's default (OMP_NUM_THREADS, else every core, as
// JAX and PyTorch use every core by default) until set_intra_op_threads() changes it.
#pragma once

namespace fjit {

// Sets the intra-op thread count for plans run on the calling thread. REQUIRES: n >= 1.
void set_intra_op_threads(int n);
// The intra-op thread count in effect on the calling thread (1 without OpenMP).
int intra_op_threads();
// What a replica gets by default when `replicas_here` replicas share this machine:
// max(1, hardware cores / replicas_here).
int default_intra_op_threads(int replicas_here);

}  // namespace fjit
