// fjit_verify: certifies a training run after the fact (issue 30, item 5). For each pair of
// consecutive checkpoints in DIR (ckpt-<s>.safetensors, ckpt-<s+K>.safetensors) it checks both
// files' checksums and hash chain, re-executes steps s+1..s+K from the first with the command
// line and replica count the run recorded (thread replicas: bit-identical to MPI ranks), and
// confirms the state reached is bit-identical to the second, or names the first diverging
// step and tensor. It dispatches on the trainer each checkpoint records (its "format"): the
// classifier trainer's runs (train_fashion_mnist, train_cnn, train_vit) and the language
// model's (train_lm, parallel/lm/lm_verify.h).
//
//   build/examples/train_fashion_mnist --replicas 2 --checkpoint-dir ck --checkpoint-every 50
//   build/examples/train_lm --replicas 2 --checkpoint-dir lm --checkpoint-every 100
//   build/examples/fjit_verify ck              # every interval
//   build/examples/fjit_verify ck --from 100   # the intervals from step 100 on
//
// Exit codes: 0 every interval identical; 1 a divergence or an unreadable checkpoint;
// 2 bad command line.
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/idx.h"
#include "lib/models.h"
#include "parallel/lm/lm_verify.h"
#include "parallel/train/verify.h"

namespace {

using namespace fjit;
using namespace fjit::training;

// The trainer of the run that wrote `path`, from its recorded command line.
TrainerFactory factory_of(const std::string& path, const ModelMenu& menu) {
  const io::Checkpoint ck = io::load_checkpoint(path);
  const std::string line = io::metadata_str(ck, "command_line");
  std::vector<std::string> args = {"fjit_verify"};
  size_t pos = 0;
  while (!line.empty()) {
    const size_t nl = line.find('\n', pos);
    args.push_back(line.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ParsedOptions parsed = parse_train_options(static_cast<int>(argv.size()), argv.data(), {}, menu.names);
  if (!parsed.error.empty())
    throw std::runtime_error(path + ": its recorded command line does not parse: " + parsed.error);
  TrainOptions o = parsed.options;
  o.resume = false;
  o.checkpoint_dir.clear();
  o.log_dir.clear();
  o.log_every = 0;
  const int replicas = static_cast<int>(io::metadata_int(ck, "replicas"));
  return [o, replicas, menu]() {
    Model model = menu.build(o);
    const std::string dir = o.data_dir.empty() ? io::kDebianFashionMnistDir : o.data_dir;
    io::Dataset train = io::load_fashion_mnist(dir, "train", model.pixels);
    return std::make_unique<Trainer>(Mesh::threads(replicas), o, std::move(model), std::move(train));
  };
}

// Re-executes from..to with the trainer that wrote `from`.
VerifyResult verify(const std::string& from, const std::string& to, const ModelMenu& menu) {
  if (io::metadata_str(io::load_checkpoint(from), "format") == lm::kLmCheckpointFormat)
    return lm::verify_lm_interval(from, to, lm::lm_trainer_factory_of(from));
  return verify_interval(from, to, factory_of(from, menu));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--from")) {
    std::fprintf(stderr, "usage: %s DIR [--from STEP]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  long long from = 0;
  if (argc == 4) {
    try {
      from = std::stoll(argv[3]);
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: --from needs a step number, got '%s'\n", argv[0], argv[3]);
      return 2;
    }
  }
  try {
    const auto ckpts = list_checkpoints(dir);
    if (ckpts.size() < 2) throw std::runtime_error(dir + ": fewer than two checkpoints to compare");
    const ModelMenu menu = examples::model_menu();
    int diverged = 0, checked = 0;
    for (size_t i = 0; i + 1 < ckpts.size(); ++i) {
      if (ckpts[i].first < from) continue;
      const VerifyResult r = verify(ckpts[i].second, ckpts[i + 1].second, menu);
      std::printf("%s\n", r.summary.c_str());
      std::fflush(stdout);
      ++checked;
      if (!r.identical) ++diverged;
    }
    std::printf("%d interval(s) checked, %d diverged\n", checked, diverged);
    return diverged == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fjit_verify: %s\n", e.what());
    return 1;
  }
}
