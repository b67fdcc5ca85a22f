#include "parallel/lm/lm_verify.h"

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
                         return training::checkpoint_tensors(t().trainable_params(), t().optimizer_state());
                       }});
}

}  // namespace fjit::lm
