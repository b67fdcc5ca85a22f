// Peak resident memory per MPI rank of the language model's training under a ZeRO stage: a
// launcher beside bench/zero_memory.cc (which counts array bytes) that measures what the
// process holds. Each rank builds train_lm's trainer (its default decoder unless --layers or
// --dim are given; a synthetic corpus rank 0 writes to a temporary directory), runs --steps
// steps and reads its peak resident set (VmHWM of /proc/self/status) before the trainer, after
// constructing it and after the steps. Rank 0 prints one Markdown row per rank:
//   mpiexec -n N build/bench/zero_rss --zero S [--steps K] [--layers L] [--dim D] [--batch B] [--timed 1]
// With --timed 1 it also prints each rank's mean wall time of the steps after the first (which
// compiles): "time: rank r: X ms/step over K-1 steps".
// The peak includes what the process holds besides the training state: MPI's buffers, the
// compiler's graphs while it compiles the step, the plan's arena (activations, the local
// gradient, and at stage 3 the gathered whole parameters), the token file's pages.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "parallel/lm/lm_trainer.h"
#include "parallel/mesh.h"

namespace {

// VmHWM of this process in MiB (0 if unreadable).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;  // kB
  return 0;
}

int usage(const char* program) {
  std::fprintf(stderr, "usage: mpiexec -n N %s --zero S [--steps K] [--layers L] [--dim D] [--batch B] [--timed 1]\n",
               program);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  fjit::Mesh mesh = fjit::Mesh::mpi(&argc, &argv);
  fjit::lm::LmOptions o;
  int64_t steps = 3;
  bool timed = false;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return usage(argv[0]);
    const int64_t v = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--zero") == 0) o.zero_stage = static_cast<int>(v);
    else if (std::strcmp(argv[i], "--steps") == 0) steps = v;
    else if (std::strcmp(argv[i], "--layers") == 0) o.model.layers = v;
    else if (std::strcmp(argv[i], "--dim") == 0) o.model.dim = v;
    else if (std::strcmp(argv[i], "--batch") == 0) o.batch_size = v;
    else if (std::strcmp(argv[i], "--timed") == 0) timed = v != 0;
    else return usage(argv[0]);
  }
  fjit::Communicator* pc = mesh.process_comm();
  const int rank = mesh.first_replica();
  // One directory for the job: rank 0's process id.
  uint64_t pid = static_cast<uint64_t>(::getpid());
  if (pc != nullptr) pc->broadcast(&pid, sizeof pid, 0);
  const auto dir = std::filesystem::temp_directory_path() / ("fjit_zero_rss_" + std::to_string(pid));
  if (rank == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 4000; ++i) corpus << "the quick brown fox " << i << " jumps over the lazy dog\n";
  }
  if (pc != nullptr) pc->barrier();
  o.corpus = (dir / "corpus.txt").string();
  o.token_file = (dir / "corpus.tokens").string();
  o.steps = steps;
  o.warmup_steps = 0;
  o.eval_every = 0;
  o.log_every = 0;
  double mib[4];
  mib[0] = peak_rss_mib();
  {
    fjit::lm::LmTrainer trainer(mesh, o);
    mib[1] = peak_rss_mib();
    (void)trainer.step();
    const auto t0 = std::chrono::steady_clock::now();
    while (trainer.step()) {
    }
    mib[3] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
             static_cast<double>(std::max<int64_t>(1, steps - 1));
    mib[2] = peak_rss_mib();
  }
  std::vector<double> all(4 * static_cast<size_t>(mesh.processes()));
  if (pc != nullptr)
    pc->all_gather(mib, all.data(), sizeof mib);
  else
    std::memcpy(all.data(), mib, sizeof mib);
  if (rank == 0) {
    for (int r = 0; r < mesh.processes(); ++r)
      std::printf("| %d | %d | %d | %.1f | %.1f | %.1f | %.1f |\n", mesh.size(), o.zero_stage, r, all[4 * r],
                  all[4 * r + 1], all[4 * r + 2], all[4 * r + 2] - all[4 * r]);
    if (timed)
      for (int r = 0; r < mesh.processes(); ++r)
        std::printf("time: rank %d: %.2f ms/step over %lld steps\n", r, all[4 * r + 3],
                    static_cast<long long>(steps - 1));
    std::filesystem::remove_all(dir);
  }
  if (pc != nullptr) pc->barrier();
  return 0;
}
