#include "lib/train_loop.h"

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace fjit::examples {
namespace {

constexpr const char* kFormat = "fjit-mlp-classifier-v1";

// Replica 0's `s` on every MPI rank.
// Process 0's string on every process (the replicas of one process share it already).
void broadcast_string(const Mesh& mesh, std::string& s) {
  Communicator* pc = mesh.process_comm();
  if (pc == nullptr) return;
  uint64_t size = s.size();
  pc->broadcast(&size, sizeof size, 0);
  s.resize(size);
  if (size > 0) pc->broadcast(s.data(), size, 0);
}

// Puts d's entries in the order of `like`'s names (same set of names).
void conform(ArrayDict& d, const ArrayDict& like) {
  if (d.empty() || d.names() == like.names()) return;
  ArrayDict out;
  for (const std::string& name : like.names()) out.set(name, d.at(name));
  d = std::move(out);
}

int64_t metadata_int(const io::Checkpoint& ck, const std::string& path, const std::string& key) {
  auto it = ck.metadata.find(key);
  if (it == ck.metadata.end())
    throw std::runtime_error(path + ": not a training checkpoint (no metadata '" + key + "')");
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(path + ": metadata '" + key + "' = '" + it->second +
                           "' is not a non-negative integer");
}

std::string metadata_str(const io::Checkpoint& ck, const std::string& key) {
  auto it = ck.metadata.find(key);
  return it == ck.metadata.end() ? std::string() : it->second;
}

ModelSpec model_spec(const TrainOptions& o) {
  ModelSpec spec;
  if (!model_from_name(o.model, &spec.kind))
    throw std::invalid_argument("Trainer: unknown model '" + o.model + "' (mlp, cnn or vit)");
  spec.layers = o.layers;
  spec.dropout = o.dropout;
  return spec;
}

// The batches this process trains on: its replicas' rows of each global batch, or with
// examples_per_process its own part of the training set in batches of its replicas' share of
// the global batch. Agrees with the other processes on the steps of an epoch.
JoinedBatches make_batches(const io::Dataset& train, const TrainOptions& o, const Mesh& mesh) {
  const std::vector<int64_t>& parts = o.examples_per_process;
  if (parts.empty())
    return JoinedBatches(mesh, io::BatchIterator(train, {.batch_size = o.batch_size, .seed = o.seed,
                                                         .shuffle = true, .drop_last = true,
                                                         .shard = mesh.data_shard()}));
  int64_t total = 0;
  for (int64_t n : parts) total += n;
  if (static_cast<int>(parts.size()) != mesh.processes() || total > train.size())
    throw std::invalid_argument(fmt::format(
        "Trainer: examples per process {} must list one count per process ({}) and add up to at "
        "most the {} training examples", join(parts), mesh.processes(), train.size()));
  const int process = mesh.process_comm() ? mesh.process_comm()->rank() : 0;
  int64_t begin = 0;
  for (int p = 0; p < process; ++p) begin += parts[p];
  const auto [first, last] = mesh.data_shard().rows(o.batch_size);
  if (last == first)
    throw std::invalid_argument(fmt::format("Trainer: a global batch of {} cannot feed {} replicas",
                                            o.batch_size, mesh.size()));
  return JoinedBatches(mesh, io::BatchIterator(train.rows(begin, begin + parts[process]),
                                               {.batch_size = last - first, .seed = o.seed,
                                                .shuffle = true, .drop_last = true,
                                                .shard = {}}));
}

}  // namespace

Mesh mesh_from_command_line(int argc, char** argv) {
  // Mesh removes the option from the argv it is given; the caller's argv stays whole for
  // the option parser.
  std::vector<char*> mesh_argv(argv, argv + argc);
  mesh_argv.push_back(nullptr);
  return Mesh::from_environment(argc, mesh_argv.data());
}

int64_t first_row_of_replica(const Mesh& mesh, const io::Batch& batch, int replica) {
  const io::Shard shard = mesh.data_shard();
  if (replica < shard.first || replica >= shard.first + shard.count) return -1;
  return io::split_rows(batch.global_rows, shard.of, replica).first -
         shard.rows(batch.global_rows).first;
}

io::NamedArrays checkpoint_tensors(const ArrayDict& params, const ArrayDict& state) {
  io::NamedArrays out;
  for (const auto& [name, a] : params) out.emplace_back("params/" + name, a);
  for (const auto& [name, a] : state) out.emplace_back("opt/" + name, a);
  return out;
}

PmapOptions Trainer::pmap_options(const char* name) const {
  PmapOptions o;
  o.jit.name = name;
  o.jit.checks = options_.checks;
  o.jit.policy = options_.on_check_failure;
  o.divergence_check_every = options_.divergence_check_every;
  return o;
}

Trainer::Trainer(Mesh mesh, TrainOptions options, io::Dataset train, io::Dataset test)
    : mesh_(std::move(mesh)),
      options_(std::move(options)),
      train_(std::move(train)),
      test_(std::move(test)),
      batches_(make_batches(train_, options_, mesh_)),
      // The schedule spans every epoch, so a run cut short by max_steps (and resumed) sees
      // the learning rates of the whole run.
      schedule_(learning_rate_schedule(options_, options_.epochs * batches_.steps_per_epoch())),
      train_step_(make_train_step(
          mesh_,
          TrainStepFn{.optimizer = AdamW{.lr = options_.lr, .weight_decay = options_.weight_decay},
                      .schedule = schedule_,
                      .micro_batches = options_.micro_batches,
                      .max_grad_norm = options_.max_grad_norm,
                      .model = model_spec(options_),
                      .seed = options_.seed},
          pmap_options("train_step"))),
      eval_step_(make_eval_step(mesh_, [this] {
        PmapOptions o = pmap_options("eval_step");
        o.divergence_check_every = 0;
        return o;
      }(), model_spec(options_))) {
  const Array& images = train_["images"];
  const int64_t features = images.rank() == 2 ? images.shape()[1] : -1;
  const int64_t inputs = options_.model != "mlp" ? 28 * 28
                         : options_.layers.empty() ? 0 : options_.layers.front();
  if ((options_.model == "mlp" && options_.layers.size() < 2) || features != inputs)
    throw std::invalid_argument(fmt::format("Trainer: images {} do not fit the {} model ({} inputs)",
                                            type_str(images.dtype(), images.shape()),
                                            options_.model, inputs));
  if (options_.batch_size < mesh_.size() * int64_t{options_.micro_batches})
    throw std::invalid_argument(fmt::format("Trainer: a global batch of {} cannot feed {} replicas "
                                            "with {} micro-batches each", options_.batch_size,
                                            mesh_.size(), options_.micro_batches));
  if (batches_.steps_per_epoch() == 0)
    throw std::invalid_argument(fmt::format("Trainer: {} training examples make no batch of {}",
                                            batches_.batches().num_examples(),
                                            batches_.batches().options().batch_size));
  ArrayDict params = mesh_.replicate(init_model(model_spec(options_), options_.seed));
  AdamW opt{.lr = options_.lr, .weight_decay = options_.weight_decay};
  ArrayDict state = opt.init_state(params);
  buffers_[0] = TrainStepOut{std::move(params), std::move(state), Array(), Array(), Array()};
  step_ = Array(DType::i32, {});
}

double Trainer::learning_rate(int64_t step) const { return schedule_(step); }

int64_t Trainer::total_steps() const {
  const int64_t all = options_.epochs * batches_per_epoch();
  return options_.max_steps >= 0 ? std::min(all, options_.max_steps) : all;
}

bool Trainer::done() const { return steps_done_ >= total_steps(); }

const io::Batch* Trainer::next_batch() {
  if (done()) return nullptr;
  // Under examples_per_process, a process whose part has run out gets its zero-row batch.
  const io::Batch* b = batches_.next();
  if (!b) {
    batches_.set_epoch(epoch_ + 1);
    b = batches_.next();
    if (!b) return nullptr;
  }
  epoch_ = b->epoch;
  batch_in_epoch_ = b->index + 1;
  ++steps_done_;
  return b;
}

StepStats Trainer::train_on(const io::Batch& batch) {
  TrainStepOut& in = buffers_[current_];
  TrainStepOut& out = buffers_[1 - current_];
  const int64_t step = steps_done_ - 1;
  step_.data<int32_t>()[0] = static_cast<int32_t>(step);
  StepResult r = train_step_.run_into(out, std::get<0>(in), std::get<1>(in), batch["images"],
                                      batch["labels"], step_);
  current_ = 1 - current_;
  if (!buffers_conformed_) {
    // The buffer the next step writes must list its arrays in the step's output order.
    conform(std::get<0>(in), std::get<0>(out));
    conform(std::get<1>(in), std::get<1>(out));
    buffers_conformed_ = true;
  }
  StepStats s;
  s.step = step;
  s.lr = static_cast<float>(learning_rate(step));
  s.epoch = batch.epoch;
  s.batch = batch.index;
  s.skipped = r.skipped;
  s.loss = std::get<2>(out).item<float>();
  s.metrics = {{"train acc", std::get<3>(out).item<float>(), true}};
  return s;
}

std::optional<StepStats> Trainer::step() {
  const io::Batch* b = next_batch();
  if (!b) return std::nullopt;
  return train_on(*b);
}

double Trainer::evaluate() {
  if (test_.size() == 0) return -1;
  return evaluate_accuracy(eval_step_, mesh_, params(), test_, options_.eval_batch_size);
}

void Trainer::save(const std::string& path) {
  int failed = 0;
  std::string error;
  if (mesh_.is_primary()) {
    try {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      io::Checkpoint ck;
      ck.tensors = checkpoint_tensors(params(), optimizer_state());
      ck.metadata = {{"format", kFormat},
                     {"step", std::to_string(steps_done_)},
                     {"epoch", std::to_string(epoch_)},
                     {"batch_in_epoch", std::to_string(batch_in_epoch_)},
                     {"seed", std::to_string(options_.seed)},
                     {"batch_size", std::to_string(options_.batch_size)},
                     {"lr_schedule", schedule_.describe()}};
      io::set_config(ck, run_config(options_));
      io::save_checkpoint(path, ck);
    } catch (const std::exception& e) {
      failed = 1;
      error = e.what();
    }
  }
  // Doubles as the barrier: nobody reads the file before rank 0 has renamed it into place,
  // and a failed save fails on every rank instead of leaving the others waiting.
  if (Communicator* pc = mesh_.process_comm()) pc->all_reduce(&failed, 1, DType::i32, ReduceOp::max);
  if (failed)
    throw std::runtime_error(mesh_.is_primary() ? error : "checkpoint save failed on rank 0: " + path);
}

void Trainer::load(const std::string& path) {
  // Replica 0 reads and verifies the file; the other processes (MPI ranks) receive its tensors and
  // position by broadcast, so they need not see the file, and an error on rank 0 fails every
  // rank instead of leaving the others waiting in the next collective.
  ArrayDict params = this->params(), state = optimizer_state();  // shapes to receive into
  uint64_t position[4] = {0, 0, 0, 0};                            // step, epoch, batch, seed
  int failed = 0;
  std::string error;
  if (mesh_.is_primary()) {
    try {
      io::Checkpoint ck = io::load_checkpoint(path);
      if (metadata_str(ck, "format") != kFormat)
        throw std::runtime_error(path + ": not a checkpoint of this trainer (format '" +
                                 metadata_str(ck, "format") + "', expected '" + kFormat + "')");
      if (!options_.allow_config_change)
        io::check_config(ck, run_config(options_),
                         "pass --allow-config-change to resume with this run's settings anyway");
      io::check_compatible(ck, checkpoint_tensors(params, state));
      const int64_t batch_size = metadata_int(ck, path, "batch_size");
      if (batch_size != options_.batch_size)
        throw std::runtime_error(fmt::format("{}: saved with global batch {}, this run uses {}: the "
                                             "data position would not carry over",
                                             path, batch_size, options_.batch_size));
      const int64_t batch = metadata_int(ck, path, "batch_in_epoch");
      if (batch > batches_per_epoch())
        throw std::runtime_error(fmt::format("{}: batch {} of an epoch of {} batches", path, batch,
                                             batches_per_epoch()));
      position[0] = static_cast<uint64_t>(metadata_int(ck, path, "step"));
      position[1] = static_cast<uint64_t>(metadata_int(ck, path, "epoch"));
      position[2] = static_cast<uint64_t>(batch);
      position[3] = static_cast<uint64_t>(metadata_int(ck, path, "seed"));
      ArrayDict loaded_params, loaded_state;
      for (const auto& [name, a] : params) loaded_params.set(name, *ck.find("params/" + name));
      for (const auto& [name, a] : state) loaded_state.set(name, *ck.find("opt/" + name));
      params = std::move(loaded_params);
      state = std::move(loaded_state);
    } catch (const std::exception& e) {
      failed = 1;
      error = e.what();
    }
  }
  if (Communicator* pc = mesh_.process_comm()) {
    pc->all_reduce(&failed, 1, DType::i32, ReduceOp::max);
    if (!failed) {
      pc->broadcast(position, sizeof position, 0);
      params = mesh_.replicate(params);
      state = mesh_.replicate(state);
    }
  }
  if (failed)
    throw std::runtime_error(mesh_.is_primary() ? error : "checkpoint load failed on rank 0: " + path);
  // The data order continues from the checkpoint's seed, whatever this run was given.
  const uint64_t seed = position[3];
  if (seed != options_.seed) {
    options_.seed = seed;
    batches_ = make_batches(train_, options_, mesh_);
  }
  buffers_[current_] = TrainStepOut{std::move(params), std::move(state), Array(), Array(), Array()};
  buffers_conformed_ = false;
  steps_done_ = static_cast<int64_t>(position[0]);
  epoch_ = static_cast<int64_t>(position[1]);
  batch_in_epoch_ = static_cast<int64_t>(position[2]);
  batches_.seek(epoch_, batch_in_epoch_);
}

Progress Trainer::make_progress() const {
  return Progress({.enabled = mesh_.is_primary(), .first_step = steps_done_,
                   .total_steps = total_steps(), .global_batch = options_.batch_size,
                   .log_every = options_.log_every});
}

void Trainer::save_at_step() {
  save(io::checkpoint_path(options_.checkpoint_dir, steps_done_));
}

double Trainer::run() {
  const bool checkpoints = !options_.checkpoint_dir.empty();
  std::string resumed;
  if (options_.resume && checkpoints) {
    // Replica 0's choice: the other processes may not see the directory at all.
    std::string path = mesh_.is_primary() ? io::latest_checkpoint(options_.checkpoint_dir) : "";
    broadcast_string(mesh_, path);
    if (!path.empty()) {
      load(path);
      resumed = fmt::format("resumed from {} (step {}, epoch {}, batch {})", path, steps_done_,
                            epoch_ + 1, batch_in_epoch_);
    } else {
      resumed = "no checkpoint in " + options_.checkpoint_dir + ": starting from scratch";
    }
  }
  run_started_at_ = steps_done_;
  Progress progress = make_progress();
  if (!resumed.empty()) progress.note(resumed);
  double accuracy = -1;
  int64_t evaluated_at = -1, saved_at = steps_done_;
  while (std::optional<StepStats> s = step()) {
    progress.on_step(*s);
    if (checkpoints && options_.checkpoint_every > 0 && steps_done_ % options_.checkpoint_every == 0) {
      save_at_step();
      saved_at = steps_done_;
    }
    if (s->batch == batches_per_epoch() - 1) {
      const int64_t t0 = now_ns();
      accuracy = evaluate();
      evaluated_at = steps_done_;
      std::vector<Metric> eval;
      if (accuracy >= 0) eval.push_back({"test acc", accuracy, true});
      progress.on_epoch_end(s->epoch, eval, (now_ns() - t0) * 1e-9);
    }
  }
  if (checkpoints && saved_at != steps_done_) save_at_step();
  if (evaluated_at != steps_done_) accuracy = evaluate();
  return accuracy;
}

}  // namespace fjit::examples
