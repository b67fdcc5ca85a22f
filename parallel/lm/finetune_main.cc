#include "parallel/lm/finetune_main.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/name_pattern.h"
#include "core/ir/convert.h"
#include "core/nn/lora.h"
#include "parallel/lm/lm_main.h"
#include "parallel/lm/lm_trainer.h"
#include "parallel/train/primary_work.h"
#include "parallel/train/train_main.h"
#include "parallel/train/trainer.h"

namespace fjit::lm {
namespace {

int64_t count(const ArrayDict& params) {
  int64_t n = 0;
  for (const auto& [name, a] : params) n += a.size();
  return n;
}

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

Array converted(const Array& a, DType t) {
  Array out(t, a.shape());
  for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(t, out.raw(), i, a.at_as_double(i));
  return out;
}

// The exported parameters in the dtypes the base stored them in (trained copies of half-
// precision weights are f32 master weights during the run).
ArrayDict as_stored(const hf::HfModel& base, ArrayDict params) {
  for (auto& [name, a] : params)
    if (base.params.contains(name) && base.params[name].dtype() != a.dtype())
      a = converted(a, base.params[name].dtype());
  return params;
}

void export_model(const Mesh& mesh, const FinetuneOptions& fo, const FinetuneStart& start,
                  const ArrayDict& trained) {
  if (!fo.lm.export_hf.empty())
    training::run_on_primary(mesh, "export to " + fo.lm.export_hf, [&] {
      hf::HfModel merged = start.base;
      merged.params = trained;
      merge_lora(merged.params);  // into each weight's dtype
      merged.params = as_stored(start.base, std::move(merged.params));
      hf::save_hf_model(fo.lm.export_hf, merged);
      fmt::print("exported the merged model to {}\n", fo.lm.export_hf);
    });
  if (!fo.export_peft.empty())
    training::run_on_primary(mesh, "adapter export to " + fo.export_peft, [&] {
      hf::HfModel adapted = start.base;
      adapted.params = trained;
      hf::save_peft_adapter(fo.export_peft, adapted,
                            std::filesystem::absolute(fo.lm.init_from).lexically_normal().string());
      fmt::print("exported the adapters (PEFT) to {}\n", fo.export_peft);
    });
  std::fflush(stdout);
}

int finetune(Mesh& mesh, const FinetuneOptions& fo) {
  const bool primary = mesh.is_primary();
  // Before the base model is read: an unusable export path fails now, not after training.
  training::check_run_outputs(mesh, {.dirs = {{"--export-peft", fo.export_peft},
                                              {"--export-hf", fo.lm.export_hf},
                                              {"--checkpoint-dir", fo.lm.checkpoint_dir}},
                                     .files = {}});
  FinetuneStart start = finetune_start(fo);
  LmTrainer trainer(mesh, start.options, std::move(start.params));
  const LmOptions& o = trainer.options();
  const int64_t trained = count(trainer.trainable_params()), all = trained + count(trainer.frozen_params());
  if (primary) {
    const io::TokenFile& f = trainer.tokens();
    fmt::print("fjit finetune_lm: {} replica(s) ({}) | from {}\ncorpus {}: {} tokens, {:.0f}% kept for "
               "validation | token file {}\n{}\n{} | training {} of {} parameters ({:.2f}%){}\n",
               mesh.size(), mesh.description(), hf::describe(start.base), o.corpus, f.size(),
               100 * o.validation_fraction, f.path(), describe(o),
               o.adapters.empty() ? "full fine-tuning" : o.adapters, trained, all,
               all > 0 ? 100.0 * trained / all : 0.0,
               start.adapted.empty() ? "" : fmt::format(" | {} layers adapted", start.adapted.size()));
    std::fflush(stdout);
  }
  run_and_report(trainer, mesh);
  export_model(mesh, fo, start, trainer.params());
  return 0;
}

}  // namespace

FinetuneStart finetune_start(const FinetuneOptions& fo) {
  FinetuneStart s;
  s.base = hf::load_hf_model(fo.lm.init_from);
  s.options = fo.lm;
  s.options.model = s.base.config;
  s.options.model.remat = fo.lm.model.remat;
  s.options.trainable = finetune_trainable(fo);
  s.options.adapters = describe_adapters(fo);
  s.params = s.base.params;
  if (fo.lora_rank > 0)
    s.adapted = add_lora(s.params, LoraOptions{.rank = fo.lora_rank, .alpha = fo.lora_alpha,
                                              .targets = fo.lora_targets, .seed = fo.lm.seed});
  // Mixed precision as usual: a trained half-precision weight gets an f32 master copy (AdamW's
  // update and state in f32); the frozen ones stay as stored and the layers cast them as they
  // read them. Exports go back to the stored dtypes.
  for (auto& [name, a] : s.params)
    if (is_half(a.dtype()) && (s.options.trainable.empty() || name_matches_any(s.options.trainable, name)))
      a = converted(a, DType::f32);
  return s;
}

int finetune_main(int argc, char** argv) {
  ParsedFinetuneOptions parsed = parse_finetune_options(argc, argv);
  if (parsed.help) {
    std::printf("%s", finetune_usage(argv[0]).c_str());
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], parsed.error.c_str());
    return 2;
  }
  return training::run_training_job(argc, argv, [&](Mesh& mesh) { return finetune(mesh, parsed.options); });
}

}  // namespace fjit::lm
