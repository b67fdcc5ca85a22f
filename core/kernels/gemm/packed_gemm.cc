// The packed GEMM's driver (packed_gemm.h): blocking, packing and threads around the
// micro-kernels of ukernel.h.
//
// For a product C [m, n] += op(A) op(B) with the kernel's tile MR x NR:
//   depth blocks   K is cut into ceil(K / kc_max) blocks of equal size (the last one shorter),
//                  from K and the kernel alone;
//   packed B       every depth block of op(B) as slivers of NR columns, kc x NR each (zero
//                  columns past N), packed once per call by all threads together; a small
//                  row-major B whose columns fill whole slivers is read in place instead; and
//                  where op(A) is short (its packed depth block fits L2), and either not
//                  transposed or deeper than one depth block, one unit spans all the rows and
//                  packs each of its B slivers into L1 just before using it (B streamed: read
//                  once, never written out whole);
//   units          the output's tiles in units of a few MR-row slivers by a range of NR-column
//                  slivers; a unit packs its rows of op(A) per depth block (mc x kc, in L2) and
//                  runs the kernel over its tiles, each B sliver (in L1) against every A sliver.
// Which thread runs a unit, and how wide units are, changes nothing in any element's
// arithmetic (ukernel.h), so the bits do not depend on the thread count.
#include "core/kernels/gemm/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <string>
#include <vector>

#include "core/base/fpe_flags.h"
#include "core/base/scratch.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/gemm_packing.h"
#include "core/kernels/gemm/patches_gemm.h"
#include "core/kernels/gemm/ukernel.h"

