// What the parsed training options mean for a run (declared in train_options.h): its summary
// line, its learning-rate schedule, and the configuration a checkpoint records. Kept apart
// from the parser (train_options.cc), which then needs none of fjit's library and
// builds alone into its fuzzer (tests/fuzz/).
#include "parallel/train/train_options.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/runtime/jit_core.h"

namespace fjit::training {

bool loss_scaling_on(const TrainOptions& o) { return !o.loss_scale.empty() || o.grad_dtype == "f16"; }

std::string describe(const TrainOptions& o) {
  const std::string model = o.model == "mlp" ? "mlp " + join(o.layers)
                            : fmt::format("{} dropout {}", o.model, o.dropout);
  return fmt::format("{} | epochs {} | global batch {}{}{} | AdamW lr {} ({}{}) wd {} | seed {} | "
                     "checks {} on failure {}",
                     model, o.epochs, o.batch_size,
                     o.micro_batches > 1 ? fmt::format(" in {} micro-batches", o.micro_batches) : "",
                     o.examples_per_process.empty()
                         ? ""
                         : fmt::format(" | examples per process {}", join(o.examples_per_process)),
                     o.lr, o.lr_schedule,
                     o.warmup_steps > 0 ? fmt::format(", {} warm-up steps", o.warmup_steps) : "",
                     o.weight_decay, o.seed,
                     check_mode_name(o.checks.value_or(default_check_mode())),
                     check_policy_name(o.on_check_failure.value_or(default_check_policy()))) +
         (loss_scaling_on(o) ? fmt::format(" | gradients {} loss scale {}", o.grad_dtype,
                                           o.loss_scale.empty() ? "dynamic" : o.loss_scale)
                             : "") +
         (o.compute_dtype == "f32" ? "" : " | compute " + o.compute_dtype);
}

Schedule learning_rate_schedule(const TrainOptions& o, int64_t total_steps) {
  const int64_t after = std::max<int64_t>(1, total_steps - o.warmup_steps);
  Schedule s = o.lr_schedule == "cosine" ? Schedule::cosine(o.lr, after)
               : o.lr_schedule == "step" ? Schedule::step_decay(o.lr, std::max<int64_t>(1, after / 3), 0.1)
                                         : Schedule::constant(o.lr);
  return o.warmup_steps > 0 ? Schedule::warmup(o.warmup_steps, s) : s;
}

io::RunConfig run_config(const TrainOptions& o) {
  io::RunConfig c = {{"optimizer", fmt::format("AdamW lr {} weight decay {}", o.lr, o.weight_decay)},
                     {"lr_schedule", o.lr_schedule},
                     {"warmup_steps", std::to_string(o.warmup_steps)},
                     {"epochs", std::to_string(o.epochs)},
                     {"micro_batches", std::to_string(o.micro_batches)}};
  // The model, with what shapes it: an MLP's layers, the other models' dropout rate. The data
  // each process reads (and so the data position) depends on examples_per_process: recorded
  // only when set.
  c["model"] = o.model == "mlp" ? "mlp " + join(o.layers) : fmt::format("{} dropout {}", o.model, o.dropout);
  if (!o.examples_per_process.empty()) c["examples_per_process"] = join(o.examples_per_process);
  // Loss scaling: recorded only when on, so that earlier checkpoints still resume.
  if (loss_scaling_on(o)) {
    c["grad_dtype"] = o.grad_dtype;
    c["loss_scale"] = o.loss_scale.empty() ? "dynamic" : o.loss_scale;
  }
  // The layers' precision policy changes every step's bits: recorded when not f32.
  if (o.compute_dtype != "f32") c["compute_dtype"] = o.compute_dtype;
  return c;
}

}  // namespace fjit::training
