// The language model's training step and decode step, timed alone: the fjit half of the
// side-by-side comparison with JAX and PyTorch that bench/lm_compare.py runs (it starts this
// program once per round, between rounds of its own, and divides).
//
//   build/bench/lm_step --steps 5            # prints "STEP_US <median> <min> <max> WALL_US <median>"
//   build/bench/lm_step --generate 64        # prints "DECODE_US <median> WALL_US <median>"
//   build/bench/lm_step --layers 12 --remat  # and the step's arena and peak RSS ("ARENA_MB")
//   build/bench/lm_step --lora 8             # LoRA fine-tuning: rank-8 adapters trained alone
//   build/bench/lm_step --frozen block*      # the parameters those patterns select frozen
//   build/bench/lm_step --serve              # step counts from stdin, a STEP_US line each
//   build/bench/lm_step --check F.bin        # the initial parameters and the batch written to
//                                            # F.bin, "LOSSES <l1> <l2> <l3>" printed
//
// The model is train_lm's (core/nn/decoder.h: 6 layers, d 384, 6 heads, context 256, vocab
// 256, learned positions, GELU, layer norm, tied embeddings), unless --layers/--dim/--heads/
// --context say otherwise. The step is jit(value_and_grad(mean cross entropy) + clipping to
// norm 1 + AdamW(lr 1e-3, b2 0.95, weight decay 0.1)) on a batch of --batch sequences, with
// run_into (no output allocation). With --lora R, adapters (core/nn/lora.h: rank R, alpha 2R,
// on every linear layer of the blocks, finetune_lm's default) are added and only they are trained; with --frozen PATTERNS (a comma
// list of name patterns) the parameters selected are frozen: the step differentiates, clips and
// updates the trainable ones alone, reading the frozen ones (as parallel/lm/lm_step.h's
// LmSplitStepFn does). The decode step is train_lm --generate's: one token at
// batch 1 with a KV cache of the whole context, sampling with temperature 0.8 and top-k 40.
// One intra-op thread unless FJIT_INTRA_OP_THREADS says otherwise. Times: the stepping
// thread's CPU time (one core) and the wall time (the figure with more intra-op threads).
// --compute-dtype bf16 traces the step under the layers' bf16 policy (core/nn/precision.h), as
// train_lm --compute-dtype bf16 does. --serve and --check are bench/model_step's (read there): one process timing many rounds,
// and the start bench/libtorch_step --check reproduces.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sys/resource.h>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/array_file.h"
#include "parallel/fjit.h"
#include "core/lib/param_groups.h"
#include "core/nn/lora.h"
#include "parallel/lm/lm_generate.h"

