// CheckSite: what fjit records at trace time for one check (a user check() or an automatic
// check on an op's result). Each site owns one flag in the step's flag vector.
#pragma once

#include <string>
#include <vector>

#include "core/ir/node.h"

namespace fjit {

// The most values one check records with its flag (a user check's scalars, an automatic
// check's summary: core/ir/check_payload.h).
inline constexpr int kMaxCheckValues = 4;

enum class CheckMode : uint8_t { off = 0, user = 1, all = 2 };
const char* check_mode_name(CheckMode m);

// What the host does when a step raised a check (FJIT_ON_CHECK_FAILURE=throw|skip_step|log).
enum class CheckPolicy : uint8_t { throw_error = 0, skip_step = 1, log = 2 };
const char* check_policy_name(CheckPolicy p);

enum class CheckKind : uint8_t { user, nan, inf, div_by_zero, index_out_of_range, log_domain, sqrt_domain };
const char* check_kind_name(CheckKind k);

struct CheckSite {
  CheckKind kind = CheckKind::user;
  std::string format;           // "loss {} is too large"; {} are filled with values in order
  int num_values = 0;           // values captured with the flag (<= kMaxCheckValues)
  std::string op;               // for automatic checks: the op that produced the bad value
  Site site;                    // where check() was called / the op was created
  std::vector<int> upstream;    // ids of sites whose checked values feed this one
  int node = -1;                // the check node in the traced graph
};

}  // namespace fjit