namespace fjit {
namespace {

using gemm::pack_across;
using gemm::pack_along;
using gemm::UKernel;

// Products below this many flops stay on the other paths (packing both operands costs more
// than it saves); threads only from kThreadFlops on, as the other GEMM paths.
constexpr int64_t kMinFlops = int64_t{1} << 17;
constexpr int64_t kThreadFlops = int64_t{1} << 22;

std::atomic<int> g_use{static_cast<int>(PackedGemmUse::without_library)};

// The kernel for m rows of C: with AVX-512, the 8-row tile where it pads m less than the
// 12-row one (m = 64: 64 rows computed, not 72); a function of m and the ISA alone, so the
// tiling still depends on the shapes only.
const UKernel& kernel_for(Isa isa, int64_t m) {
  if (isa != Isa::avx512) return gemm::ukernel_avx2();
  const int64_t pad12 = (m + 11) / 12 * 12 - m, pad8 = (m + 7) / 8 * 8 - m;
  return pad8 < pad12 ? gemm::ukernel_avx512_8() : gemm::ukernel_avx512();
}

// A buffer of floats aligned to 64 bytes, kept per thread (core/base/scratch.h).
struct Buffer {
  std::vector<float> v;
  float* get(int64_t n) { return aligned_scratch(v, n); }
};

struct Plan {
  const UKernel* uk;
  int64_t m, n, k, lda, ldb, ldc, kc, kblocks, ms, ns, npad, unit_slivers, row_units, col_units, col_slivers;
  bool a_in_place;  // A [m, k] read in place by the kernel (tile_rows), not packed
  const PatchesOperand* patches = nullptr;  // op(A) gathered from an image (patches_gemm.h)
  bool b_in_place;  // B [k, n] read in place by the kernel (ldb), not packed
  bool b_streamed;  // each B sliver packed by its unit just before use, into L1 (one row unit)
};

// Below this many B slivers per unit, packing A costs more than the kernel's reads of A in
// place (each A sliver is then used against few B slivers).
constexpr int64_t kInPlaceSlivers = 4;
// A row-major B [k, n] whose columns fill whole slivers is read in place, unpacked, when it is
// at most this large (its slivers' rows then stay in L1/L2 however far apart they are), or
// when it is one sliver wide.
constexpr int64_t kInPlaceBBytes = 64 << 10;
// Where all of op(A)'s packed depth block fits this many bytes (in L2), one row unit takes all
// of the rows, and each unit packs its B slivers one at a time just before using them: B is
// then read once, never written out whole and read back.
constexpr int64_t kStreamABytes = 384 << 10;

Plan make_plan(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int threads) {
  Plan pl;
  pl.uk = &kernel_for(isa, m);
  const int64_t mr = pl.uk->mr, nr = pl.uk->nr;
  pl.m = m, pl.n = n, pl.k = k;
  pl.kblocks = (k + pl.uk->kc - 1) / pl.uk->kc;
  pl.kc = (k + pl.kblocks - 1) / pl.kblocks;  // the depth blocks: K and the kernel only
  pl.ms = (m + mr - 1) / mr;
  pl.ns = (n + nr - 1) / nr;
  pl.npad = pl.ns * nr;
  pl.row_units = (pl.ms + pl.uk->unit_slivers - 1) / pl.uk->unit_slivers;
  pl.unit_slivers = (pl.ms + pl.row_units - 1) / pl.row_units;
  pl.row_units = (pl.ms + pl.unit_slivers - 1) / pl.unit_slivers;
  // (B exactly one sliver wide is laid out as its packing already, at any size.)
  pl.b_in_place = !tb && n % nr == 0 &&
                  (n == nr || k * n * static_cast<int64_t>(sizeof(float)) <= kInPlaceBBytes);
  // A transposed A streams B only past one depth block (a weight gradient over many rows):
  // with one block, B packed whole costs little, and the units walk C down all of its rows.
  const int64_t a_block_bytes = pl.ms * mr * pl.kc * static_cast<int64_t>(sizeof(float));
  pl.b_streamed = (!ta || pl.kblocks >= 2) && !pl.b_in_place && a_block_bytes <= kStreamABytes;
  if (pl.b_streamed) pl.unit_slivers = pl.ms, pl.row_units = 1;
  // With threads, a multiple of the thread count of row units where there are slivers enough,
  // so that the static schedule gives every thread as many rows.
  if (threads > 1 && !pl.b_streamed && pl.row_units % threads != 0 && pl.ms >= threads) {
    const int64_t units = std::min(pl.ms, (pl.row_units + threads - 1) / threads * threads);
    pl.unit_slivers = (pl.ms + units - 1) / units;
    pl.row_units = (pl.ms + pl.unit_slivers - 1) / pl.unit_slivers;
  }
  // With few row units, split the columns as well so that every thread has work; but not a
  // transposed A whose row units already share out evenly (a weight gradient A^T B with a
  // deep K): each column unit would pack the same strided rows of A again.
  pl.col_units = 1;
  const bool even_rows = pl.row_units % threads == 0;
  if (threads > 1 && pl.row_units < 4 * threads && !(ta && even_rows))
    pl.col_units = std::min(pl.ns, (4 * threads + pl.row_units - 1) / pl.row_units);
  // A streamed product with a transposed A (a weight gradient x^T g with few rows and a deep K)
  // gives each thread one column unit: every column unit packs all of op(A)'s strided rows.
  if (ta && pl.b_streamed) pl.col_units = std::min<int64_t>(pl.ns, threads);
  pl.col_slivers = (pl.ns + pl.col_units - 1) / pl.col_units;
  pl.col_units = (pl.ns + pl.col_slivers - 1) / pl.col_slivers;
  pl.a_in_place = !ta && pl.col_slivers <= kInPlaceSlivers;
  return pl;
}

// Packs depth block kb, column sliver j of op(B) into dst (kcb x NR).
void pack_b_sliver(const Plan& pl, bool tb, const float* b, int64_t kb, int64_t j, float* dst) {
  const int64_t nr = pl.uk->nr, k0 = kb * pl.kc, kcb = std::min(pl.kc, pl.k - k0);
  const int64_t j0 = j * nr, cols = std::min(nr, pl.n - j0);
  if (tb) pack_across(b + j0 * pl.ldb + k0, pl.ldb, cols, kcb, dst, nr);  // B [n, k]
  else pack_along(b + k0 * pl.ldb + j0, pl.ldb, cols, kcb, dst, nr);      // B [k, n]
}

// Packs depth block kb, column sliver j of op(B) into its place in bp.
void pack_b(const Plan& pl, bool tb, const float* b, float* bp, int64_t kb, int64_t j) {
  const int64_t k0 = kb * pl.kc, kcb = std::min(pl.kc, pl.k - k0);
  pack_b_sliver(pl, tb, b, kb, j, bp + k0 * pl.npad + j * kcb * pl.uk->nr);
}

// Where finished tiles go: added to (or stored in) C, or handed to an epilogue.
struct Sink {
  float* c;
  int64_t ldc;
  bool accumulate;
  const TileEpilogue* epi;
};

void run_unit(const Plan& pl, bool ta, bool tb, const float* a, const float* bp, const Sink& sink,
              int64_t unit) {
  thread_local Buffer a_buf, u_buf, g_buf, s_buf;
  float* c = sink.c;
  const bool accumulate = sink.accumulate;
  const UKernel& uk = *pl.uk;
  const int64_t mr = uk.mr, nr = uk.nr;
  const int64_t s0 = (unit / pl.col_units) * pl.unit_slivers,
                s1 = std::min(pl.ms, s0 + pl.unit_slivers);
  const int64_t j0 = (unit % pl.col_units) * pl.col_slivers,
                j1 = std::min(pl.ns, j0 + pl.col_slivers);
  float* ap = a_buf.get((s1 - s0) * mr * pl.kc);
  alignas(64) float tmp[16 * 64];
  // With an epilogue and several depth blocks, the unit's tiles are summed in u (whole padded
  // tiles, ldu floats a row) and handed over after the last block.
  const int64_t ldu = sink.epi && pl.kblocks > 1 ? (j1 - j0) * nr : nr;
  float* u = sink.epi && pl.kblocks > 1 ? u_buf.get((s1 - s0) * mr * ldu) : tmp;
  float* streamed = pl.b_streamed ? s_buf.get(pl.kc * nr) : nullptr;
  for (int64_t kb = 0; kb < pl.kblocks; ++kb) {
    const int64_t k0 = kb * pl.kc, kcb = std::min(pl.kc, pl.k - k0);
    // Rows of op(A) read in place by tile_rows: row i at ia + (i - ibase) * ilda.
    const float* ia = a + k0;
    int64_t ilda = pl.lda, ibase = 0;
    if (pl.patches) {  // an image's patches (patches_gemm.h), gathered per unit and depth block
      const int64_t r0 = s0 * mr, rows = std::min(pl.m, s1 * mr) - r0;
      if (ta) {  // straight into the packed slivers, as pack_along would pack them
        pl.patches->slivers(k0, kcb, r0, rows, ap, mr);
      } else {  // into g, in cache, packed from there
        float* g = g_buf.get(rows * kcb);
        pl.patches->block(r0, rows, k0, kcb, g, kcb);
        ia = g, ilda = kcb, ibase = r0;
      }
    }
    for (int64_t s = s0; s < s1 && !(pl.patches && ta); ++s) {
      const int64_t i0 = s * mr, rows = std::min(mr, pl.m - i0);
      if (pl.a_in_place && rows == mr) continue;  // read in place below
      float* dst = ap + (s - s0) * kcb * mr;
      if (pl.patches) pack_across(ia + (i0 - ibase) * ilda, ilda, rows, kcb, dst, mr);
      else if (ta) pack_along(a + k0 * pl.lda + i0, pl.lda, rows, kcb, dst, mr);  // A [k, m]
      else pack_across(a + i0 * pl.lda + k0, pl.lda, rows, kcb, dst, mr);         // A [m, k]
    }
    const bool add = accumulate || kb > 0;
    // A packed sliver's rows are NR floats apart; B in place, its own rows (bp is B then).
    const int64_t ldb = pl.b_in_place ? pl.ldb : nr;
    for (int64_t j = j0; j < j1; ++j) {
      const float* b_sliver = streamed;
      if (pl.b_streamed) pack_b_sliver(pl, tb, bp, kb, j, streamed);
      else b_sliver = pl.b_in_place ? bp + k0 * pl.ldb + j * nr : bp + k0 * pl.npad + j * kcb * nr;
      const int64_t col0 = j * nr, cols = std::min(nr, pl.n - col0);
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t row0 = s * mr, rows = std::min(mr, pl.m - row0);
        const float* a_sliver = ap + (s - s0) * kcb * mr;
        if (sink.epi) {
          float* t = pl.kblocks > 1 ? u + (s - s0) * mr * ldu + (j - j0) * nr : tmp;
          if (kb + 1 == pl.kblocks && sink.epi->prefetch)
            sink.epi->prefetch(sink.epi->ctx, row0, col0, rows, cols);
          if (pl.a_in_place && rows == mr)
            uk.tile_rows(kcb, ia + (row0 - ibase) * ilda, ilda, b_sliver, ldb, t, ldu, kb > 0);
          else
            uk.tile(kcb, a_sliver, b_sliver, ldb, t, ldu, kb > 0);
          if (kb + 1 == pl.kblocks)
            sink.epi->apply(sink.epi->ctx, t, ldu, row0, col0, rows, cols, s * pl.ns + j);
          continue;
        }
        float* ct = c + row0 * pl.ldc + col0;
        if (rows == mr && cols == nr) {
          if (pl.a_in_place)
            uk.tile_rows(kcb, ia + (row0 - ibase) * ilda, ilda, b_sliver, ldb, ct, pl.ldc, add);
          else
            uk.tile(kcb, a_sliver, b_sliver, ldb, ct, pl.ldc, add);
          continue;
        }
        // An edge tile: the whole tile into tmp, then its valid part into C with the same
        // one addition the kernel makes.
        if (pl.a_in_place && rows == mr) {  // a column edge: the in-place kernel into tmp
          uk.tile_rows(kcb, ia + (row0 - ibase) * ilda, ilda, b_sliver, ldb, tmp, nr, false);
        } else {
          uk.tile(kcb, a_sliver, b_sliver, ldb, tmp, nr, false);
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t q = 0; q < cols; ++q)
            ct[r * pl.ldc + q] = add ? ct[r * pl.ldc + q] + tmp[r * nr + q] : tmp[r * nr + q];
      }
    }
  }
}

// p[0] = M, p[1] = K, p[2] = N (as matmul.cc plans them), p[6] = the Isa chosen at compile time.
template <bool TA, bool TB>
void packed_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  const int threads = 2 * m * n * k >= kThreadFlops ? intra_op_threads() : 1;
  packed_sgemm(static_cast<Isa>(in.p[6]), TA, TB, m, n, k, in.in<float>(f, 0), in.in<float>(f, 1),
               in.output<float>(f), false, threads);
}

