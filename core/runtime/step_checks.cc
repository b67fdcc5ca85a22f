#include "core/runtime/step_checks.h"

#include <atomic>
#include <mutex>

#include "core/base/config.h"

namespace fjit {
namespace {
std::atomic<StepCheckHandler> g_handler{nullptr};

std::mutex g_dump_mu;
CheckDumpOptions g_dump;          // guarded by g_dump_mu
std::atomic<int> g_dump_state{-1};  // -1: not read from the environment yet, 0 off, 1 on

void init_dump_locked() {
  if (g_dump_state.load() >= 0) return;
  g_dump.dir = config::check_dump_dir();
  g_dump.max_bundles = static_cast<int>(config::check_dump_max());
  g_dump_state.store(g_dump.dir.empty() ? 0 : 1);
}
}  // namespace

CheckDumpOptions check_dump_options() {
  std::lock_guard<std::mutex> lock(g_dump_mu);
  init_dump_locked();
  return g_dump;
}

void set_check_dump_options(CheckDumpOptions options) {
  if (options.max_bundles < 1)
    throw std::invalid_argument("set_check_dump_options: max_bundles must be at least 1, got " +
                                std::to_string(options.max_bundles));
  std::lock_guard<std::mutex> lock(g_dump_mu);
  g_dump = std::move(options);
  g_dump_state.store(g_dump.dir.empty() ? 0 : 1);
}

bool check_dump_enabled() {
  const int state = g_dump_state.load(std::memory_order_relaxed);
  if (state >= 0) return state == 1;
  return !check_dump_options().dir.empty();
}

void set_step_check_handler(StepCheckHandler handler) {
  g_handler.store(handler, std::memory_order_release);
}

StepCheckHandler step_check_handler() {
  StepCheckHandler h = g_handler.load(std::memory_order_acquire);
  if (h == nullptr)
    throw std::logic_error(
        "fjit: a plan with check sites ran, but no step-check handler is installed: link "
        "fjit::checks and include the checks layer's step_check_handler.h (fjit.h does)");
  return h;
}

}  // namespace fjit
