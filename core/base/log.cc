#include "core/base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/base/config.h"

namespace fjit {
namespace {
std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;  // guarded by g_mu for writes
std::atomic<spdlog::logger*> g_fast{nullptr};

// The choices of FJIT_LOG_LEVEL are spdlog's levels, in spdlog's order.
static_assert(config::choice_value(config::Id::log_level, "trace") == spdlog::level::trace &&
              config::choice_value(config::Id::log_level, "warn") == spdlog::level::warn &&
              config::choice_value(config::Id::log_level, "off") == spdlog::level::off &&
              config::choice_count(config::Id::log_level) == spdlog::level::n_levels);

// The logger's set-up is an edge that reads FJIT_LOG_LEVEL; a malformed level is reported
// through the logger it configures, once that exists.
std::shared_ptr<spdlog::logger> make_default(std::string* warning) {
  auto logger = std::make_shared<spdlog::logger>(
      "fjit", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[%H:%M:%S.%e] [fjit] [%^%l%$] %v");
  const int level = config::choice(config::Id::log_level, warning);
  logger->set_level(static_cast<spdlog::level::level_enum>(level));
  logger->flush_on(spdlog::level::warn);
  return logger;
}
}  // namespace

spdlog::logger& log() {
  if (spdlog::logger* l = g_fast.load(std::memory_order_acquire)) return *l;
  std::string warning;
  spdlog::logger* made = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_logger) g_logger = make_default(&warning);
    g_fast.store(g_logger.get(), std::memory_order_release);
    made = g_logger.get();
  }
  if (!warning.empty()) made->warn("{}", warning);
  return *made;
}

std::shared_ptr<spdlog::logger> set_logger(std::shared_ptr<spdlog::logger> logger) {
  std::string warning;
  std::shared_ptr<spdlog::logger> previous;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_logger) g_logger = make_default(&warning);
    previous = g_logger;
    // The previous logger stays alive in the caller's hands; readers that cached it still work.
    g_logger = std::move(logger);
    g_fast.store(g_logger.get(), std::memory_order_release);
  }
  if (!warning.empty()) log().warn("{}", warning);
  return previous;
}

}  // namespace fjit
