// What one replica holds of the language model's training state under ZeRO stages 0-3 at 1,
// 2 and 4 replicas: the bytes of the arrays themselves (the decoder's parameters from
// decoder_params, the AdamW state from AdamW::init_state or zero_init_state, the parameter
// shards from zero_shard_params), divided by the replicas a process holds. Plain main: prints a
// Markdown table. The model is train_lm's default decoder unless --layers/--dim are given:
//   build/bench/zero_memory [--layers L] [--dim D]
//
// Columns: parameters held between steps; optimizer state held; the averaged gradient a replica
// holds for its update (whole at stages 0 and 1, its 1/N block after the reduce-scatter at 2
// and 3). The local gradient the backward pass writes before the reduction is the whole model's
// at every stage and is not counted, nor are the whole parameters stage 3 gathers for a while
// (parallel/train/zero.h). The language model's step implements stages 0 to 3
// (train_lm --zero S); bench/zero_rss.cc measures the processes' peak resident memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/nn/decoder.h"
#include "parallel/mesh.h"
#include "parallel/train/zero.h"

namespace {

int64_t bytes_of(const fjit::ArrayDict& d) {
  int64_t b = 0;
  for (const auto& kv : d) b += static_cast<int64_t>(kv.second.nbytes());
  return b;
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  fjit::DecoderConfig c;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--layers") == 0) c.layers = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--dim") == 0) c.dim = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--layers L] [--dim D]\n", argv[0]);
      return 2;
    }
  }
  fjit::ArrayDict params;
  fjit::decoder_params(params, c, 0);
  int64_t numel = 0;
  for (const auto& kv : params) numel += kv.second.size();
  std::printf("decoder %s: %lld parameters (f32)\n\n", c.describe().c_str(), static_cast<long long>(numel));
  std::printf("| replicas | stage | parameters MiB | optimizer state MiB | averaged gradient MiB | total MiB |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  const int64_t whole_params = bytes_of(params);
  const int64_t whole_state = bytes_of(fjit::AdamW{}.init_state(params));
  for (int n : {1, 2, 4}) {
    const fjit::Mesh mesh = fjit::Mesh::threads(n);
    // Per replica: what this process's arrays hold, over its replicas.
    const int64_t sharded_state = bytes_of(fjit::training::zero_init_state(params, mesh));
    const int64_t step_counter = static_cast<int64_t>(sizeof(int32_t));
    const int64_t state_shard = (sharded_state - step_counter) / n + step_counter;
    const int64_t param_shard = bytes_of(fjit::training::zero_shard_params(params, mesh)) / n;
    for (int stage = 0; stage <= 3; ++stage) {
      const int64_t p = stage == 3 ? param_shard : whole_params;
      const int64_t s = stage == 0 ? whole_state : state_shard;
      const int64_t g = stage >= 2 ? param_shard : whole_params;
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.2f |\n", n, stage, mib(p), mib(s), mib(g), mib(p + s + g));
    }
  }
  return 0;
}
