// handle_step_checks: runs after every step of a plan with check sites, on every replica.
//
// Combining across replicas takes one collective per step: an all_gather of a fixed 24-byte
// summary {step, number of raised sites, number of sites} per replica. Its size does not
// depend on the plan, so replicas always meet in a collective of one size. Only when some
// replica raised (every replica sees that in the summaries, so all of them agree) does a
// second all_gather carry the flag bits and recorded values; that is the cold path, where
// the report is built anyway.
//
// The path where nothing was raised allocates nothing: the summary buffer is thread-local
// and only grows.
#include "checks/host.h"

#include <algorithm>
#include <cstring>

#include "checks/report.h"
#include "core/log.h"
#include "core/metrics.h"
#include "parallel/communicator.h"

namespace fjit {
namespace {

struct Summary {
  int64_t step = 0;
  int64_t raised = 0;
  int64_t sites = 0;
};
thread_local std::vector<Summary> t_summaries;

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
    if (s.payload) std::copy_n(s.payload + i * kMaxCheckValues, kMaxCheckValues, r.values[i].begin());
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
    step = std::min(step, x.step);  // replicas sharing one JitCore count its runs together
  }
  const size_t words = (max_sites + 63) / 64;
  const size_t block = words + static_cast<size_t>(max_sites) * kMaxCheckValues;
  std::vector<uint64_t> send(block, 0), recv(block * size, 0);
  for (int i = 0; i < n; ++i)
    if (s.flags[i]) send[i / 64] |= uint64_t{1} << (i % 64);
  if (s.payload) std::memcpy(send.data() + words, s.payload, sizeof(double) * n * kMaxCheckValues);
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
        std::memcpy(r.values[i].data(), b + words + i * kMaxCheckValues, sizeof(double) * kMaxCheckValues);
      r.replicas[i].push_back(rep);
    }
  return r;
}

}  // namespace

bool handle_step_checks(const StepChecks& s) {
  const int n = s.exe->num_check_sites();
  const int mine = count_raised(s.flags, n);
  const bool replicated = s.comm && s.comm->size() > 1;
  bool any = mine > 0;
  if (replicated) {
    const Summary me{s.step, mine, n};
    t_summaries.resize(s.comm->size());
    s.comm->all_gather(&me, t_summaries.data(), sizeof(Summary));
    for (const Summary& x : t_summaries) any = any || x.raised > 0;
  }
  if (!any) return false;

  // Cold path from here on.
  metrics().checks_raised.fetch_add(mine, std::memory_order_relaxed);
  const std::vector<Summary> all = replicated ? t_summaries : std::vector<Summary>{};
  const RaisedChecks raised = replicated ? gather_checks(s, n, all) : local_checks(s, n);
  std::string report = format_check_report(*s.exe, raised, s.function, s.policy);
  for (const Summary& x : all)
    if (x.sites != n) {
      report += "\n  (replicas run plans with different numbers of checks; site numbers are this replica's)";
      break;
    }
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

}  // namespace fjit
