// fjit's logger: one spdlog logger named "fjit", level from FJIT_LOG_LEVEL
// (trace, debug, info, warn, error, off; default info).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace fjit {

spdlog::logger& log();
// Replaces the sinks (tests capture warnings this way); returns the previous logger.
std::shared_ptr<spdlog::logger> set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace fjit
