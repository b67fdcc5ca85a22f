// The checks layer's step-check handler (core/runtime/step_checks.h): after every step of a
// plan with check sites, combine the flag vectors of all replicas (so every replica reacts at
// the same step), report every raised check, and apply the policy.
#pragma once

#include "core/runtime/step_checks.h"

namespace fjit {

// The handler. Must be called by every replica of a communicator after every step, whether or
// not it raised anything: when nothing raised anywhere it costs one all-reduce of one int32
// and allocates nothing.
bool handle_step_checks(const StepChecks& s);

namespace detail {
// Installs handle_step_checks with set_step_check_handler; returns true.
bool install_step_check_handler();
// Every program that includes this header (fjit.h does) installs the handler before main().
inline const bool kStepCheckHandlerInstalled = install_step_check_handler();
}  // namespace detail

}  // namespace fjit
