#include "parallel/lm/lm_trainer.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/metrics.h"
#include "core/io/checkpoint.h"
#include "core/io/state_hash.h"
#include "core/io/tokenizer.h"
#include "parallel/train/primary_work.h"
#include "parallel/train/trainer.h"
#include "parallel/train/zero.h"

namespace fjit::lm {
namespace {

constexpr const char* kFormat = kLmCheckpointFormat;

// Pretraining reads bytes: the vocabulary is the byte tokenizer's; a given model keeps its own.
// A loss-scaled run gets the check settings it needs (parallel/train/loss_scaling.h).
LmOptions prepared(LmOptions o, bool from_seed) {
  if (from_seed) o.model.vocab = io::ByteTokenizer::kVocab;
  if (loss_scaling_on(o)) training::require_loss_scaling_checks(o.checks, o.on_check_failure, "train_lm");
  return o;
}

// Every parameter the decoder reads is in `given` with its shape (other entries are allowed).
void check_initial(const ArrayDict& given, const DecoderConfig& model, const std::string& source) {
  ArrayDict expected;
  decoder_params(expected, model, 0);
  for (const auto& [name, a] : expected) {
    const std::string where = source.empty() ? std::string("the initial parameters") : source;
    if (!given.contains(name))
      throw std::invalid_argument(fmt::format("{}: no parameter '{}' for the decoder {}", where, name,
                                              model.describe()));
    if (given.at(name).shape() != a.shape())
      throw std::invalid_argument(fmt::format("{}: parameter '{}' is {}, the decoder {} reads {}", where,
                                              name, shape_str(given.at(name).shape()),
                                              model.describe(), shape_str(a.shape())));
  }
}

// The trained parameters' shapes at ZeRO stage 3 (the step gathers them), else none.
std::vector<training::ZeroParamShape> zero3_shapes_for(const LmOptions& o, const ArrayDict& initial) {
  if (o.zero_stage != 3) return {};
  ArrayDict params = initial;
  if (params.empty()) decoder_params(params, o.model, o.seed);
  if (!o.trainable.empty()) params = split_trainable(params, o.trainable).first;
  return training::zero_param_shapes(params);
}

}  // namespace

std::string token_file_path(const LmOptions& o) {
  if (!o.token_file.empty()) return o.token_file;
  if (!o.checkpoint_dir.empty()) return (std::filesystem::path(o.checkpoint_dir) / "corpus.tokens").string();
  const size_t h = std::hash<std::string>{}(std::filesystem::absolute(o.corpus).string());
  return (std::filesystem::temp_directory_path() / fmt::format("fjit-corpus-{:016x}.tokens", h)).string();
}

PmapOptions LmTrainer::pmap_options(const char* name) const {
  PmapOptions o;
  o.jit.name = name;
  o.jit.checks = options_.checks;
  o.jit.policy = options_.on_check_failure;
  // ZeRO: the replicas' state shards differ by design, so the step's outputs are not compared.
  if (options_.zero_stage != 0) o.divergence_check_every = 0;
  return o;
}

LmTrainer::LmTrainer(Mesh mesh, LmOptions options, ArrayDict initial)
    : mesh_(std::move(mesh)),
      options_(prepared(std::move(options), initial.empty())),
      schedule_(lm_schedule(options_)),
      step_fn_(make_lm_split_step(mesh_,
                                  LmStepFn{.model = options_.model,
                                           .optimizer = AdamW{.lr = options_.lr, .b2 = options_.b2,
                                                              .weight_decay = options_.weight_decay},
                                           .schedule = schedule_,
                                           .clip_grad_norm = options_.clip_grad_norm,
                                           .max_grad_norm = options_.max_grad_norm,
                                           .groups = lm_param_groups(options_),
                                           .scaling = {.on = loss_scaling_on(options_),
                                                       .grad_dtype = options_.grad_dtype == "f16" ? DType::f16
                                                                                                  : DType::f32},
                                           .compute_dtype = options_.compute_dtype == "bf16" ? DType::bf16
                                                                                            : DType::f32,
                                           .zero_stage = options_.zero_stage,
                                           .zero3_shapes = zero3_shapes_for(options_, initial)},
                                  pmap_options("lm_step"))),
      eval_fn_(make_lm_eval(mesh_, options_.model, pmap_options("lm_eval"),
                            options_.compute_dtype == "bf16" ? DType::bf16 : DType::f32)) {
  validate(options_.model);
  const std::string path = token_file_path(options_);
  training::check_run_outputs(mesh_, {.dirs = {{"--checkpoint-dir", options_.checkpoint_dir},
                                               {"--export-hf", options_.export_hf}},
                                      .files = {{"token file", path}}});
  training::run_on_primary(mesh_, "tokenizing " + options_.corpus, [&] {
    if (std::filesystem::exists(path)) return;  // written once; a resumed run reads the same
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    io::write_token_file(path, io::corpus_files(options_.corpus));
  });
  file_ = std::make_unique<io::TokenFile>(io::TokenFile::open(path));
  if (file_->vocab() > options_.model.vocab)
    throw std::invalid_argument(fmt::format(
        "{}: tokens of a vocabulary of {} do not fit the model's {}{}", path, file_->vocab(),
        options_.model.vocab,
        file_->vocab() == io::ByteTokenizer::kVocab ? " (the corpus is read as bytes: give --token-file "
                                                     "with ids of the model's tokenizer)" : ""));
  if (!initial.empty() && file_->vocab() == io::ByteTokenizer::kVocab &&
      options_.model.vocab != io::ByteTokenizer::kVocab)
    throw std::invalid_argument(fmt::format(
        "{}: the corpus is read as bytes (vocabulary 256) but the model's vocabulary is {}: give "
        "--token-file with ids of the model's tokenizer", path, options_.model.vocab));
  std::tie(shard_begin_, shard_end_) = mesh_.data_shard().rows(options_.batch_size);
  if (options_.batch_size < mesh_.size())
    throw std::invalid_argument(fmt::format("train_lm: a global batch of {} sequences cannot feed {} replicas",
                                            options_.batch_size, mesh_.size()));
  train_batches_ = std::make_unique<io::TokenBatches>(
      *file_, io::Split::kTrain,
      io::TokenBatchOptions{.context = options_.model.context, .global_batch = options_.batch_size,
                            .validation_fraction = options_.validation_fraction, .seed = options_.seed},
      shard_begin_, shard_end_);
  ArrayDict params;
  if (initial.empty()) {
    decoder_params(params, options_.model, options_.seed);
  } else {
    check_initial(initial, options_.model, options_.init_from);
    params = std::move(initial);
  }
  names_ = params.names();
  check_param_groups(lm_param_groups(options_), names_);
  if (!options_.trainable.empty()) std::tie(params, frozen_) = split_trainable(params, options_.trainable);
  params = mesh_.replicate(params);
  frozen_ = mesh_.replicate(frozen_);
  AdamW opt{.lr = options_.lr, .b2 = options_.b2, .weight_decay = options_.weight_decay};
  ArrayDict state = options_.zero_stage ? training::zero_init_state(params, mesh_) : opt.init_state(params);
  if (options_.zero_stage == 3) {
    zero3_shapes_ = training::zero_param_shapes(params);
    params = training::zero_shard_params(params, mesh_);
  }
  buffers_[0] = LmStepOut{std::move(params), std::move(state), Array(), Array()};
  step_ = Array(DType::i32, {});
  scale_ = Array::scalar(1.0f);
  chain_ = io::kChainStart;
  if (loss_scaling_on(options_))
    scaler_ = training::make_loss_scale(options_.loss_scale, options_.loss_scale_growth_interval, "train_lm");
}

ArrayDict LmTrainer::trainable_params() const {
  if (options_.zero_stage != 3) return local_trainable_params();
  return training::zero_gather_params(local_trainable_params(), zero3_shapes_, mesh_);
}

ArrayDict LmTrainer::params() const {
  const ArrayDict trainable = trainable_params();
  if (frozen_.empty()) return trainable;
  ArrayDict all;
  for (const std::string& name : names_) all.set(name, frozen_.contains(name) ? frozen_.at(name) : trainable.at(name));
  return all;
}

int64_t LmTrainer::total_steps() const {
  return options_.max_steps >= 0 ? std::min(options_.steps, options_.max_steps) : options_.steps;
}

bool LmTrainer::done() const { return steps_done_ >= total_steps(); }

std::optional<StepStats> LmTrainer::step() {
  if (done()) return std::nullopt;
  const int64_t epoch = train_batches_->epoch();
  train_batches_->next(inputs_, targets_);
  LmStepOut& in = buffers_[current_];
  LmStepOut& out = buffers_[1 - current_];
  const int64_t step = steps_done_++;
  step_.data<int32_t>()[0] = static_cast<int32_t>(step);
  if (scaler_) scale_.data<float>()[0] = scaler_->scale();
  StepResult r = step_fn_.run_into(out, std::get<0>(in), frozen_, std::get<1>(in), inputs_, targets_, step_, scale_);
  if (options_.zero_stage && mesh_.local_size() > 1) {
    // This process's other replicas' state shards follow replica 0's.
    std::vector<const std::vector<Array>*> others;
    for (int k = 1; k < mesh_.local_size(); ++k) others.push_back(&step_fn_.replica_outputs(k));
    std::get<1>(out) = training::zero_local_state(std::get<1>(out), others, std::get<0>(out).size());
    if (options_.zero_stage == 3) std::get<0>(out) = training::zero_local_state(std::get<0>(out), others, 0);
  }
  if (scaler_) scaler_->update(r.raised(CheckKind::loss_scale_overflow), r.skipped);
  if (r.skipped) ++skipped_steps_;
  current_ = 1 - current_;
  if (!buffers_conformed_) {
    training::conform(std::get<0>(in), std::get<0>(out));
    training::conform(std::get<1>(in), std::get<1>(out));
    buffers_conformed_ = true;
  }
  StepStats s;
  s.step = step;
  s.epoch = epoch;
  s.batch = step;
  s.skipped = r.skipped;
  s.lr = schedule_(step);
  s.loss = std::get<2>(out).item<float>();
  last_grad_norm_ = std::get<3>(out).item<float>();
  step_records_.push_back(training::step_record(steps_done_, s.loss, static_cast<float>(last_grad_norm_)));
  s.metrics = {{"grad norm", last_grad_norm_, false}};
  if (scaler_) s.metrics.push_back({"loss scale", scaler_->scale(), false});
  return s;
}

double LmTrainer::validation_bits_per_byte() {
  io::TokenBatches val(*file_, io::Split::kValidation,
                       {.context = options_.model.context, .global_batch = options_.batch_size,
                        .validation_fraction = options_.validation_fraction, .seed = options_.seed},
                       shard_begin_, shard_end_);
  const int64_t batches = std::min(options_.eval_batches, val.batches_per_epoch());
  Array loss_sum, inputs, targets;
  double nats = 0;
  const ArrayDict whole = params();  // at ZeRO stage 3 a gather every process joins: once, not per batch
  for (int64_t b = 0; b < batches; ++b) {
    val.next(inputs, targets);
    eval_fn_.run_into(loss_sum, whole, inputs, targets);
    nats += loss_sum.item<double>();
  }
  const double tokens = static_cast<double>(batches * options_.batch_size * options_.model.context);
  return nats / tokens / std::numbers::ln2;
}

void LmTrainer::save(const std::string& path) {
  // ZeRO: the replicas' shards put back into the whole state (an all-gather every process
  // joins), so the file is the replicated run's and any replica count resumes from it.
  // At stage 3 the parameters too (zero_gather_params).
  const ArrayDict whole_params = trainable_params();
  const ArrayDict whole_state = options_.zero_stage
                                    ? training::zero_gather_state(optimizer_state(), whole_params, mesh_)
                                    : ArrayDict();
  const ArrayDict& state_to_save = options_.zero_stage ? whole_state : optimizer_state();
  training::run_on_primary(mesh_, "checkpoint save " + path, [&] {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    io::Checkpoint ck;
    ck.tensors = training::checkpoint_tensors(whole_params, state_to_save);
    ck.metadata = {{"format", kFormat},
                   {"step", std::to_string(steps_done_)},
                   {"data_position", std::to_string(train_batches_->position())},
                   {"skipped_steps", std::to_string(skipped_steps_)},
                   {"seed", std::to_string(options_.seed)},
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

void LmTrainer::load(const std::string& path) {
  // Shapes to receive into; with ZeRO the whole state, resharded below for this mesh.
  ArrayDict params = trainable_params();
  ArrayDict state = options_.zero_stage ? AdamW{}.init_state(params) : optimizer_state();
  uint64_t position[4] = {0, 0, 0, 0};  // step, data position, seed, skipped steps
  char scale_state[64] = {};         // the loss scale's state, when the run scales its loss
  std::string chain;                 // the checkpoint's link (the primary's)
  training::run_on_primary(mesh_, "checkpoint load " + path, [&] {
    io::Checkpoint ck = io::load_checkpoint(path);
    io::require_checksum(ck, "so it cannot be resumed from");
    if (io::metadata_str(ck, "format") != kFormat)
      throw std::runtime_error(fmt::format("{}: not a checkpoint of this trainer (format '{}', expected '{}')",
                                           path, io::metadata_str(ck, "format"), kFormat));
    if (!options_.allow_config_change) {
      io::check_model(ck, run_config(options_).at("model"));
      io::check_config(ck, run_config(options_),
                       "pass --allow-config-change to resume with this run's settings anyway");
    }
    io::check_compatible(ck, training::checkpoint_tensors(params, state));
    position[0] = static_cast<uint64_t>(io::metadata_int(ck, "step"));
    position[1] = static_cast<uint64_t>(io::metadata_int(ck, "data_position"));
    position[2] = static_cast<uint64_t>(io::metadata_int(ck, "seed"));
    const int64_t step = io::metadata_int(ck, "step"), data = io::metadata_int(ck, "data_position");
    if (data != step)
      throw std::runtime_error(fmt::format("{}: the header says step {} but data position {} (one "
                                           "global batch a step): the header contradicts itself",
                                           path, step, data));
    const int64_t skipped = io::metadata_int(ck, "skipped_steps");
    training::check_update_count(ck, step, skipped);
    position[3] = static_cast<uint64_t>(skipped);
    chain = io::verify_chain(ck, step);
    training::read_checkpoint_tensors(ck, params, state);
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
  if (options_.zero_stage) state = training::zero_shard_state(state, params, mesh_);
  if (options_.zero_stage == 3) params = training::zero_shard_params(params, mesh_);
  // The data order continues from the checkpoint's seed, whatever this run was given.
  if (position[2] != options_.seed) {
    options_.seed = position[2];
    train_batches_ = std::make_unique<io::TokenBatches>(
        *file_, io::Split::kTrain,
        io::TokenBatchOptions{.context = options_.model.context, .global_batch = options_.batch_size,
                              .validation_fraction = options_.validation_fraction, .seed = options_.seed},
        shard_begin_, shard_end_);
  }
  train_batches_->seek(static_cast<int64_t>(position[1]));
  if (scaler_) scaler_->set_state(scale_state);
  buffers_[current_] = LmStepOut{std::move(params), std::move(state), Array(), Array()};
  buffers_conformed_ = false;
  steps_done_ = static_cast<int64_t>(position[0]);
  skipped_steps_ = static_cast<int64_t>(position[3]);
  if (mesh_.is_primary()) chain_ = chain;
  step_records_.clear();
}

Progress LmTrainer::make_progress() const {
  return Progress({.enabled = mesh_.is_primary(), .first_step = steps_done_,
                   .total_steps = total_steps(),
                   .global_batch = options_.batch_size * options_.model.context,
                   .unit = "tokens", .log_every = options_.log_every});
}

double LmTrainer::run() {
  const bool checkpoints = !options_.checkpoint_dir.empty();
  std::string resumed;
  if (options_.resume && checkpoints) {
    std::string path = mesh_.is_primary() ? io::latest_checkpoint(options_.checkpoint_dir) : "";
    training::broadcast_string(mesh_, path);
    if (!path.empty()) {
      load(path);
      resumed = fmt::format("resumed from {} (step {})", path, steps_done_);
    } else {
      resumed = "no checkpoint in " + options_.checkpoint_dir + ": starting from scratch";
    }
  }
  run_started_at_ = steps_done_;
  Progress progress = make_progress();
  if (!resumed.empty()) progress.note(resumed);
  double bpb = -1;
  int64_t evaluated_at = -1, saved_at = steps_done_;
  auto evaluate = [&] {
    const int64_t t0 = now_ns();
    bpb = validation_bits_per_byte();
    evaluated_at = steps_done_;
    progress.note(fmt::format("== step {:>6} | validation {:.4f} bits/byte (eval {:.1f}s)", steps_done_,
                              bpb, (now_ns() - t0) * 1e-9));
  };
  while (std::optional<StepStats> s = step()) {
    progress.on_step(*s);
    if (checkpoints && options_.checkpoint_every > 0 && steps_done_ % options_.checkpoint_every == 0) {
      save(io::checkpoint_path(options_.checkpoint_dir, steps_done_));
      saved_at = steps_done_;
    }
    if (options_.eval_every > 0 && steps_done_ % options_.eval_every == 0) evaluate();
  }
  if (checkpoints && saved_at != steps_done_) save(io::checkpoint_path(options_.checkpoint_dir, steps_done_));
  if (evaluated_at != steps_done_) evaluate();
  return bpb;
}

}  // namespace fjit::lm
