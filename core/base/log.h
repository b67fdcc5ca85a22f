// fjit's logger: one spdlog logger named "fjit", level from FJIT_LOG_LEVEL (trace, debug,
// info, warn, error, critical, off; default info; core/base/config.def), read when the logger
// is first used.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace fjit {

spdlog::logger& log();
// Replaces the sinks (tests capture warnings this way); returns the previous logger.
std::shared_ptr<spdlog::logger> set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace fjit
