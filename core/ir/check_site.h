// CheckSite: what fjit records at trace time for one check (a user check() or an automatic
// check on an op's result). Each site owns one flag in the step's flag vector.
#pragma once

#include <string>
#include <vector>

#include "core/ir/check_kind.h"
#include "core/ir/node.h"

namespace fjit {

// The most values one check records with its flag (a user check's scalars, an automatic
// check's summary: core/ir/check_payload.h).
inline constexpr int kMaxCheckValues = 4;
// The payload a site records: its values, then one slot for the iteration of the innermost
// scan or fori_loop the check ran in, plus one (0: not in a loop).
inline constexpr int kCheckPayloadSlots = kMaxCheckValues + 1;
inline constexpr int kIterationSlot = kMaxCheckValues;

// fpe: user checks plus the CPU's floating-point exception flags around every instruction
// (checks/fpe_report.h).
enum class CheckMode : uint8_t { off = 0, user = 1, all = 2, fpe = 3 };
const char* check_mode_name(CheckMode m);

// What the host does when a step raised a check (FJIT_ON_CHECK_FAILURE=throw|skip_step|log).
enum class CheckPolicy : uint8_t { throw_error = 0, skip_step = 1, log = 2 };
const char* check_policy_name(CheckPolicy p);

struct CheckSite {
  CheckKind kind = CheckKind::user;
  std::string format;           // "loss {} is too large"; {} are filled with values in order
  int num_values = 0;           // values captured with the flag (<= kMaxCheckValues)
  std::string op;               // for automatic checks: the op that produced the bad value
  Site site;                    // where check() was called / the op was created
  std::vector<int> upstream;    // ids of sites whose checked values feed this one
  int node = -1;                // the check node in the traced graph; -1 inside a region
                                // (a loop body or branch: no upstream links)
  // The innermost loop around the check ("scan", "fori_loop"; empty: none) and its call site:
  // the report names the iteration that raised it.
  std::string loop;
  Site loop_site;
};

}  // namespace fjit
