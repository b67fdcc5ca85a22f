// The README's tour, verbatim (CTest checks that the two agree and that this runs).
#include <cstdio>

#include "fjit.h"
using namespace fjit;

Tensor loss_fn(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);  // tracing: an op only records a graph node
  Tensor logits = matmul(h, p["w2"]) + p["b2"];
  check(all(isfinite(logits)), "logits must be finite");  // a flag read after every step
  return mean(softmax_cross_entropy(logits, y));
}

int main(int argc, char** argv) {
  Mesh mesh = Mesh::from_environment(argc, argv);  // one replica per mpirun rank, or --replicas N
  // Data: 512 random points labelled by a fixed random linear "teacher", computed with jit.
  Array x = he_normal({512, 16}, /*seed=*/1), teacher = he_normal({16, 4}, /*seed=*/2);
  Array y = jit([](const Tensor& x, const Tensor& t) { return argmax(matmul(x, t), -1); })(x, teacher);
  AdamW opt{.lr = 1e-2};
  auto step = pmap(mesh, "batch", [opt](const Params& p, const Params& s, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(loss_fn)(p, x, y);    // reverse mode: g has p's names
    auto [p2, s2] = opt.update(p, pmean(g, "batch"), s);  // one fused all-reduce of g
    return std::tuple{p2, s2, pmean(loss, "batch")};
  });
  ArrayDict params = mesh.replicate(mlp_params({16, 32, 4}, /*seed=*/0));
  ArrayDict state = opt.init_state(params);
  double first = 0, last = 0;
  for (int i = 0; i < 100; ++i) {  // threads split x, y over the replicas; MPI ranks pass their own
    auto [p2, s2, loss] = step(params, state, x, y);  // traced and compiled on the first call only
    params = p2;
    state = s2;
    (i == 0 ? first : last) = loss.item<double>();
  }
  if (mesh.is_primary()) std::printf("loss %.3f -> %.3f\n%s", first, last, metrics_report().c_str());
  return last < first / 4 ? 0 : 1;
}
