#include "parallel/train/train_options.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "parallel/train/cli_options.h"

namespace fjit::training {
namespace {

using cli::parse_number;

// A comma-separated list of integers >= min.
bool parse_counts(const std::string& s, std::vector<int64_t>& out, int64_t min) {
  out.clear();
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    int64_t v = 0;
    if (!parse_number(s.substr(pos, comma - pos), v) || v < min) return false;
    out.push_back(v);
    pos = comma + 1;
  }
  return true;
}

bool parse_layers(const std::string& s, std::vector<int64_t>& out) {
  return parse_counts(s, out, 1) && out.size() >= 2;
}

// Builds the CLI11 app over `o`. Every value goes through a strict parser of ours.
void add_options(CLI::App& app, TrainOptions& o, const std::vector<std::string>& models) {
  cli::OptionAdder add(app);
  auto value = [&add](const std::string& name, const std::string& type, const std::string& help,
                      std::function<bool(const std::string&)> parse, const std::string& want) {
    add.value(name, type, help, std::move(parse), want);
  };
  auto integer = [&add](const std::string& name, auto& field, int64_t min, const std::string& help) {
    add.integer(name, field, min, help);
  };
  auto real = [&add](const std::string& name, double& field, const std::string& help) {
    add.real(name, field, help);
  };
  auto choice = value;
  integer("--epochs", o.epochs, 1, "epochs to train");
  integer("--batch-size", o.batch_size, 1, "global batch, split over the replicas");
  integer("--micro-batches", o.micro_batches, 1, "gradient accumulation: micro-batches per step");
  real("--lr", o.lr, "AdamW (peak) learning rate");
  choice("--lr-schedule", "S", "cosine (decays to 0 over the run), constant, or step (x0.1 after each third of the run)",
         [&o](const std::string& v) {
           o.lr_schedule = v;
           return v == "cosine" || v == "constant" || v == "step";
         }, "cosine, constant or step");
  integer("--warmup-steps", o.warmup_steps, 0, "linear learning-rate warm-up before the schedule");
  real("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  real("--max-grad-norm", o.max_grad_norm, "a gradient norm at or above this fails a check");
  value("--seed", "N", fmt::format("seed of the initial parameters and the data order ({})", o.seed),
        [&o](const std::string& v) { return parse_number(v, o.seed); }, "an unsigned integer");
  integer("--replicas", o.replicas, 1, "thread replicas without mpirun (FJIT_REPLICAS)");
  value("--data-dir", "DIR", "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] files "
        "(default /usr/share/datasets/fashion-mnist)",
        [&o](const std::string& v) { o.data_dir = v; return true; }, "");
  const std::string model_names = models.empty() ? "a model name" : join_choices(models);
  choice("--model", "M", model_names + " (" + o.model + ")", [&o, models](const std::string& v) {
           o.model = v;
           return models.empty() ? !v.empty()
                                 : std::find(models.begin(), models.end(), v) != models.end();
         }, model_names);
  real("--dropout", o.dropout, "dropout rate of the models that have dropout");
  value("--layers", "A,B,...", "the MLP's layer sizes (" + join(o.layers) + ")",
        [&o](const std::string& v) { return parse_layers(v, o.layers); }, "sizes like 784,512,256,10");
  value("--examples-per-process", "A,B,...",
        "each process (MPI rank) trains on its own part of the training set: the first A "
        "examples on rank 0, the next B on rank 1, ...; a rank whose part runs out joins the "
        "epoch's remaining steps with zero rows (default: every rank reads its rows of each "
        "global batch)",
        [&o](const std::string& v) { return parse_counts(v, o.examples_per_process, 0); },
        "counts like 30000,20000");
  value("--checkpoint-dir", "DIR", "write checkpoints here (none)",
        [&o](const std::string& v) { o.checkpoint_dir = v; return true; }, "");
  integer("--checkpoint-every", o.checkpoint_every, 0, "steps between checkpoints; 0 = at the end only");
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --checkpoint-dir");
  app.add_flag("--allow-config-change", o.allow_config_change,
               "resume even if the model, optimizer or schedule differ from the checkpoint's");
  add.check_options(o.checks, o.on_check_failure);
  integer("--log-every", o.log_every, 0, "steps between progress lines; 0 = per epoch only");
  value("--log-dir", "DIR", "write the run's scalars here every --log-every steps, as JSON lines "
        "(scalars.jsonl) and a TensorBoard event file (none)",
        [&o](const std::string& v) { o.log_dir = v; return !v.empty(); }, "a directory");
  integer("--max-steps", o.max_steps, 0, "stop after N steps in all");
  integer("--eval-batch-size", o.eval_batch_size, 1, "test-set evaluation batch");
  add.loss_scale_options(o.grad_dtype, o.loss_scale, o.loss_scale_growth_interval);
  add.compute_dtype_option(o.compute_dtype);
  integer("--divergence-check-every", o.divergence_check_every, 0,
          "compare replicas' parameters every K steps (0 = off)");
  integer("--sentinel", o.sentinel_every, 0,
          "every K steps each replica recomputes the next replica's gradient share and compares "
          "(silent data corruption; 0 = off)");
  integer("--zero", o.zero_stage, 0, "ZeRO stage: 1 shards the optimizer state over the replicas, 2 also "
          "reduce-scatters the gradients, 3 also shards the parameters (0 = off)");
}

std::unique_ptr<CLI::App> make_app(const std::string& program, TrainOptions& o,
                                   const std::vector<std::string>& models) {
  auto app = std::make_unique<CLI::App>("Trains a classifier on Fashion-MNIST, data-parallel over the replicas.\n"
               "  mpirun -np N " + program + " [options]   (one replica per rank)", program);
  app->footer("Environment: FJIT_LOG_LEVEL, FJIT_CHECKS, FJIT_ON_CHECK_FAILURE, FJIT_DUMP_DIR, "
             "FJIT_TIMELINE, ...");
  app->allow_windows_style_options(false);
  add_options(*app, o, models);
  return app;
}

}  // namespace

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string join_choices(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

ParsedOptions parse_train_options(int argc, char** argv, TrainOptions defaults,
                                  const std::vector<std::string>& models) {
  ParsedOptions r;
  r.options = std::move(defaults);
  std::unique_ptr<CLI::App> app = make_app(argc > 0 ? argv[0] : "train", r.options, models);
  r.error = cli::parse(*app, argc, argv, &r.help);
  if (r.error.empty() && !r.help && r.options.resume && r.options.checkpoint_dir.empty())
    r.error = "--resume needs --checkpoint-dir";
  if (r.error.empty() && !r.help && r.options.dropout >= 1.0)
    r.error = "--dropout must be below 1";
  return r;
}

std::string train_usage(const char* program, const TrainOptions& d,
                        const std::vector<std::string>& models) {
  TrainOptions shown = d;
  return make_app(program, shown, models)->help();
}

}  // namespace fjit::training
