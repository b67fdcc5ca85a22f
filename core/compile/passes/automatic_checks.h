// Automatic checks (CheckMode::all): after tracing, a check is added for every op result that
// can go bad — NaN and Inf in floating-point results, division by zero, gather indices out of
// range, log or sqrt of a negative number — attributed to the op and the stack where the user
// created it.
#pragma once

#include <vector>

#include "core/ir/check_site.h"
#include "core/ir/graph.h"

namespace fjit {

// Appends check nodes (and their sites) for the nodes of `g` that feed its outputs or effects.
void add_automatic_checks(Graph& g, std::vector<CheckSite>& sites);

}  // namespace fjit
