// The Trainer's checkpoints (declared in parallel/train/trainer.h): what a checkpoint holds
// of a run, writing it on the primary replica, and reading it back on every rank.
#include <filesystem>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/io/state_hash.h"
#include "parallel/train/primary_work.h"
#include "parallel/train/trainer.h"
#include "parallel/train/zero.h"

namespace fjit::training {
namespace {

constexpr const char* kFormat = "fjit-mlp-classifier-v1";

}  // namespace

io::NamedArrays checkpoint_tensors(const ArrayDict& params, const ArrayDict& state) {
  io::NamedArrays out;
  for (const auto& [name, a] : params) out.emplace_back("params/" + name, a);
  for (const auto& [name, a] : state) out.emplace_back("opt/" + name, a);
  return out;
}

void read_checkpoint_tensors(const io::Checkpoint& ck, ArrayDict& params, ArrayDict& state) {
  ArrayDict loaded_params, loaded_state;
  for (const auto& [name, a] : params) loaded_params.set(name, *ck.find("params/" + name));
  for (const auto& [name, a] : state) loaded_state.set(name, *ck.find("opt/" + name));
  params = std::move(loaded_params);
  state = std::move(loaded_state);
}

void check_update_count(const io::Checkpoint& ck, int64_t steps, int64_t skipped) {
  const Array* counter = ck.find("opt/step");
  if (counter == nullptr) return;
  const int64_t updates = counter->dtype() == DType::i32 && counter->size() == 1
                              ? int64_t{counter->data<int32_t>()[0]}
                              : -1;
  if (updates != steps - skipped)
    throw std::runtime_error(fmt::format(
        "{}: the header says step {} ({} of them skipped, so {} updates) but the tensor "
        "opt/step counts {} updates: header and state disagree", ck.path, steps, skipped,
        steps - skipped, updates));
}

void check_run_outputs(const Mesh& mesh, const io::OutputPaths& paths) {
  run_on_primary(mesh, "output path check", [&] { io::check_output_paths(paths); });
}

void Trainer::save(const std::string& path) {
  // ZeRO: the replicas' shards put back into the whole state (an all-gather every process
  // joins), so the file is the replicated run's and any replica count can resume from it.
  // At stage 3 the parameters are gathered too.
  const ArrayDict whole_params = params();
  const ArrayDict state_to_save = whole_optimizer_state();
  // The agreement doubles as the barrier: nobody reads the file before rank 0 has renamed it
  // into place, and a failed save fails on every rank instead of leaving the others waiting.
  run_on_primary(mesh_, "checkpoint save " + path, [&] {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    io::Checkpoint ck;
    ck.tensors = checkpoint_tensors(whole_params, state_to_save);
    ck.metadata = {{"format", kFormat},
                   {"step", std::to_string(steps_done_)},
                   {"epoch", std::to_string(epoch_)},
                   {"batch_in_epoch", std::to_string(batch_in_epoch_)},
                   {"skipped_steps", std::to_string(skipped_steps_)},
                   {"seed", std::to_string(options_.seed)},
                   {"batch_size", std::to_string(options_.batch_size)},
                   {"lr_schedule", schedule_.describe()}};
    if (scaler_) ck.metadata["loss_scale"] = scaler_->state();
    io::set_config(ck, run_config(options_));
    ck.metadata["replicas"] = std::to_string(mesh_.size());
    ck.metadata["step_records"] = fmt::format("{}", fmt::join(step_records_, ","));
    if (!options_.command_line.empty())
      ck.metadata["command_line"] = fmt::format("{}", fmt::join(options_.command_line, "\n"));
    const std::string chain = io::set_chain(ck, chain_, steps_done_);
    io::save_checkpoint(path, ck);
    chain_ = chain;
  });
  step_records_.clear();
}

void Trainer::load(const std::string& path) {
  // Replica 0 reads and verifies the file; the other processes (MPI ranks) receive its tensors and
  // position by broadcast, so they need not see the file, and an error on rank 0 fails every
  // rank instead of leaving the others waiting in the next collective.
  // Shapes to receive into; with ZeRO the whole state, resharded below for this mesh.
  ArrayDict params = this->params();
  ArrayDict state = options_.zero_stage ? AdamW{}.init_state(params) : optimizer_state();
  uint64_t position[5] = {0, 0, 0, 0, 0};  // step, epoch, batch, seed, skipped steps
  char scale_state[64] = {};  // the loss scale's state, when the run scales its loss
  std::string chain;          // the checkpoint's link (the primary's)
  run_on_primary(mesh_, "checkpoint load " + path, [&] {
    io::Checkpoint ck = io::load_checkpoint(path);
    io::require_checksum(ck, "so it cannot be resumed from");
    if (io::metadata_str(ck, "format") != kFormat)
      throw std::runtime_error(path + ": not a checkpoint of this trainer (format '" +
                               io::metadata_str(ck, "format") + "', expected '" + kFormat + "')");
    if (!options_.allow_config_change) {
      io::check_model(ck, run_config(options_).at("model"));
      io::check_config(ck, run_config(options_),
                       "pass --allow-config-change to resume with this run's settings anyway");
    }
    io::check_compatible(ck, checkpoint_tensors(params, state));
    const int64_t batch_size = io::metadata_int(ck, "batch_size");
    if (batch_size != options_.batch_size)
      throw std::runtime_error(fmt::format("{}: saved with global batch {}, this run uses {}: the "
                                           "data position would not carry over",
                                           path, batch_size, options_.batch_size));
    // Another replica count (an elastic restart on fewer hosts, say): the data position is
    // a global batch's index and the optimizer state is whole on every replica, so both carry
    // over; the global batch must divide over the new count, so that every replica's share
    // of it stays whole.
    const std::string saved_replicas = io::metadata_str(ck, "replicas");
    if (!saved_replicas.empty() && saved_replicas != std::to_string(mesh_.size()) &&
        options_.batch_size % mesh_.size() != 0)
      throw std::runtime_error(fmt::format(
          "{}: saved by {} replicas, resumed by {}: the global batch of {} does not divide over {} "
          "replicas; resume with a replica count that divides it", path, saved_replicas,
          mesh_.size(), options_.batch_size, mesh_.size()));
    const int64_t batch = io::metadata_int(ck, "batch_in_epoch");
    if (batch > batches_per_epoch())
      throw std::runtime_error(fmt::format("{}: batch {} of an epoch of {} batches", path, batch,
                                           batches_per_epoch()));
    position[0] = static_cast<uint64_t>(io::metadata_int(ck, "step"));
    position[1] = static_cast<uint64_t>(io::metadata_int(ck, "epoch"));
    position[2] = static_cast<uint64_t>(batch);
    position[3] = static_cast<uint64_t>(io::metadata_int(ck, "seed"));
    const int64_t step = io::metadata_int(ck, "step"), epoch = io::metadata_int(ck, "epoch");
    if (step != epoch * batches_per_epoch() + batch)
      throw std::runtime_error(fmt::format(
          "{}: the header says step {} but epoch {} batch {} (of {} batches per epoch) is step {}: "
          "the header contradicts itself", path, step, epoch, batch, batches_per_epoch(),
          epoch * batches_per_epoch() + batch));
    const int64_t skipped = io::metadata_int(ck, "skipped_steps");
    check_update_count(ck, step, skipped);
    position[4] = static_cast<uint64_t>(skipped);
    chain = io::verify_chain(ck, step);
    read_checkpoint_tensors(ck, params, state);
    if (scaler_) {
      const std::string saved = io::metadata_str(ck, "loss_scale");
      if (saved.empty() || saved.size() >= sizeof scale_state)
        throw std::runtime_error(path + ": no loss scale in the checkpoint of a run that scales its loss");
      saved.copy(scale_state, saved.size());
    }
  });
  if (Communicator* pc = mesh_.process_comm()) {
    pc->broadcast(position, sizeof position, 0);
    pc->broadcast(scale_state, sizeof scale_state, 0);
    params = mesh_.replicate(params);
    state = mesh_.replicate(state);
  }
  if (options_.zero_stage) state = zero_shard_state(state, params, mesh_);
  if (options_.zero_stage == 3) params = zero_shard_params(params, mesh_);
  // The data order continues from the checkpoint's seed, whatever this run was given.
  const uint64_t seed = position[3];
  if (seed != options_.seed) {
    options_.seed = seed;
    batches_ = make_batches(train_, options_, mesh_);
  }
  if (scaler_) scaler_->set_state(scale_state);
  buffers_[current_] = TrainStepOut{std::move(params), std::move(state), Array(), Array(), Array()};
  buffers_conformed_ = false;
  steps_done_ = static_cast<int64_t>(position[0]);
  skipped_steps_ = static_cast<int64_t>(position[4]);
  if (mesh_.is_primary()) chain_ = chain;
  step_records_.clear();
  epoch_ = static_cast<int64_t>(position[1]);
  batch_in_epoch_ = static_cast<int64_t>(position[2]);
  batches_.seek(epoch_, batch_in_epoch_);
}

void Trainer::save_at_step() {
  save(io::checkpoint_path(options_.checkpoint_dir, steps_done_));
}

}  // namespace fjit::training
