#include "core/base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace fjit {
namespace {
std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;  // guarded by g_mu for writes
std::atomic<spdlog::logger*> g_fast{nullptr};

std::shared_ptr<spdlog::logger> make_default() {
  auto logger = std::make_shared<spdlog::logger>(
      "fjit", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[%H:%M:%S.%e] [fjit] [%^%l%$] %v");
  spdlog::level::level_enum level = spdlog::level::info;
  if (const char* env = std::getenv("FJIT_LOG_LEVEL")) level = spdlog::level::from_str(env);
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  return logger;
}
}  // namespace

spdlog::logger& log() {
  if (spdlog::logger* l = g_fast.load(std::memory_order_acquire)) return *l;
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_logger) g_logger = make_default();
  g_fast.store(g_logger.get(), std::memory_order_release);
  return *g_logger;
}

std::shared_ptr<spdlog::logger> set_logger(std::shared_ptr<spdlog::logger> logger) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_logger) g_logger = make_default();
  std::shared_ptr<spdlog::logger> previous = g_logger;
  // The previous logger stays alive in the caller's hands; readers that cached it still work.
  g_logger = std::move(logger);
  g_fast.store(g_logger.get(), std::memory_order_release);
  return previous;
}

}  // namespace fjit