// The driver, k > 0: B packed by all threads, then the units.
void run(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
         const float* b, int64_t ldb, const Sink& sink, int threads,
         const PatchesOperand* patches = nullptr) {
  threads = std::max(1, threads);
  Plan pl = make_plan(isa, ta, tb, m, n, k, threads);
  pl.lda = lda, pl.ldb = ldb, pl.ldc = sink.ldc;
  pl.patches = patches;
  if (patches) pl.a_in_place = false;
  thread_local Buffer b_buf;
  // (run_unit reads B itself where it is in place or streamed.)
  const bool b_whole = !pl.b_in_place && !pl.b_streamed;
  const float* bp = b_whole ? b_buf.get(pl.k * pl.npad) : b;
  float* b_packed = b_whole ? const_cast<float*>(bp) : nullptr;
  const int64_t b_tasks = b_whole ? pl.kblocks * pl.ns : 0,
                units = pl.row_units * pl.col_units;
  const int team = static_cast<int>(std::min<int64_t>(threads, units));
  // Past the step's deadline the units left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  if (team <= 1) {
    for (int64_t t = 0; t < b_tasks; ++t) pack_b(pl, tb, b, b_packed, t / pl.ns, t % pl.ns);
    for (int64_t u = 0; u < units && !deadline_passed(deadline); ++u)
      run_unit(pl, ta, tb, a, bp, sink, u);
    return;
  }
