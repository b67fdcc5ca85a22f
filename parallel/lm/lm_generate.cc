#include "parallel/lm/lm_generate.h"

#include <stdexcept>

#include "core/base/metrics.h"
#include "core/io/tokenizer.h"
#include "core/runtime/jit.h"
#include "core/trace/random.h"

namespace fjit::lm {
namespace {

// The next token of every sequence from logits [B, V].
Tensor sample(const Tensor& logits, const Tensor& key, const GenerateOptions& o) {
  if (o.temperature <= 0) return argmax(logits, -1);
  Tensor scaled = logits * (1.0 / o.temperature);
  if (o.top_k > 0 && o.top_k < logits.dim(-1)) {
    auto [values, indices] = top_k(scaled, o.top_k);
    const Tensor kth = slice(values, {0, o.top_k - 1}, {values.dim(0), o.top_k});  // [B, 1]
    scaled = where(scaled < kth, full(scaled.dtype(), {}, -1e30), scaled);
  }
  return categorical(key, scaled, -1);
}

}  // namespace

Generated generate(const ArrayDict& params, const DecoderConfig& model, const std::string& prompt,
                   const GenerateOptions& o) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty");
  std::vector<int32_t> ids = io::ByteTokenizer().encode(prompt);
  if (static_cast<int64_t>(ids.size()) >= model.context)
    ids.erase(ids.begin(), ids.end() - (model.context - 1));
  auto step = jit([&model, &o](const Params& p, const TensorDict& cache, const Tensor& token,
                               const Tensor& pos, const Tensor& seed) {
    DecoderStep s = decoder_step(p, model, token, pos, cache);
    const Tensor key = fold_in(fold_in(PRNGKey(0), seed), pos);  // i32 scalars
    return std::tuple{reshape(cast(sample(s.logits, key, o), DType::i32), {1, 1}), s.cache};
  });
  // Double-buffered: step p reads the caches of outs[cur] and writes outs[1 - cur].
  std::tuple<Array, ArrayDict> outs[2] = {{Array(), decoder_cache(model, 1)}, {Array(), ArrayDict()}};
  int cur = 0;
  Array token(DType::i32, {1, 1}), pos(DType::i32, {}), seed(DType::i32, {});
  seed.data<int32_t>()[0] = static_cast<int32_t>(o.seed & 0x7fffffff);
  Generated g;
  g.prompt_tokens = static_cast<int64_t>(ids.size());
  std::vector<int32_t> produced;
  int64_t t0 = 0;
  for (int64_t p = 0; p < model.context; ++p) {
    const bool in_prompt = p < g.prompt_tokens;
    if (!in_prompt && static_cast<int64_t>(produced.size()) >= o.new_tokens) break;
    if (p == g.prompt_tokens) t0 = now_ns();
    token.data<int32_t>()[0] = in_prompt ? ids[p] : produced.back();
    pos.data<int32_t>()[0] = static_cast<int32_t>(p);
    step.run_into(outs[1 - cur], params, std::get<1>(outs[cur]), token, pos, seed);
    cur = 1 - cur;
    if (p + 1 >= g.prompt_tokens) produced.push_back(std::get<0>(outs[cur]).data<int32_t>()[0]);
  }
  g.seconds = (now_ns() - t0) * 1e-9;
  g.new_tokens = static_cast<int64_t>(produced.size());
  g.text = io::ByteTokenizer().decode(produced);
  g.compiles = step.core().compile_count();
  return g;
}

}  // namespace fjit::lm
