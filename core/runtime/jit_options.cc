// Where jit and pmap read the environment: JitOptions::resolved(), the process-wide defaults
// that stand in for unset options, and the process settings the first jit or pmap applies.
// Every read goes through the table (core/base/config.h); the stages below get the values as
// TraceOptions, CompileOptions or a process-wide setting.
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "core/base/config.h"
#include "core/base/isa.h"
#include "core/base/log.h"
#include "core/base/timeline.h"
#include "core/kernels/gemm/gemm_library.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/runtime/jit_core.h"

namespace fjit {
namespace {

using config::choice_value;
using config::Id;

// Whether a choice row of core/base/config.def lists exactly an enum's values, in its order.
template <class E>
constexpr bool fills(Id id, std::initializer_list<std::pair<std::string_view, E>> values) {
  if (config::choice_count(id) != static_cast<int>(values.size())) return false;
  for (const auto& [spelling, value] : values)
    if (choice_value(id, spelling) != static_cast<int>(value)) return false;
  return true;
}
static_assert(fills<CheckMode>(Id::checks, {{"off", CheckMode::off}, {"user", CheckMode::user},
                                            {"all", CheckMode::all}, {"fpe", CheckMode::fpe}}));
static_assert(fills<CheckPolicy>(Id::on_check_failure, {{"throw", CheckPolicy::throw_error},
                                                        {"skip_step", CheckPolicy::skip_step},
                                                        {"log", CheckPolicy::log}}));
static_assert(fills<Overlap>(Id::overlap, {{"off", Overlap::off}, {"schedule", Overlap::schedule},
                                           {"worker", Overlap::worker}}));
static_assert(fills<Fusion>(Id::fusion, {{"1", Fusion::all}, {"0", Fusion::off},
                                         {"elementwise", Fusion::elementwise},
                                         {"gemm", Fusion::gemm}, {"single", Fusion::single}}));
static_assert(config::row(Id::timeline_steps).fallback == timeline::kDefaultMaxSteps);

std::atomic<int> g_mode{-1}, g_policy{-1}, g_strict{-1};

// A process default: the value a setter stored in `slot`, else read from the table on first
// use (-1: neither yet).
template <class Read>
int read_once(std::atomic<int>& slot, Read read) {
  int v = slot.load();
  if (v < 0) {
    v = static_cast<int>(read());
    slot.store(v);
  }
  return v;
}

}  // namespace

CheckMode default_check_mode() {
  return static_cast<CheckMode>(read_once(g_mode, [] { return config::checks(); }));
}
void set_default_check_mode(CheckMode mode) { g_mode.store(static_cast<int>(mode)); }
CheckPolicy default_check_policy() {
  return static_cast<CheckPolicy>(read_once(g_policy, [] { return config::on_check_failure(); }));
}
void set_default_check_policy(CheckPolicy policy) { g_policy.store(static_cast<int>(policy)); }

void set_strict_unused_parameters(bool strict) { g_strict.store(strict ? 1 : 0); }
bool strict_unused_parameters() {
  return read_once(g_strict, [] { return config::strict_unused() ? 1 : 0; }) == 1;
}

void apply_process_environment() {
  static const bool once = [] {
    const int gemm = config::gemm();
    set_gemm_library_allowed(gemm == choice_value(Id::gemm, "auto"));
    set_packed_gemm_use(gemm == choice_value(Id::gemm, "eigen")  ? PackedGemmUse::never
                        : gemm == choice_value(Id::gemm, "fjit") ? PackedGemmUse::always
                                                                 : PackedGemmUse::without_library);
    const int isa = config::isa();
    // auto or amx: whatever the CPU has; avx512: that without the AMX tiles.
    set_isa_limit(isa == choice_value(Id::isa, "avx2") ? Isa::avx2 : Isa::avx512);
    set_amx_allowed(isa == choice_value(Id::isa, "auto") || isa == choice_value(Id::isa, "amx"));
    if (const std::string path = config::timeline(); !path.empty()) {
      const int steps = static_cast<int>(config::timeline_steps());
      timeline::start(path, steps);
      timeline::write_at_exit();
      log().info("timeline: recording the last {} steps into {}", steps, path);
    }
    return true;
  }();
  (void)once;
}

JitOptions JitOptions::resolved() const {
  JitOptions o = *this;
  // Strict (core/base/config.def): a malformed value throws here, when the jit or pmap is made.
  if (o.recompile_warn_threshold < 0)
    o.recompile_warn_threshold = static_cast<int>(config::recompile_warn());
  if (!o.overlap) o.overlap = static_cast<Overlap>(config::overlap());
  if (!o.gather_prefetch) o.gather_prefetch = config::gather_prefetch() != 0;
  if (o.large_constant_bytes < 0) o.large_constant_bytes = config::large_constant_bytes();
  // Default 1 MiB (why: core/trace/collectives.h); a value below 1024 is raised to 1024.
  if (o.fusion_bytes < 0) o.fusion_bytes = config::fusion_bytes();
  o.fusion_bytes = std::max<int64_t>(1024, o.fusion_bytes);
  if (!o.fusion) o.fusion = static_cast<Fusion>(config::fusion());
  if (!o.dump_dir) o.dump_dir = config::dump_dir();
  if (o.step_timeout_s < 0) o.step_timeout_s = static_cast<double>(config::step_timeout().count()) / 1000.0;
  if (o.while_max_trips < 0) o.while_max_trips = config::while_max_trips();
  return o;
}

}  // namespace fjit
