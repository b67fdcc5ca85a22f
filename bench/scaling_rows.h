// The timing machinery of bench/scaling_bench.cc: rows (ways of running a training step on
// one replica or on two), timed in interleaved rounds, and what is printed from them.
//
// time_rows() runs one block of every row per round, in order, `rounds` times, so the blocks
// of one round ran within a second or two of each other. Every figure that compares two rows
// is taken per round and then summarised by the median and quartiles of the rounds: the
// machine's drift (another tenant, clocks) cancels within a round, where a ratio of two
// medians taken over the whole run keeps it.
//
// Under MPI every rank calls every function here (they meet in collectives); a row that is
// not all_ranks runs on rank 0 alone while the other rank waits, asleep, in Ranks::idle.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/mpi_communicator.h"

namespace fjit::bench {

struct Ranks {
  bool mpi = false;
  int rank = 0, size = 1;
  // REQUIRES under MPI: a communicator over every rank whose barrier sleeps while it waits,
  // so that a rank idling there leaves its core to the row that runs.
  MpiCommunicator* idle = nullptr;
};

struct Row {
  Row(std::string name, bool all_ranks, std::function<void(int)> run)
      : name(std::move(name)), all_ranks(all_ranks), run(std::move(run)) {}

  std::string name;
  bool all_ranks = false;        // false: rank 0 alone, the other ranks wait
  std::function<void(int)> run;  // runs that many steps
  std::vector<double> ms;        // per step, one entry per round (rank 0's clock)
  // Per round: the CPU that other processes on this machine used during the timed block, in
  // cores (their CPU seconds over the block's wall seconds). Well above zero, another tenant
  // took cores from this row, and its times say more about the tenant than about the row.
  std::vector<double> others;
  // What metrics() recorded in this process during the row's timed blocks.
  int64_t steps = 0, plan_runs = 0, execute_ns = 0, allreduce_ns = 0, collective_ns = 0;
};

// Median and quartiles over `rounds` rounds.
struct Spread {
  double median = 0, low = 0, high = 0;
  int rounds = 0;
};

// A round in which another process took more than this many cores during the block of any
// row compared is left out of the comparison (unless every round is: then none is). The
// machine's CPU time is counted in clock ticks, so a block of 100 ms reads 0.1 cores for one
// stray tick.
inline constexpr double kBusyOthers = 0.2;

// Runs every row: `rounds` rounds, each a block of `warm` untimed steps (the block before may
// have been another row's, and the first steps after it pay for cold caches) and `steps`
// timed ones per row.
void time_rows(std::vector<Row>& rows, const Ranks& ranks, int rounds, int steps, int warm);

// The row called `name`; aborts when there is none (a misspelt name is a bug of the bench).
const Row& row(const std::vector<Row>& rows, const std::string& name);
double median(std::vector<double> v);

// The quiet rounds' own t(one) / t(two).
Spread efficiency(const Row& one, const Row& two);
// The quiet rounds' own efficiency of (one, two) over that of (ceiling_one, ceiling_two).
Spread efficiency_ratio(const Row& one, const Row& two, const Row& ceiling_one,
                        const Row& ceiling_two);

// Rank 0 prints these; the header names the columns of print_efficiency_line(), which ends
// with the median of Row::others of the 1-replica and the 2-replica row.
void print_efficiency_header();
void print_efficiency_line(const char* name, const Row& one, const Row& two);
// A "RESULT" line (bench/run_all.sh collects it into the summary): fjit's efficiency over the
// ceiling's, per round, against `target`, and the largest median Row::others of the four rows.
void print_ceiling_line(const char* what, const Row& one, const Row& two, const Row& ceiling_one,
                        const Row& ceiling_two, double target);

// Where a step of `r` went in each process, from metrics(): the plans' execution (which
// contains their collectives), the gradient and loss all-reduces inside them (wall time, so
// waiting for the slower replica counts), and the other collectives (pmap's per-step
// all-gather of program fingerprints and shard sizes). Every rank calls it.
void print_breakdown(const Row& r, const Ranks& ranks);

}  // namespace fjit::bench
