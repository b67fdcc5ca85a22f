#include "core/runtime/step_checks.h"

#include <atomic>

namespace fjit {
namespace {
std::atomic<StepCheckHandler> g_handler{nullptr};
}  // namespace

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
