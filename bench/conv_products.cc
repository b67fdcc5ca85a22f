// A convolution's f32 products with their patches written out and read from the image, side
// by side (core/kernels/gemm/patches_gemm.h): the CNN's three 3x3 SAME layers at batch 128,
// each product both ways in rounds that alternate which goes first; on a CPU with AVX512_BF16
// also the bf16 forward and weight-gradient products (patches_gemm_bf16.cc).
//
//   taskset -c 0 build/bench/conv_products [--rounds 7] [--threads 1]
//
// Per product: the median time each way and the median and range over rounds of the per-round
// ratio (from the image / written out), and whether both gave the same bits:
//   forward          patches(x) . W            written out: the patches gathered whole, then
//   weight gradient  patches(x)^T . g          packed_sgemm over them; from the image:
//                                              packed_sgemm_patches
//   input gradient   patches_adjoint(g . W^T)  written out: packed_sgemm into the whole
//                                              cotangent patches, then the adjoint's sums; from
//                                              the image: the compiled step's folded op (jit)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/matmul_bf16.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/gemm/patches_gemm.h"
#include "parallel/fjit.h"

using namespace fjit;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

struct Layer {
  const char* name;
  int64_t size, c, f;  // image size x size x c, f filters
};

// One product both ways: `written` and `read` each fill their own output; per round both run,
// the first alternating.
void compare(const std::string& what, int rounds, const std::function<void()>& written,
             const std::function<void()>& read, const std::function<bool()>& same) {
  std::vector<double> tw, tr, ratio;
  for (int r = 0; r < rounds + 1; ++r) {
    double w = 0, d = 0;
    for (int side = 0; side < 2; ++side) {
      const bool do_written = (side == 0) == (r % 2 == 0);
      const double t0 = now_us();
      (do_written ? written : read)();
      (do_written ? w : d) = now_us() - t0;
    }
    if (r == 0) continue;  // the first round warms the buffers
    tw.push_back(w), tr.push_back(d), ratio.push_back(d / w);
  }
  std::printf("RESULT %-40s | written out %9.1f us | from the image %9.1f us | %.2fx (%.2f-%.2f) | %s\n",
              what.c_str(), median(tw), median(tr), median(ratio),
              *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()), same() ? "same bits" : "BITS DIFFER");
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The bf16 forward and weight-gradient products (the layers' bf16 policy, AVX512_BF16): written
// out, the bf16 patches gathered whole and multiplied by the bf16 matmul's code (bf16_matmul);
// from the image, the jitted product, which the compiler gives the image (patches_gemm_bf16.cc).
void bf16_products(const std::string& shape, int rounds, PatchesOperand o, const Window& win,
                   const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& g, int64_t f) {
  const int64_t pixels = o.pixels(), taps = o.taps();
  auto to_bf16 = jit([](const Tensor& v) { return cast(v, DType::bf16); });
  const Array xb = to_bf16(Array::from_vector(x, {o.n, o.h, o.w, o.c}));
  const Array wb = to_bf16(Array::from_vector(w, {taps, f}));
  const Array gb = to_bf16(Array::from_vector(g, {pixels, f}));
  o.x_bf16 = static_cast<const uint16_t*>(xb.raw());
  std::vector<uint16_t> cols(pixels * taps);
  std::vector<float> y(pixels * f), d(taps * f);
  const auto* wp = static_cast<const uint16_t*>(wb.raw());
  const auto* gp = static_cast<const uint16_t*>(gb.raw());
  for (const bool ta : {false, true}) {
    auto product = jit([&](const Tensor& image, const Tensor& b) {
      return matmul(reshape(patches(image, win), {pixels, taps}), b, DType::f32, ta);
    });
    const Array& b = ta ? gb : wb;
    Array out = product(xb, b);
    bool reads_image = true;  // the compiler leaves thin images their patches
    for (const Node& n : product.core().last_entry()->exe->graph->nodes())
      reads_image = reads_image && n.op != Op::Patches;
    float* mine = ta ? d.data() : y.data();
    compare(
        shape + (ta ? " bf16 weight gradient" : " bf16 forward") + (reads_image ? "" : " (not fused)"),
        rounds,
        [&] {
          o.block(0, pixels, 0, taps, cols.data(), taps);
          if (ta) kernels::st::bf16_matmul(true, false, taps, f, pixels, cols.data(), gp, mine);
          else kernels::st::bf16_matmul(false, false, pixels, f, taps, cols.data(), wp, mine);
        },
        [&] { product.run_into(out, xb, b); },
        [&] { return same_bits(mine, out.data<float>(), out.size()); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(1, std::atoi(argv[i + 1]));
  }
  set_intra_op_threads(threads);
  const Isa isa = active_isa();
  std::printf("conv_products: %d rounds, %d thread(s), kernels %s\n", rounds, threads,
              packed_gemm_name());
  const Layer layers[] = {{"conv1", 28, 1, 32}, {"conv2", 14, 32, 64}, {"conv3", 7, 64, 128}};
  const int64_t batch = 128;
  for (const Layer& l : layers) {
    PatchesOperand o;
    o.n = batch, o.h = o.w = o.oh = o.ow = l.size, o.c = l.c, o.kh = o.kw = 3, o.top = o.left = 1;
    const std::vector<float> x = random_values(batch * l.size * l.size * l.c, 1);
    o.x = x.data();
    const int64_t pixels = o.pixels(), taps = o.taps();
    const std::vector<float> w = random_values(taps * l.f, 2), g = random_values(pixels * l.f, 3);
    std::vector<float> cols(pixels * taps), y1(pixels * l.f), y2(pixels * l.f), d1(taps * l.f),
        d2(taps * l.f);
    const std::string shape = std::string(l.name) + " [" + std::to_string(pixels) + "," +
                              std::to_string(taps) + "]x" + std::to_string(l.f);
    compare(
        shape + " forward", rounds,
        [&] {
          o.block(0, pixels, 0, taps, cols.data(), taps);
          packed_sgemm(isa, false, false, pixels, l.f, taps, cols.data(), w.data(), y1.data(),
                       false, threads);
        },
        [&] { packed_sgemm_patches(isa, false, false, pixels, l.f, taps, o, w.data(), y2.data(), threads); },
        [&] { return same_bits(y1.data(), y2.data(), pixels * l.f); });
    compare(
        shape + " weight gradient", rounds,
        [&] {
          o.block(0, pixels, 0, taps, cols.data(), taps);
          packed_sgemm(isa, true, false, taps, l.f, pixels, cols.data(), g.data(), d1.data(),
                       false, threads);
        },
        [&] { packed_sgemm_patches(isa, true, false, taps, l.f, pixels, o, g.data(), d2.data(), threads); },
        [&] { return same_bits(d1.data(), d2.data(), taps * l.f); });
    // The input gradient through jit, both ways: the composite of matmul and patches_adjoint
    // whose product has a second reader (so it is not folded), and the folded op.
    const Window win{.size = {3, 3}, .padding = Padding::same()};
    const Shape image{batch, l.size, l.size, l.c};
    auto unfolded = jit([&](const Tensor& gt, const Tensor& wt) {
      const Tensor product = matmul(gt, wt, false, true);
      const Tensor dx = patches_adjoint(reshape(product, {batch, l.size, l.size, taps}), win, image);
      return std::make_tuple(dx, product);  // the product read twice: not folded
    });
    auto folded = jit([&](const Tensor& gt, const Tensor& wt) {
      return patches_adjoint(reshape(matmul(gt, wt, false, true), {batch, l.size, l.size, taps}),
                             win, image);
    });
    const Array ga = Array::from_vector(g, {pixels, l.f}), wa = Array::from_vector(w, {taps, l.f});
    std::tuple<Array, Array> out1 = unfolded(ga, wa);
    Array out2 = folded(ga, wa);
    bool folds = true;  // the compiler leaves thin images their patches_adjoint
    for (const Node& n : folded.core().last_entry()->exe->graph->nodes())
      folds = folds && n.op != Op::PatchesAdjoint;
    compare(
        shape + (folds ? " input gradient" : " input gradient (not folded)"), rounds, [&] { unfolded.run_into(out1, ga, wa); },
        [&] { folded.run_into(out2, ga, wa); },
        [&] { return std::get<0>(out1).bit_equal(out2); });
    if (active_avx512_bf16()) bf16_products(shape, rounds, o, win, x, w, g, l.f);
  }
  return 0;
}
