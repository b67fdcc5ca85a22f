#include "parallel/lm/lm_verify.h"

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
                         return training::checkpoint_tensors(
                             r.trainable_params(),
                             r.options().zero_stage
                                 ? training::zero_gather_state(r.optimizer_state(), r.trainable_params(), r.mesh())
                                 : r.optimizer_state());
                       }});
}

}  // namespace fjit::lm
