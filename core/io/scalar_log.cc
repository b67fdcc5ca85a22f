// ScalarLog (see core/io/scalar_log.h).
#include "core/io/scalar_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fjit::io {

ScalarLog::ScalarLog(const std::string& dir)
    : events_(dir), lines_path_((std::filesystem::path(dir) / kScalarLinesFile).string()) {
  lines_ = std::fopen(lines_path_.c_str(), "a");
  if (lines_ == nullptr)
    throw std::runtime_error(lines_path_ + ": cannot open for appending: " + std::strerror(errno));
}

ScalarLog::~ScalarLog() {
  if (lines_ != nullptr) std::fclose(lines_);
}

void ScalarLog::write(int64_t step, const std::string& tag, double value) {
  const double now = wall_time_now();
  events_.add_scalar(tag, value, step, now);
  nlohmann::json line = {{"step", step}, {"tag", tag}, {"wall_time", now}};
  line["value"] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), lines_) != text.size())
    throw std::runtime_error(lines_path_ + ": cannot write: " + std::strerror(errno));
}

void ScalarLog::flush() {
  events_.flush();
  if (std::fflush(lines_) != 0)
    throw std::runtime_error(lines_path_ + ": cannot write: " + std::strerror(errno));
}

}  // namespace fjit::io