#pragma omp parallel num_threads(team)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < b_tasks; ++t) pack_b(pl, tb, b, b_packed, t / pl.ns, t % pl.ns);
    // (the loop's barrier: B is packed before any unit reads it)
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; ++u)
      if (!deadline_passed(deadline)) run_unit(pl, ta, tb, a, bp, sink, u);
    fpe::collect_worker_flags();
  }
}

// Batched: p[0] = M, p[1] = K, p[2] = N, p[3] = batch, p[4], p[5] = the operands' batch strides
// (as matmul.cc plans them), p[6] = the Isa.
template <bool TA, bool TB>
void batched_packed_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2], batch = in.p[3];
  const int threads = 2 * batch * m * n * k >= kThreadFlops ? intra_op_threads() : 1;
  packed_sgemm_batched(static_cast<Isa>(in.p[6]), TA, TB, batch, m, n, k, in.in<float>(f, 0),
                       in.p[4], in.in<float>(f, 1), in.p[5], in.output<float>(f), threads);
}

}  // namespace

void packed_sgemm(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                  const float* b, float* c, bool accumulate, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) std::fill(c, c + m * n, 0.f);
    return;
  }
  run(isa, ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, Sink{c, n, accumulate, nullptr}, threads);
}

void packed_sgemm_strided(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                          bool accumulate, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  run(isa, ta, tb, m, n, k, a, lda, b, ldb, Sink{c, ldc, accumulate, nullptr}, threads);
}

