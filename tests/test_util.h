// Helpers shared by tests: capturing fjit's log output, setting an environment variable,
// random arrays, rows of a batch, the message of an expected exception.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/base/log.h"
#include "core/ir/array.h"
#include "core/trace/dict.h"
#include "core/lib/initializers.h"

namespace fjit::testing {

// v rounded to the nearest bf16 (ties to even; finite v), written here rather than taken from
// the library: the oracle of the bf16 tests.
inline double bf16_round(double v) {
  float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// An f32 array of uniform values in [-1, 1), the same for the same seed.
inline Array random_f32(Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.size(); ++i) a.data<float>()[i] = u(rng);
  return a;
}

// An f64 array of uniform values in [-1, 1) from SplitMix64, the same for the same seed.
inline Array random_f64(Shape s, uint64_t seed) {
  Array a(DType::f64, std::move(s));
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < a.size(); ++i) a.data<double>()[i] = 2 * rng.uniform() - 1;
  return a;
}

// Runs f and returns the message of the E it throws. When it throws nothing, the test fails
// (ADD_FAILURE: it goes on) and the result is ""; any other exception propagates.
template <class E = std::runtime_error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception, none was thrown";
  return "";
}

// Captures everything fjit logs while alive (and restores the previous logger after).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(512)) {
    auto logger = std::make_shared<spdlog::logger>("fjit", sink_);
    logger->set_level(spdlog::level::trace);
    logger->set_pattern("%l %v");
    previous_ = set_logger(logger);
  }
  ~LogCapture() { set_logger(previous_); }
  std::string text() const {
    std::string out;
    for (const auto& line : sink_->last_formatted()) out += line;
    return out;
  }
  bool contains(const std::string& s) const { return text().find(s) != std::string::npos; }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

// Sets (value != nullptr) or unsets an environment variable while alive, then restores it.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~EnvVar() { if (had_) setenv(name_, old_.c_str(), 1); else unsetenv(name_); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// A fresh directory under the system's temporary one, named after `prefix`, the process and
// the running test; removed, with what it holds, when this goes out of scope.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix) {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + (t ? t->name() : "none"));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Each entry of `a` and `b` bit for bit, with the same names in the same order; `what` says
// which comparison failed.
inline void expect_bit_equal(const ArrayDict& a, const ArrayDict& b, const std::string& what) {
  ASSERT_EQ(a.names(), b.names()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a.value(i).bit_equal(b.value(i))) << what << ": '" << a.name(i) << "' differs";
}

// The replica counts nearest to n, below and above, that divide `batch` (resuming a
// checkpoint at another count needs the global batch to divide over it); below is 0 when
// there is none.
inline std::pair<int, int> dividing_counts_around(int n, int64_t batch) {
  int below = 0, above = n + 1;
  for (int m = n - 1; m >= 1 && below == 0; --m) below = batch % m == 0 ? m : 0;
  while (batch % above != 0) ++above;
  return {below, above};
}

// A copy that shares no buffer with `d` (Arrays copy by reference).
inline ArrayDict deep_copy(const ArrayDict& d) {
  ArrayDict out;
  for (const auto& [name, a] : d) out.set(name, a.clone());
  return out;
}

// Row i of a host array, along axis 0 (example i of a batch).
inline Array row(const Array& a, int64_t i) {
  Array out(a.dtype(), Shape(a.shape().begin() + 1, a.shape().end()));
  std::memcpy(out.raw(), static_cast<const char*>(a.raw()) + out.nbytes() * static_cast<size_t>(i), out.nbytes());
  return out;
}

// Arrays of one shape stacked along a new axis 0 (the inverse of row).
inline Array stack_rows(const std::vector<Array>& rows) {
  Shape s{static_cast<int64_t>(rows.size())};
  s.insert(s.end(), rows[0].shape().begin(), rows[0].shape().end());
  Array out(rows[0].dtype(), s);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + rows[i].nbytes() * i, rows[i].raw(), rows[i].nbytes());
  return out;
}

}  // namespace fjit::testing
