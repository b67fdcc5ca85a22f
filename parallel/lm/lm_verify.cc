#include "parallel/lm/lm_verify.h"

#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/io/checkpoint.h"
#include "parallel/train/zero.h"

namespace fjit::lm {

training::VerifyResult verify_lm_interval(const std::string& from, const std::string& to,
                                          const LmTrainerFactory& make) {
  std::unique_ptr<LmTrainer> trainer;  // built when the checkpoints have passed their checks
  auto t = [&]() -> LmTrainer& {
    if (!trainer) trainer = make();
    return *trainer;
  };
  return training::verify_interval(
      from, to,
      training::Replay{.load = [&](const std::string& path) { t().load(path); },
                       .steps_done = [&] { return t().steps_done(); },
                       .step = [&] { return t().step().has_value(); },
                       .last_record = [&] { return t().step_records().back(); },
                       .state = [&] {
                         // ZeRO: the whole state, as the checkpoint holds it.
                         const LmTrainer& r = t();
                         const ArrayDict params = r.trainable_params();
                         return training::checkpoint_tensors(
                             params, r.options().zero_stage
                                         ? training::zero_gather_state(r.optimizer_state(), params, r.mesh())
                                         : r.optimizer_state());
                       }});
}

LmTrainerFactory lm_trainer_factory_of(const std::string& checkpoint) {
  const io::Checkpoint ck = io::load_checkpoint(checkpoint);
  const std::string format = io::metadata_str(ck, "format");
  if (format != kLmCheckpointFormat)
    throw std::runtime_error(fmt::format("{}: not a checkpoint of the language-model trainer (format '{}', "
                                         "expected '{}')", checkpoint, format, kLmCheckpointFormat));
  const std::string line = io::metadata_str(ck, "command_line");
  if (line.empty())
    throw std::runtime_error(fmt::format("{}: records no command line (a run not started by train_lm), so "
                                         "the run cannot be rebuilt from it: verify it with "
                                         "lm::verify_lm_interval and a factory of its trainer", checkpoint));
  std::vector<std::string> args = {"train_lm"};
  for (size_t pos = 0;;) {
    const size_t nl = line.find('\n', pos);
    args.push_back(line.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ParsedLmOptions parsed = parse_lm_options(static_cast<int>(argv.size()), argv.data());
  if (!parsed.error.empty())
    throw std::runtime_error(fmt::format("{}: its recorded command line does not parse: {}", checkpoint, parsed.error));
  LmOptions o = std::move(parsed.options);
  if (o.token_file.empty()) {
    const std::filesystem::path beside = std::filesystem::path(checkpoint).parent_path() / "corpus.tokens";
    if (std::filesystem::exists(beside)) o.token_file = beside.string();
  }
  o.checkpoint_dir.clear();
  o.resume = false;
  o.export_hf.clear();
  o.prompt.reset();
  o.log_every = 0;
  o.eval_every = 0;
  o.max_steps = -1;
  const int replicas = static_cast<int>(io::metadata_int(ck, "replicas"));
  if (replicas < 1)
    throw std::runtime_error(fmt::format("{}: records {} replicas", checkpoint, replicas));
  return [o, replicas] { return std::make_unique<LmTrainer>(Mesh::threads(replicas), o); };
}

}  // namespace fjit::lm