void packed_sgemm_patches(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          const PatchesOperand& a, const float* b, float* c, int threads) {
  if (m <= 0 || n <= 0) return;
  assert(m == (ta ? a.taps() : a.pixels()) && k == (ta ? a.pixels() : a.taps()));
  if (k <= 0) {
    std::fill(c, c + m * n, 0.f);
    return;
  }
  run(isa, ta, tb, m, n, k, nullptr, 0, b, tb ? k : n, Sink{c, n, false, nullptr}, threads, &a);
}

void packed_sgemm_tiles(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                        const float* b, const TileEpilogue& epi, int threads) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  run(isa, ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, Sink{nullptr, 0, false, &epi}, threads);
}

int64_t packed_tile_count(Isa isa, int64_t m, int64_t n) {
  const UKernel& uk = kernel_for(isa, m);
  return ((m + uk.mr - 1) / uk.mr) * ((n + uk.nr - 1) / uk.nr);
}

void packed_sgemm_batched(Isa isa, bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k,
                          const float* a, int64_t sa, const float* b, int64_t sb, float* c,
                          int threads) {
  const int team = static_cast<int>(std::min<int64_t>(std::max(1, threads), batch));
  if (team <= 1 || batch < threads) {
    for (int64_t i = 0; i < batch; ++i)
      packed_sgemm(isa, ta, tb, m, n, k, a + i * sa, b + i * sb, c + i * m * n, false, threads);
    return;
  }
  // The workers do not see the calling thread's deadline: each entry asks it first.
  const int64_t deadline = thread_step_deadline();
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t i = 0; i < batch; ++i) {
    if (!deadline_passed(deadline)) packed_sgemm(isa, ta, tb, m, n, k, a + i * sa, b + i * sb, c + i * m * n, false, 1);
    fpe::collect_worker_flags();
  }
}

bool packed_gemm_pays(int64_t m, int64_t n, int64_t k) { return m > 0 && n > 0 && 2 * m * n * k >= kMinFlops; }

void set_packed_gemm_use(PackedGemmUse use) {
  g_use.store(static_cast<int>(use), std::memory_order_relaxed);
}
PackedGemmUse packed_gemm_use() {
  return static_cast<PackedGemmUse>(g_use.load(std::memory_order_relaxed));
}

const char* packed_gemm_name() {
  thread_local std::string s;
  const bool wide = active_isa() == Isa::avx512;
  const UKernel& uk = wide ? gemm::ukernel_avx512() : gemm::ukernel_avx2();
  s = std::string("fjit packed GEMM, ") + uk.name + " kernel";
  if (wide) s += std::string(" (") + gemm::ukernel_avx512_8().name + " where it pads less)";
  return s.c_str();
}

bool select_packed_matmul(Instr& instr, int64_t m, int64_t k, int64_t n) {
  if (instr.out.dtype != DType::f32 || packed_gemm_use() == PackedGemmUse::never) return false;
  if (!packed_gemm_pays(m, n, k)) return false;
  instr.p[0] = m;
  instr.p[1] = k;
  instr.p[2] = n;
  instr.p[6] = static_cast<int64_t>(active_isa());
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (ta) instr.fn = tb ? packed_kernel<true, true> : packed_kernel<true, false>;
  else instr.fn = tb ? packed_kernel<false, true> : packed_kernel<false, false>;
  return true;
}

bool select_packed_batched_matmul(Instr& instr) {
  const int64_t m = instr.p[0], k = instr.p[1], n = instr.p[2];
  if (instr.out.dtype != DType::f32 || packed_gemm_use() == PackedGemmUse::never) return false;
  if (!packed_gemm_pays(m, n, k)) return false;
  instr.p[6] = static_cast<int64_t>(active_isa());
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (ta) instr.fn = tb ? batched_packed_kernel<true, true> : batched_packed_kernel<true, false>;
  else instr.fn = tb ? batched_packed_kernel<false, true> : batched_packed_kernel<false, false>;
  return true;
}

}  // namespace fjit