using namespace fjit;

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  DecoderConfig c;
  int steps = 5, warmup = 2, batch = 8, generate_tokens = 0, lora_rank = 0;
  std::vector<std::string> frozen_patterns;
  std::string check_file;
  bool serve = false;
  DType compute = DType::f32;  // --compute-dtype: the layers' policy (core/nn/precision.h)
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--remat") c.remat = true;
    if (std::string(argv[i]) == "--serve") serve = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--remat" || a == "--serve") {
      --i;
      continue;
    }
    const int v = std::atoi(argv[i + 1]);
    if (a == "--check") check_file = argv[i + 1];
    else if (a == "--compute-dtype" && compute_dtype_from_name(argv[i + 1], &compute)) continue;
    else if (a == "--frozen") {
      for (std::string rest = argv[i + 1]; !rest.empty();) {
        const size_t comma = std::min(rest.find(','), rest.size());
        if (comma > 0) frozen_patterns.push_back(rest.substr(0, comma));
        rest = comma < rest.size() ? rest.substr(comma + 1) : "";
      }
    } else if (a == "--lora") lora_rank = v;
    else if (a == "--steps") steps = v;
    else if (a == "--warmup") warmup = v;
    else if (a == "--batch") batch = v;
    else if (a == "--layers") c.layers = v;
    else if (a == "--dim") c.dim = v;
    else if (a == "--heads") c.heads = v;
    else if (a == "--context") c.context = v;
    else if (a == "--generate") generate_tokens = v;
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--warmup N] [--batch N] [--layers N] [--dim N] "
                           "[--heads N] [--context N] [--remat] [--generate TOKENS] [--lora RANK] "
                           "[--frozen PATTERNS] [--serve] [--check FILE] [--compute-dtype f32|bf16]\n", argv[0]);
      return 2;
    }
  }
  // The step runs in a plain jit() on this thread, which FJIT_INTRA_OP_THREADS does not reach
  // by itself (it sets pmap's replicas): apply it here, else one thread.
  set_intra_op_threads(config::is_set(config::Id::intra_op_threads)
                           ? static_cast<int>(config::intra_op_threads()) : 1);
  ArrayDict params;
  decoder_params(params, c, 1);
  if (generate_tokens > 0) {
    // Each new token is one decode step; the median over the tokens after the first.
    std::vector<double> per_token;
    for (int r = 0; r < 3; ++r) {
      const lm::Generated g = lm::generate(params, c, "A", {.new_tokens = generate_tokens, .seed = 3});
      per_token.push_back(g.seconds * 1e6 / std::max<int64_t>(1, g.new_tokens - 1));
    }
    std::printf("DECODE_US %.1f WALL_US %.1f  (%d tokens, batch 1, context %lld)\n", median(per_token),
                median(per_token), generate_tokens, static_cast<long long>(c.context));
    return 0;
  }
  ArrayDict frozen;
  if (lora_rank > 0) {
    add_lora(params, {.rank = lora_rank, .alpha = 2.0 * lora_rank, .targets = {"attn/qkv", "attn/out", "mlp/*"}, .seed = 1});
    std::tie(params, frozen) = split_trainable(params, {"*/lora_a", "*/lora_b"});
  }
  if (!frozen_patterns.empty()) {
    auto [more_frozen, trainable] = split_trainable(params, frozen_patterns);
    params = trainable;
    for (const auto& [name, a] : more_frozen) frozen.set(name, a);
  }
  auto step = jit([c, compute](const Params& p, const Params& f, const Params& s, const Tensor& x, const Tensor& y) {
    PrecisionScope precision({.compute = compute});
    auto loss_fn = [&](const Params& q) {
      Params all = f;
      for (const auto& [name, t] : q) all.set(name, t);
      return mean(softmax_cross_entropy(decoder_logits(all, c, x), y));
    };
    auto [loss, g] = value_and_grad(loss_fn)(p);
    auto [p2, s2] = AdamW{.lr = 1e-3, .b2 = 0.95, .weight_decay = 0.1}.update(p, clip_by_global_norm(g, 1.0), s);
    return std::tuple{p2, s2, loss};
  }, JitOptions{.name = "lm_step"});
  ArrayDict state = AdamW{}.init_state(params);
  Array x(DType::i32, {batch, c.context}), y(DType::i32, {batch, c.context});
  for (int64_t i = 0; i < x.size(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab);
    y.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 48) % c.vocab);
  }
  std::tuple<ArrayDict, ArrayDict, Array> out[2];
  out[0] = step(params, frozen, state, x, y);
  if (!check_file.empty()) {
    std::vector<std::pair<std::string, Array>> arrays(params.begin(), params.end());
    arrays.insert(arrays.end(), frozen.begin(), frozen.end());
    arrays.emplace_back("input/x", x);
    arrays.emplace_back("input/y", y);
    bench::write_array_file(check_file, arrays);
    std::printf("LOSSES %.6f", std::get<2>(out[0]).item<double>());
    for (int i = 0; i < 2; ++i) {
      step.run_into(out[(i + 1) % 2], std::get<0>(out[i % 2]), frozen, std::get<1>(out[i % 2]), x, y);
      std::printf(" %.6f", std::get<2>(out[(i + 1) % 2]).item<double>());
    }
    std::printf("  (%s)\n", c.describe().c_str());
    return 0;
  }
  int done = 0;  // steps run since out[0]; out[done % 2] holds the latest parameters
  std::vector<double> us, wall;
  auto time_steps = [&](int n) {
    us.clear(), wall.clear();
    for (int i = 0; i < warmup + n; ++i, ++done) {
      auto& in = out[done % 2];
      const double t0 = thread_cpu_us();
      const int64_t w0 = now_ns();
      step.run_into(out[(done + 1) % 2], std::get<0>(in), frozen, std::get<1>(in), x, y);
      const double t = thread_cpu_us() - t0;
      if (i >= warmup) us.push_back(t), wall.push_back((now_ns() - w0) * 1e-3);
    }
  };
  if (serve) {
    char line[64];
    while (std::fgets(line, sizeof line, stdin)) {
      const int n = std::atoi(line);
      if (n < 1) break;
      time_steps(n);
      std::printf("STEP_US %.1f %.1f %.1f WALL_US %.1f  (%zu steps, loss %.4f)\n", median(us),
                  *std::min_element(us.begin(), us.end()), *std::max_element(us.begin(), us.end()),
                  median(wall), us.size(), std::get<2>(out[done % 2]).item<double>());
      std::fflush(stdout);
    }
    return 0;
  }
  time_steps(steps);
  std::printf("STEP_US %.1f %.1f %.1f WALL_US %.1f  (%lld-layer d %lld decoder, batch %d x %lld, "
              "%zu steps, loss %.4f)\n",
              median(us), *std::min_element(us.begin(), us.end()), *std::max_element(us.begin(), us.end()),
              median(wall), static_cast<long long>(c.layers), static_cast<long long>(c.dim), batch,
              static_cast<long long>(c.context), us.size(), std::get<2>(out[done % 2]).item<double>());
  // The step's intermediate values (the plan's arena after buffer reuse) and the process's
  // peak resident memory.
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  int64_t trained = 0, all = 0;
  for (const auto& [name, a] : std::get<0>(out[0])) trained += a.size();
  all = trained;
  for (const auto& [name, a] : frozen) all += a.size();
  std::printf("ARENA_MB %.1f PEAK_RSS_MB %.1f  (remat %s; %lld of %lld parameters trained%s)\n",
              step.core().last_entry()->exe->arena_bytes / 1048576.0, ru.ru_maxrss / 1024.0,
              c.remat ? "on" : "off", static_cast<long long>(trained), static_cast<long long>(all),
              lora_rank > 0 ? fmt::format(", LoRA r {}", lora_rank).c_str() : "");
  return 0;
}
