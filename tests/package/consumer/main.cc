// A downstream program: one jitted function with a gradient and a check, run on one replica
// and on two thread replicas under pmap, and the training toolkit (a traced schedule, a
// checkpoint written and read back). Exits non-zero on a wrong result.
#include <cmath>
#include <cstdio>

#include "core/base/version.h"
#include "fjit.h"

using namespace fjit;

int main() {
  // f(w) = sum((w * x - 1)^2); df/dw = 2 * x * (w * x - 1).
  auto grad_step = jit([](const Tensor& w, const Tensor& x) {
    auto [loss, g] = value_and_grad([&](const Tensor& v) {
      Tensor r = v * x - 1.0;
      return sum(r * r);
    })(w);
    check(all(isfinite(g)), "the gradient must be finite (loss {})", loss);
    return g;
  });
  Array w = Array::from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
  Array x = Array::from_vector<float>({0.5f, 1.0f, 2.0f}, {3});
  Array g = grad_step(w, x);
  const float* gv = g.data<float>();
  const float* wv = w.data<float>();
  const float* xv = x.data<float>();
  for (int i = 0; i < 3; ++i) {
    const float want = 2.0f * xv[i] * (wv[i] * xv[i] - 1.0f);
    if (std::fabs(gv[i] - want) > 1e-6f) {
      std::fprintf(stderr, "gradient %d: %g, want %g\n", i, gv[i], want);
      return 1;
    }
  }

  Mesh mesh = Mesh::threads(2);
  auto total = pmap(mesh, "i", [](const Tensor& v) { return psum(sum(v), "i"); });
  Array rows = Array::from_vector<float>({1, 2, 3, 4}, {4});
  const float s = total(rows).data<float>()[0];
  if (s != 10.0f) {
    std::fprintf(stderr, "psum over 2 replicas: %g, want 10\n", s);
    return 1;
  }
  // The toolkit: a schedule evaluated in a trace, batches of a data set, a checkpoint.
  const Schedule lr = Schedule::warmup(2, Schedule::cosine(1.0, 4));
  auto traced_lr = jit([lr](const Tensor& t) { return lr(t); });
  if (traced_lr(Array::scalar(1)).item<float>() != 0.5f || lr(4) != 0.5) {
    std::fprintf(stderr, "schedule: %g traced, %g host\n", traced_lr(Array::scalar(1)).item<float>(), lr(4));
    return 1;
  }
  io::BatchIterator batches(io::Dataset({{"x", rows}}), {.batch_size = 2, .shuffle = false});
  if (batches.batches_per_epoch() != 2 || (*batches.next())["x"].data<float>()[1] != 2.0f) {
    std::fprintf(stderr, "batches of a data set: wrong order\n");
    return 1;
  }
  io::Checkpoint ck;
  ck.tensors = {{"w", w}};
  io::save_checkpoint("consumer.safetensors", ck);
  if (!io::load_checkpoint("consumer.safetensors").find("w")->bit_equal(w)) {
    std::fprintf(stderr, "checkpoint: w did not come back\n");
    return 1;
  }
  std::printf("fjit %s consumer: gradient, psum and toolkit ok\n", FJIT_VERSION_STRING);
  return 0;
}
