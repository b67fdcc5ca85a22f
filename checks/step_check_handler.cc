// handle_step_checks: runs after every step of a plan with check sites, on every replica.
//
// Combining across replicas costs one collective per step on the common path: an all-reduce
// (max) of one int32, this replica's number of raised sites, so every replica learns whether
// any replica raised. Its size does not depend on the plan, so replicas always meet in a
// collective of one size, and it is as small as a collective gets (the yardstick is
// a one-int MPI_Allreduce). Only when some replica raised (every replica sees the same max,
// so all of them take the cold path together) do two all-gathers follow: a 24-byte summary
// {step, raised, sites} per replica, then the flag bits and recorded values sized for the
// largest plan. The report is built there anyway, so their cost does not matter.
//
// The path where nothing was raised allocates nothing.
#include "checks/step_check_handler.h"

#include <algorithm>
#include <cstring>

#include "checks/replay_bundle.h"
#include "checks/report.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/base/timeline.h"
#include "core/kernels/collective/communicator.h"

namespace fjit {
namespace {

struct Summary {
  int64_t step = 0;
  int64_t raised = 0;
  int64_t sites = 0;
};

int count_raised(const uint32_t* flags, int n) {
  int raised = 0;
  for (int i = 0; i < n; ++i) raised += flags[i] != 0;
  return raised;
}

RaisedChecks local_checks(const StepChecks& s, int n) {
  RaisedChecks r;
  r.step = s.step;
  r.replicas.resize(n);
  r.values.resize(n);
  for (int i = 0; i < n; ++i) {
    if (!s.flags[i]) continue;
    r.replicas[i].push_back(s.replica);
    if (s.payload) std::copy_n(s.payload + i * kCheckPayloadSlots, kCheckPayloadSlots, r.values[i].begin());
  }
  return r;
}

// The second exchange: every replica's flag bits and values, sized for the largest plan.
RaisedChecks gather_checks(const StepChecks& s, int n, const std::vector<Summary>& all) {
  Communicator& comm = *s.comm;
  const int size = comm.size();
  int64_t max_sites = 0, step = all[0].step;
  for (const Summary& x : all) {
    max_sites = std::max(max_sites, x.sites);
    step = std::min(step, x.step);  // equal under pmap; callers of JitCore::run pass one step
  }
  const size_t words = (max_sites + 63) / 64;
  const size_t block = words + static_cast<size_t>(max_sites) * kCheckPayloadSlots;
  std::vector<uint64_t> send(block, 0), recv(block * size, 0);
  for (int i = 0; i < n; ++i)
    if (s.flags[i]) send[i / 64] |= uint64_t{1} << (i % 64);
  if (s.payload) std::memcpy(send.data() + words, s.payload, sizeof(double) * n * kCheckPayloadSlots);
  comm.all_gather(send.data(), recv.data(), block * sizeof(uint64_t));

  RaisedChecks r;
  r.step = step;
  r.num_replicas = size;
  r.replicas.resize(n);
  r.values.resize(n);
  for (int i = 0; i < n; ++i)
    for (int rep = 0; rep < size; ++rep) {
      const uint64_t* b = recv.data() + rep * block;
      if (i >= all[rep].sites || !(b[i / 64] >> (i % 64) & 1)) continue;
      if (r.replicas[i].empty())
        std::memcpy(r.values[i].data(), b + words + i * kCheckPayloadSlots, sizeof(double) * kCheckPayloadSlots);
      r.replicas[i].push_back(rep);
    }
  return r;
}

}  // namespace

bool handle_step_checks(const StepChecks& s) {
  const int n = s.exe->num_check_sites();
  const int mine = count_raised(s.flags, n);
  const bool replicated = s.comm && s.comm->size() > 1;
  int32_t any = mine;
  if (replicated) s.comm->all_reduce(&any, 1, DType::i32, ReduceOp::max);
  if (any == 0) return false;

  // Cold path from here on: every replica gets here in the same step.
  metrics().checks_raised.fetch_add(mine, std::memory_order_relaxed);
  std::vector<Summary> all;
  if (replicated) {
    const Summary me{s.step, mine, n};
    all.resize(s.comm->size());
    s.comm->all_gather(&me, all.data(), sizeof(Summary));
  }
  const RaisedChecks raised = replicated ? gather_checks(s, n, all) : local_checks(s, n);
  if (s.raised_kinds)
    for (int i = 0; i < n; ++i)
      if (raised.raised(i)) *s.raised_kinds |= uint64_t{1} << static_cast<unsigned>(s.exe->check_sites[i].kind);
  std::string report = format_check_report(*s.exe, raised, s.function, s.policy);
  timeline::instant("check raised", report);
  for (const Summary& x : all)
    if (x.sites != n) {
      report += "\n  (replicas run plans with different numbers of checks; site numbers are this replica's)";
      break;
    }
  // Replay bundles (checks/replay_bundle.h): every replica writes its part, before the policy.
  if (check_dump_enabled()) write_replay_bundle(s, report, mine > 0);
  const bool reporter = !s.comm || s.comm->rank() == 0;  // one log entry per step, not one per replica
  switch (s.policy) {
    case CheckPolicy::throw_error:
      if (reporter) log().error("{}", report);
      throw CheckError(report, raised.step);
    case CheckPolicy::skip_step:
      if (reporter) log().warn("{}\n  step skipped: its outputs are discarded, the previous state is kept", report);
      return true;
    case CheckPolicy::log:
      if (reporter) log().warn("{}", report);
      return false;
  }
  return false;
}

namespace detail {
bool install_step_check_handler() {
  set_step_check_handler(&handle_step_checks);
  return true;
}
}  // namespace detail

}  // namespace fjit
