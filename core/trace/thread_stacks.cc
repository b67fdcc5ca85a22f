#include "core/trace/thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "core/trace/stack_trace.h"

namespace fjit {
namespace {

constexpr int kFrames = StackTrace::kMaxFrames;

// The one request in flight: the thread asked, and where it records.
struct Request {
  std::atomic<int> tid{0};
  void* pcs[kFrames] = {};
  std::atomic<int> count{-1};
};
Request g_request;
std::mutex g_mu;

int signal_number() { return SIGRTMIN + 4; }

int gettid_now() { return static_cast<int>(::syscall(SYS_gettid)); }

void on_signal(int) {
  const int saved = errno;
  if (g_request.tid.load(std::memory_order_acquire) == gettid_now()) {
    const int n = ::backtrace(g_request.pcs, kFrames);
    g_request.count.store(n, std::memory_order_release);
  }
  errno = saved;
}

void install_once() {
  static const bool installed = [] {
    void* warm[4];
    (void)::backtrace(warm, 4);  // loads the unwinder now, not in the handler
    struct sigaction sa {};
    sa.sa_handler = &on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(signal_number(), &sa, nullptr);
    return true;
  }();
  (void)installed;
}

std::vector<int> thread_ids() {
  std::vector<int> ids;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ids.push_back(std::atoi(e->d_name));
    ::closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string thread_name(int tid) {
  std::ifstream in(fmt::format("/proc/self/task/{}/comm", tid));
  std::string name;
  std::getline(in, name);
  return name;
}

std::string frames_text(const std::vector<uintptr_t>& pcs, int skip, int max_frames) {
  std::vector<uintptr_t> kept(pcs.begin() + std::min<size_t>(skip, pcs.size()), pcs.end());
  const std::vector<StackFrame> frames = StackTrace::from_pcs(std::move(kept)).symbolize();
  std::string out;
  int k = 0;
  for (const StackFrame& f : frames) {
    if (k == max_frames) {
      out += fmt::format("    ... {} more frames\n", frames.size() - static_cast<size_t>(k));
      break;
    }
    std::string where =
        f.file.empty() ? f.module : fmt::format("{}:{}", relative_to_source_dir(f.file), f.line);
    out += fmt::format("    #{} {} ({})\n", k++,
                       f.function.empty() ? fmt::format("{:#x}", f.pc) : f.function,
                       where.empty() ? "?" : where);
  }
  return out;
}

}  // namespace

std::string all_thread_stacks(int max_frames, std::chrono::milliseconds timeout,
                              std::chrono::milliseconds budget) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(g_mu);
  install_once();
  const int self = gettid_now();
  const int pid = static_cast<int>(::getpid());
  std::string out;
  const std::vector<int> tids = thread_ids();
  for (size_t t = 0; t < tids.size(); ++t) {
    const int tid = tids[t];
    if (budget.count() > 0 && std::chrono::steady_clock::now() - start >= budget) {
      out += fmt::format("  ({} more threads not asked: the collection ran out of its {} ms)\n",
                         tids.size() - t, budget.count());
      break;
    }
    out += fmt::format("  thread {} ({}){}:\n", tid, thread_name(tid),
                       tid == self ? " (this thread)" : "");
    if (tid == self) {
      out += frames_text(StackTrace::capture().pcs(), 0, max_frames);
      continue;
    }
    g_request.count.store(-1, std::memory_order_relaxed);
    g_request.tid.store(tid, std::memory_order_release);
    if (::syscall(SYS_tgkill, pid, tid, signal_number()) != 0) {
      out += "    (gone)\n";
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int n = -1;
    while ((n = g_request.count.load(std::memory_order_acquire)) < 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    g_request.tid.store(0, std::memory_order_release);
    if (n < 0) {
      out += "    (did not answer: it blocks the signal or is stuck in the kernel)\n";
      continue;
    }
    std::vector<uintptr_t> pcs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pcs[i] = reinterpret_cast<uintptr_t>(g_request.pcs[i]);
    out += frames_text(pcs, 2, max_frames);  // the handler and the signal trampoline
  }
  return out;
}

}  // namespace fjit
