// The op sweep: every op's fast kernel against its reference kernel. The cases live in
// op_sweep_*.inc next to this file (one per kernel family); this file asserts coverage.
#include "tests/op_sweep_harness.h"

#if __has_include("tests/op_sweep_elementwise.inc")
#include "tests/op_sweep_elementwise.inc"
#endif
#if __has_include("tests/op_sweep_structural.inc")
#include "tests/op_sweep_structural.inc"
#endif
#if __has_include("tests/op_sweep_sharding.inc")
#include "tests/op_sweep_sharding.inc"
#endif
#if __has_include("tests/op_sweep_cumsum_top_k.inc")
#include "tests/op_sweep_cumsum_top_k.inc"
#endif
#if __has_include("tests/op_sweep_nn.inc")
#include "tests/op_sweep_nn.inc"
#endif
#if __has_include("tests/op_sweep_xent.inc")
#include "tests/op_sweep_xent.inc"
#endif
#if __has_include("tests/op_sweep_check.inc")
#include "tests/op_sweep_check.inc"
#endif
#if __has_include("tests/op_sweep_bf16.inc")
#include "tests/op_sweep_bf16.inc"
#endif
#if __has_include("tests/op_sweep_control.inc")
#include "tests/op_sweep_control.inc"
#endif

namespace fjit {
namespace {

TEST(OpSweep, EveryOpInTheTableIsCovered) {
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    Op op = static_cast<Op>(i);
    if (op == Op::Parameter) continue;  // no kernel: its buffer is the caller's input
    if (!sweep::covered().count(op)) missing += std::string(" ") + op_name(op);
  }
  EXPECT_TRUE(missing.empty()) << "ops without a sweep case:" << missing;
}

}  // namespace
}  // namespace fjit
