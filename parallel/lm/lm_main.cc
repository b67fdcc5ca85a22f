#include "parallel/lm/lm_main.h"

#include <cmath>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "core/base/metrics.h"
#include "core/hf/hf_checkpoint.h"
#include "core/io/checkpoint.h"
#include "core/io/tokenizer.h"
#include "core/runtime/step_checks.h"
#include "parallel/lm/lm_generate.h"
#include "parallel/lm/lm_trainer.h"
#include "parallel/train/primary_work.h"
#include "parallel/train/train_main.h"

namespace fjit::lm {
namespace {

int train(Mesh& mesh, LmOptions options) {
  const bool primary = mesh.is_primary();
  LmTrainer trainer(mesh, std::move(options));
  const LmOptions& o = trainer.options();
  // A model Hugging Face has no layout for is refused now, not after training.
  if (!o.export_hf.empty()) (void)hf::hf_model_for(o.model, trainer.params());
  // At ZeRO stage 3 params() gathers the shards, a collective every process joins: never
  // inside a primary-only block.
  const int64_t parameters = parameter_count(trainer.params());
  if (primary) {
    const io::TokenFile& f = trainer.tokens();
    fmt::print("fjit train_lm: {} replica(s) ({}) | corpus {}: {} tokens (bytes), {:.0f}% kept for "
               "validation | token file {}\n{} | {:.2f}M parameters\n",
               mesh.size(), mesh.description(), o.corpus, f.size(), 100 * o.validation_fraction,
               f.path(), describe(o), parameters * 1e-6);
    std::fflush(stdout);
  }
  run_and_report(trainer, mesh);
  if (!o.export_hf.empty()) {
    const ArrayDict params = trainer.params();  // every process joins (above)
    training::run_on_primary(mesh, "export to " + o.export_hf, [&] {
      const hf::HfModel model = hf::hf_model_for(o.model, params);
      hf::save_hf_model(o.export_hf, model);
      fmt::print("exported {} to {}\n", hf::describe(model), o.export_hf);
      std::fflush(stdout);
    });
  }
  return 0;
}

int sample(Mesh& mesh, const LmOptions& o) {
  if (!mesh.is_primary()) return 0;  // one process generates
  const std::string path = io::latest_checkpoint(o.checkpoint_dir);
  if (path.empty()) throw std::runtime_error("no checkpoint in " + o.checkpoint_dir + " to generate from");
  io::Checkpoint ck = io::load_checkpoint(path);
  DecoderConfig model = o.model;
  model.vocab = io::ByteTokenizer::kVocab;
  ArrayDict expected, params;
  decoder_params(expected, model, 0);
  io::NamedArrays want;
  for (const auto& [name, a] : expected) want.emplace_back("params/" + name, a);
  for (const auto& [name, a] : ck.tensors)
    if (name.rfind("opt/", 0) == 0) want.emplace_back(name, a);  // the optimizer state is not needed
  io::check_compatible(ck, want);
  for (const auto& [name, a] : expected) params.set(name, *ck.find("params/" + name));
  const Generated g = generate(params, model, *o.prompt,
                               {.new_tokens = o.new_tokens, .temperature = o.temperature,
                                .top_k = o.top_k, .seed = o.seed});
  fmt::print("{}{}\n", *o.prompt, g.text);
  std::fflush(stdout);
  fmt::print(stderr, "[{} prompt + {} new tokens from {} | {:.1f} tokens/s | {} compiled step(s)]\n",
             g.prompt_tokens, g.new_tokens, path,
             g.seconds > 0 ? (g.new_tokens - 1) / g.seconds : 0.0, g.compiles);
  return 0;
}

}  // namespace

double run_and_report(LmTrainer& trainer, const Mesh& mesh) {
  const int64_t start = now_ns();
  const double bits = trainer.run();
  const double seconds = (now_ns() - start) * 1e-9;
  if (mesh.is_primary()) {
    const LmOptions& o = trainer.options();
    const int64_t steps = trainer.steps_this_run();
    fmt::print("\n{}\ntrained {} steps in {} ({:.0f} tokens/s)", metrics_report(), steps,
               format_duration(seconds),
               seconds > 0 ? steps * o.batch_size * o.model.context / seconds : 0.0);
    if (!o.checkpoint_dir.empty()) fmt::print("; checkpoints in {}", o.checkpoint_dir);
    fmt::print("\nfinal validation: {:.4f} bits/{}\n", bits, o.model.vocab == 256 ? "byte" : "token");
    std::fflush(stdout);
  }
  return bits;
}

int lm_main(int argc, char** argv) {
  ParsedLmOptions parsed = parse_lm_options(argc, argv);
  if (parsed.help) {
    std::printf("%s", lm_usage(argv[0]).c_str());
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], parsed.error.c_str());
    return 2;
  }
  parsed.options.command_line.assign(argv + 1, argv + argc);
  return training::run_training_job(argc, argv, [&](Mesh& mesh) {
    return parsed.options.prompt ? sample(mesh, parsed.options) : train(mesh, std::move(parsed.options));
  });
}

}  // namespace fjit::lm
