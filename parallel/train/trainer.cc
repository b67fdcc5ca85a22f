#include "parallel/train/trainer.h"

#include <bit>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/metrics.h"
#include "core/io/state_hash.h"
#include "parallel/train/primary_work.h"
#include "parallel/train/train_scalars.h"
#include "parallel/train/zero.h"

namespace fjit::training {

// The batches this process trains on: its replicas' rows of each global batch, or with
// examples_per_process its own part of the training set in batches of its replicas' share of
// the global batch. Agrees with the other processes on the steps of an epoch.
JoinedBatches Trainer::make_batches(const io::Dataset& train, const TrainOptions& o, const Mesh& mesh) {
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


std::string step_record(int64_t step, float loss, float grad_norm) {
  return fmt::format("{}:{:08x}:{:08x}", step, std::bit_cast<uint32_t>(loss),
                     std::bit_cast<uint32_t>(grad_norm));
}

void conform(ArrayDict& d, const ArrayDict& like) {
  if (d.empty() || d.names() == like.names()) return;
  ArrayDict out;
  for (const std::string& name : like.names()) out.set(name, d.at(name));
  d = std::move(out);
}

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

namespace {

TrainOptions with_loss_scaling_policy(TrainOptions o) {
  if (loss_scaling_on(o)) require_loss_scaling_checks(o.checks, o.on_check_failure, "Trainer");
  return o;
}

// "shares of 3, 3 and 2 rows": what pmap's split gives each replica of a global batch.
std::string share_sizes(int64_t batch, int replicas) {
  std::vector<int64_t> rows;
  for (int r = 0; r < replicas; ++r) {
    const auto [begin, end] = io::split_rows(batch, replicas, r);
    rows.push_back(end - begin);
  }
  const auto last = rows.back();
  rows.pop_back();
  return rows.empty() ? fmt::format("one share of {} rows", last)
                      : fmt::format("shares of {} and {} rows", fmt::join(rows, ", "), last);
}

}  // namespace

PmapOptions Trainer::pmap_options(const char* name) const {
  PmapOptions o;
  o.jit.name = name;
  o.jit.checks = options_.checks;
  o.jit.policy = options_.on_check_failure;
  o.divergence_check_every = options_.divergence_check_every;
  return o;
}

Trainer::Trainer(Mesh mesh, TrainOptions options, Model model, io::Dataset train, io::Dataset test)
    : mesh_(std::move(mesh)),
      options_(with_loss_scaling_policy(std::move(options))),
      model_(std::move(model)),
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
                      .model = model_,
                      .seed = options_.seed,
                      .scaling = {.on = loss_scaling_on(options_),
                                  .grad_dtype = options_.grad_dtype == "f16" ? DType::f16 : DType::f32},
                      .compute_dtype = options_.compute_dtype == "bf16" ? DType::bf16 : DType::f32,
                      .sentinel_every = options_.sentinel_every,
                      .zero_stage = options_.zero_stage,
                      .zero3_shapes = options_.zero_stage == 3 ? zero_param_shapes(model_.init(options_.seed))
                                                               : std::vector<ZeroParamShape>{}},
          pmap_options("train_step"))),
      eval_step_(make_eval_step(mesh_, [this] {
        PmapOptions o = pmap_options("eval_step");
        o.divergence_check_every = 0;
        return o;
      }(), model_, options_.compute_dtype == "bf16" ? DType::bf16 : DType::f32)) {
  const Array& images = train_["images"];
  const int64_t features = images.rank() == 2 ? images.shape()[1] : -1;
  if (features != model_.inputs)
    throw std::invalid_argument(fmt::format("Trainer: images {} do not fit the {} model ({} inputs)",
                                            type_str(images.dtype(), images.shape()),
                                            model_.name, model_.inputs));
  if (options_.batch_size < mesh_.size() * int64_t{options_.micro_batches})
    throw std::invalid_argument(fmt::format("Trainer: a global batch of {} cannot feed {} replicas "
                                            "with {} micro-batches each", options_.batch_size,
                                            mesh_.size(), options_.micro_batches));
  if (options_.sentinel_every > 0 && (options_.batch_size % mesh_.size() != 0 || !options_.examples_per_process.empty()))
    throw std::invalid_argument(fmt::format("Trainer: the sentinel (--sentinel {}) recomputes a neighbour's share of "
                                            "the batch and needs every replica's share the same size: a global "
                                            "batch of {} does not split evenly over {} replicas ({}){}",
                                            options_.sentinel_every, options_.batch_size, mesh_.size(),
                                            share_sizes(options_.batch_size, mesh_.size()),
                                            options_.examples_per_process.empty() ? "" : " (examples per process)"));
  if (options_.zero_stage != 0 && options_.divergence_check_every > 0)
    throw std::invalid_argument(fmt::format("Trainer: --zero {} has no divergence check (the replicas' optimizer "
                                            "states differ): --divergence-check-every {}",
                                            options_.zero_stage, options_.divergence_check_every));
  if (batches_.steps_per_epoch() == 0)
    throw std::invalid_argument(fmt::format("Trainer: {} training examples make no batch of {}",
                                            batches_.batches().num_examples(),
                                            batches_.batches().options().batch_size));
  chain_ = io::kChainStart;
  ArrayDict params = mesh_.replicate(model_.init(options_.seed));
  AdamW opt{.lr = options_.lr, .weight_decay = options_.weight_decay};
  ArrayDict state = options_.zero_stage ? zero_init_state(params, mesh_) : opt.init_state(params);
  if (options_.zero_stage == 3) {
    zero3_shapes_ = zero_param_shapes(params);
    params = zero_shard_params(params, mesh_);
  }
  buffers_[0] = TrainStepOut{std::move(params), std::move(state), Array(), Array(), Array()};
  step_ = Array(DType::i32, {});
  if (loss_scaling_on(options_))
    scaler_ = make_loss_scale(options_.loss_scale, options_.loss_scale_growth_interval, "Trainer");
  scale_ = Array(DType::f32, {});
  scale_.data<float>()[0] = 1.0f;
}

