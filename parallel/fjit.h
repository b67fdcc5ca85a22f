// fjit: the one header users include (the umbrella target fjit::fjit puts it on the include
// path as "fjit.h"). It sits with the top layer because it includes all three.
//
//   #include "fjit.h"
//   using namespace fjit;
//   auto step = jit([](const Params& p, const Tensor& x) { ... });
#pragma once

#include "checks/check.h"
#include "checks/replay.h"
#include "checks/step_check_handler.h"
#include "core/autodiff/autodiff.h"
#include "core/compile/compiler.h"
#include "core/ir/array.h"
#include "core/lib/accumulate.h"
#include "core/lib/checkpoint.h"
#include "core/lib/data.h"
#include "core/lib/idx.h"
#include "core/lib/initializers.h"
#include "core/lib/layers.h"
#include "core/lib/optimizers.h"
#include "core/lib/progress.h"
#include "core/lib/schedules.h"
#include "core/runtime/jit.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/base/threads.h"
#include "core/trace/collectives.h"
#include "core/trace/control_flow.h"
#include "core/trace/dict.h"
#include "core/trace/nn.h"
#include "core/trace/ops.h"
#include "core/trace/random.h"
#include "core/trace/tensor.h"
#include "parallel/join.h"
#include "parallel/pmap.h"
