#include "bench/scaling_rows.h"

#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string>

#include "core/base/metrics.h"

namespace fjit::bench {
namespace {

using Clock = std::chrono::steady_clock;

Spread spread(std::vector<double> r) {
  std::sort(r.begin(), r.end());
  if (r.empty()) return {};
  return {r[r.size() / 2], r[r.size() / 4], r[(3 * r.size()) / 4], static_cast<int>(r.size())};
}

// Busy CPU seconds of the whole machine (every process, /proc/stat, in clock ticks) and of
// this process (getrusage).
struct CpuTimes {
  double machine = 0, own = 0;
};
CpuTimes cpu_times() {
  CpuTimes t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)
    t.machine =
        (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  t.own =
      ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return t;
}

}  // namespace

void time_rows(std::vector<Row>& rows, const Ranks& ranks, int rounds, int steps, int warm) {
  const Metrics& m = metrics();
  for (int round = 0; round < rounds; ++round) {
    for (Row& r : rows) {
      const bool runs_here = r.all_ranks || ranks.rank == 0;
      if (runs_here) r.run(warm);
      if (ranks.mpi) MPI_Barrier(MPI_COMM_WORLD);
      const int64_t runs = m.execute_time.count(), ex = m.execute_time.total_ns(),
                    ar = m.allreduce_time.total_ns(), co = m.collective_time.total_ns();
      const CpuTimes cpu0 = cpu_times();
      const auto start = Clock::now();
      if (runs_here) r.run(steps);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      const CpuTimes cpu1 = cpu_times();
      // Every rank's own CPU time is summed on rank 0, which reads the machine's.
      double own = cpu1.own - cpu0.own;
      if (ranks.mpi)
        MPI_Reduce(ranks.rank == 0 ? MPI_IN_PLACE : &own, &own, 1, MPI_DOUBLE, MPI_SUM, 0,
                   MPI_COMM_WORLD);
      r.others.push_back(std::max(0.0, cpu1.machine - cpu0.machine - own) / (ms * 1e-3));
      r.steps += steps;
      r.plan_runs += m.execute_time.count() - runs;
      r.execute_ns += m.execute_time.total_ns() - ex;
      r.allreduce_ns += m.allreduce_time.total_ns() - ar;
      r.collective_ns += m.collective_time.total_ns() - co;
      if (!r.all_ranks && ranks.mpi) ranks.idle->barrier();
      r.ms.push_back(ms / steps);
    }
  }
}

const Row& row(const std::vector<Row>& rows, const std::string& name) {
  for (const Row& r : rows)
    if (r.name == name) return r;
  std::fprintf(stderr, "scaling_bench: no row '%s'\n", name.c_str());
  std::abort();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<size_t> quiet_rounds(std::initializer_list<const Row*> rows) {
  size_t n = SIZE_MAX;
  for (const Row* r : rows) n = std::min({n, r->ms.size(), r->others.size()});
  std::vector<size_t> quiet, all;
  for (size_t i = 0; i < n; ++i) {
    all.push_back(i);
    bool busy = false;
    for (const Row* r : rows) busy |= r->others[i] > kBusyOthers;
    if (!busy) quiet.push_back(i);
  }
  return quiet.empty() ? all : quiet;
}

Spread efficiency(const Row& one, const Row& two) {
  std::vector<double> r;
  for (size_t i : quiet_rounds({&one, &two})) r.push_back(one.ms[i] / two.ms[i]);
  return spread(std::move(r));
}

Spread efficiency_ratio(const Row& one, const Row& two, const Row& ceiling_one,
                        const Row& ceiling_two) {
  std::vector<double> r;
  for (size_t i : quiet_rounds({&one, &two, &ceiling_one, &ceiling_two}))
    r.push_back((one.ms[i] / two.ms[i]) / (ceiling_one.ms[i] / ceiling_two.ms[i]));
  return spread(std::move(r));
}

void print_efficiency_header() {
  std::printf("%-26s %10s %10s %11s %16s %7s %14s\n", "", "t(1) ms", "t(2) ms", "t(1)/t(2)",
              "quartiles", "rounds", "others (1, 2)");
}

void print_efficiency_line(const char* name, const Row& one, const Row& two) {
  const Spread e = efficiency(one, two);
  std::printf("%-26s %10.3f %10.3f %10.1f%%   %5.1f%% - %5.1f%% %7d    %4.2f, %4.2f\n", name,
              median(one.ms), median(two.ms), e.median * 100, e.low * 100, e.high * 100, e.rounds,
              median(one.others), median(two.others));
}

void print_ceiling_line(const char* what, const Row& one, const Row& two, const Row& ceiling_one,
                        const Row& ceiling_two, double target) {
  const Spread r = efficiency_ratio(one, two, ceiling_one, ceiling_two);
  double others = 0;
  for (const Row* x : {&one, &two, &ceiling_one, &ceiling_two})
    others = std::max(others, median(x->others));
  std::printf(
      "RESULT weak scaling fjit/ceiling, %-11s | %.3fx (quartiles %.3f-%.3f; "
      "efficiency fjit %.1f%%, ceiling %.1f%%; %d quiet rounds, others %.2f cores) | "
      "target >= %.2fx: %s\n",
      what, r.median, r.low, r.high, efficiency(one, two).median * 100,
      efficiency(ceiling_one, ceiling_two).median * 100, r.rounds, others, target,
      r.median >= target ? "met" : "NOT met");
}

void print_breakdown(const Row& r, const Ranks& ranks) {
  const double steps = r.steps > 0 ? static_cast<double>(r.steps) : 1;
  const double runs = r.plan_runs > 0 ? static_cast<double>(r.plan_runs) : 1;
  double mine[4] = {r.execute_ns * 1e-6 / runs, r.plan_runs / steps, r.allreduce_ns * 1e-6 / steps,
                    r.collective_ns * 1e-6 / steps};
  std::vector<double> all(4 * static_cast<size_t>(ranks.size));
  if (ranks.mpi)
    MPI_Gather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  else
    std::copy(mine, mine + 4, all.begin());
  if (ranks.rank != 0) return;
  std::printf("\n'%s', mean over %lld steps (median block %.3f ms a step):\n", r.name.c_str(),
              static_cast<long long>(r.steps), median(r.ms));
  for (int k = 0; k < ranks.size; ++k) {
    const double* a = &all[4 * static_cast<size_t>(k)];
    std::printf(
        "  %s %d: plan %.3f ms per run, %.0f run(s) per step; per step: all-reduce %.3f ms "
        "(wait included), other collectives %.3f ms\n",
        ranks.mpi ? "rank" : "process", k, a[0], a[1], a[2], a[3]);
  }
}

}  // namespace fjit::bench