ArrayDict Trainer::params() const {
  if (options_.zero_stage != 3) return local_params();
  return zero_gather_params(local_params(), zero3_shapes_, mesh_);
}

ArrayDict Trainer::whole_optimizer_state() const {
  if (options_.zero_stage == 0) return optimizer_state();
  return zero_gather_state(optimizer_state(), params(), mesh_);
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
  if (scaler_) scale_.data<float>()[0] = scaler_->scale();
  StepResult r = train_step_.run_into(out, std::get<0>(in), std::get<1>(in), batch["images"],
                                      batch["labels"], step_, scale_);
  if (options_.zero_stage && mesh_.local_size() > 1) {
    // This process's other replicas' state shards follow replica 0's.
    std::vector<const std::vector<Array>*> others;
    for (int k = 1; k < mesh_.local_size(); ++k) others.push_back(&train_step_.replica_outputs(k));
    std::get<1>(out) = zero_local_state(std::get<1>(out), others, std::get<0>(out).size());
    if (options_.zero_stage == 3) std::get<0>(out) = zero_local_state(std::get<0>(out), others, 0);
  }
  if (scaler_) scaler_->update(r.raised(CheckKind::loss_scale_overflow), r.skipped);
  if (r.skipped) ++skipped_steps_;
  current_ = 1 - current_;
  step_records_.push_back(step_record(steps_done_, std::get<2>(out).item<float>(),
                                      std::get<4>(out).item<float>()));
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
  last_accuracy_ = std::get<3>(out).item<float>();
  last_grad_norm_ = std::get<4>(out).item<float>();
  s.metrics = {{"train acc", last_accuracy_, true}};
  if (scaler_) s.metrics.push_back({"loss scale", scaler_->scale(), false});
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

Progress Trainer::make_progress() const {
  return Progress({.enabled = mesh_.is_primary(), .first_step = steps_done_,
                   .total_steps = total_steps(), .global_batch = options_.batch_size,
                   .log_every = options_.log_every});
}

double Trainer::run() {
  const bool checkpoints = !options_.checkpoint_dir.empty();
  check_run_outputs(mesh_, {.dirs = {{"--checkpoint-dir", options_.checkpoint_dir},
                                     {"--log-dir", options_.log_dir}}});
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
  TrainScalars scalars(options_.log_dir, mesh_.is_primary(), options_.batch_size,
                       options_.log_every);
  if (!resumed.empty()) progress.note(resumed);
  double accuracy = -1;
  int64_t evaluated_at = -1, saved_at = steps_done_;
  while (std::optional<StepStats> s = step()) {
    progress.on_step(*s);
    scalars.on_step(*s, last_accuracy_, last_grad_norm_);
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
      scalars.on_epoch_end(steps_done_, accuracy);
    }
  }
  if (checkpoints && saved_at != steps_done_) save_at_step();
  if (evaluated_at != steps_done_) accuracy = evaluate();
  return accuracy;
}

}  // namespace fjit::training
