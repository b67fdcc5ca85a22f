// Stuck replicas say what they are doing (core/base/activity.h, checks/activity_report.h,
// parallel/shm_communicator.cc): when a thread replica's collective stalls, the report names,
// for every replica, the plan instruction it is in (op, types, call site) and the collective
// it waits in, and lists the host's threads with their stacks. The oracle is the test's own
// seam: it makes replica 1 sleep inside the instruction it chooses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "core/compile/kernel_sleep_testing.h"
#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

Tensor step_fn(const Params& p, const Tensor& x) {
  Tensor h = matmul(x, p["w"]);
  return psum(sum(h), "batch");
}

// Runs one step on two thread replicas with replica 1 asleep inside its first `op`
// instruction for longer than the stall warning; returns the log.
std::string stalled_step_log(Op op) {
  setenv("FJIT_STALL_WARN_S", "0.3", 1);
  setenv("FJIT_STALL_ABORT_S", "0", 1);
  Mesh mesh = Mesh::threads(2);
  PmapOptions o;
  o.jit.name = "stalled_step";
  auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& x) { return std::tuple{step_fn(p, x)}; }, o);
  ArrayDict w;
  w.set("w", Array::full(DType::f32, {3, 5}, 0.5));
  const ArrayDict p = mesh.replicate(w);
  const Array x = Array::full(DType::f32, {4, 3}, 1.0);
  step(p, x);  // compiles, and makes the communicators under the limits above
  testing::LogCapture capture;
  // Long beside the warning: the report itself (symbolized stacks) can take a second under a
  // sanitizer on a loaded machine, and replica 1 must still be asleep when it is read.
  testing::sleep_in_kernel(1, op, 3.0);
  auto [total] = step(p, x);
  EXPECT_FLOAT_EQ(total.item<float>(), 4 * 5 * 1.5f) << "the step still completes";
  unsetenv("FJIT_STALL_WARN_S");
  unsetenv("FJIT_STALL_ABORT_S");
  return capture.text();
}

bool has(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

TEST(StallReport, AReplicaInALongKernelIsNamedWithItsInstruction) {
  const std::string log = stalled_step_log(Op::MatMul);
  EXPECT_TRUE(has(log, "stall: replica 0 of 2 \\(threads\\) has waited [0-9.]+ s in all_reduce")) << log;
  EXPECT_TRUE(has(log, "replica 1: in instruction [0-9]+ of [0-9]+: matmul f32\\[2,5\\] <- f32\\[2,3\\], f32\\[3,5\\], "
                       "at [^\\n]*tests/stall_report_test.cc:[0-9]+ in "))
      << log;
  EXPECT_TRUE(has(log, "replica 1: [^\\n]*(\\n    [^\\n]*)*\\n    not in a collective")) << log;
  EXPECT_TRUE(has(log, "replica 0: in instruction [0-9]+ of [0-9]+: all_reduce f32\\[\\] <- f32\\[\\], at "
                       "[^\\n]*tests/stall_report_test.cc:[0-9]+ in [^\\n]*\\(axis 'batch'\\)\\n    user stack:\\n      at step_fn"))
      << log;
  EXPECT_TRUE(has(log, "waiting in all_reduce #[0-9]+ \\(axis 'batch', 4 bytes\\) for the other replicas")) << log;
  EXPECT_TRUE(has(log, "host stacks \\(pid [0-9]+\\):\\n  thread [0-9]+ ")) << log;
  EXPECT_TRUE(has(log, "\\(this thread\\)")) << log;
}

TEST(StallReport, AReplicaStoppedBeforeACollectiveIsNamedWithIt) {
  const std::string log = stalled_step_log(Op::AllReduce);
  EXPECT_TRUE(has(log, "replica 1: in instruction [0-9]+ of [0-9]+: all_reduce f32\\[\\] <- f32\\[\\], at "
                       "[^\\n]*tests/stall_report_test.cc:[0-9]+ in [^\\n]*\\(axis 'batch'\\)\\n(    [^\\n]*\\n)*    not in a collective"))
      << log;
  EXPECT_TRUE(has(log, "replica 0: [^\\n]*all_reduce[^\\n]*\\n(    [^\\n]*\\n)*    waiting in all_reduce #[0-9]+ "
                       "\\(axis 'batch', 4 bytes\\)"))
      << log;
}

}  // namespace
}  // namespace fjit
