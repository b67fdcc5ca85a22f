// fjit: the one header users include.
//
//   #include "fjit.h"
//   using namespace fjit;
//   auto step = jit([](const Params& p, const Tensor& x) { ... });
#pragma once

#include "core/array.h"
#include "core/compiler.h"
#if __has_include("core/init.h")
#include "core/init.h"
#endif
#include "core/jit.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "core/tree.h"
#if __has_include("core/autodiff.h")
#include "core/autodiff.h"
#endif
#if __has_include("core/optimizers.h")
#include "core/optimizers.h"
#endif
#if __has_include("checks/check.h")
#include "checks/check.h"
#endif
#include "checks/host.h"
#if __has_include("parallel/pmap.h")
#include "parallel/pmap.h"
#endif
