// The elastic launcher (fjit_launch, examples/fjit_launch.cc): runs a training command under
// mpirun over a host list and, when the job fails, drops the hosts that failed and runs it
// again on the survivors from the latest complete checkpoint, a bounded number of times.
//
// One attempt: mpirun --hostfile <survivors> -np <their slots> --mca orte_tmpdir_base MARKER
// -x FJIT_LAUNCH_JOB=MARKER [--mca plm_rsh_agent AGENT] <mpirun_args> <command> [--resume],
// where MARKER (<tmpdir>/fjit_launch.<pid>.<attempt>) names every process of that attempt on
// every host: OpenMPI's daemons carry it on their command line, the ranks in their
// environment. mpirun's output is copied to the launcher's, line by line.
//
// An attempt has failed when mpirun exits non-zero, when it still runs `abort_grace_s` after
// the first abort line (fjit's "aborting the job", mpirun's "MPI_ABORT was invoked" or
// "noticed that process rank"; OpenMPI's mpirun can wait for ever on a daemon across a
// network split), or when it prints nothing for `progress_timeout_s` (when set). Then:
//   - what is left of mpirun's process group is killed (SIGKILL);
//   - every host is probed through the rsh agent (`AGENT HOST true`, `probe_timeout_s`);
//     a host is dropped when the probe fails, or when the attempt's output named it as failed
//     (hosts_named_as_failed: fjit's "not arrived" ranks, mpirun's lost daemon or killed rank);
//   - on every reachable host, every process carrying the marker is killed (daemon, ranks)
//     and its session directory removed; hosts out of reach are retried before each later
//     attempt and at the end, and named if they stay out of reach;
//   - the latest checkpoint in the command's --checkpoint-dir is read and its checksum
//     checked (checkpoints are written to a temporary file, synced, and renamed: a torn
//     file is never under a checkpoint's name; one that fails its checksum all the same is
//     renamed to <name>.torn so that the trainer's --resume picks the one before);
//   - the command runs again on the survivors with --resume; the replica count is the
//     survivors' slots, and the trainer resumes at it (or refuses, naming why).
// After `max_restarts` restarts, or with no host left, it stops with a message and mpirun's
// last exit status.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "parallel/launch/hosts.h"

namespace fjit::launch {

struct LaunchOptions {
  std::vector<Host> hosts;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;  // passed to mpirun before the command
  std::string rsh_agent;                 // split on spaces; "" = ssh, and mpirun's own default
  std::vector<std::string> command;      // the training command and its arguments
  int max_restarts = 3;
  double probe_timeout_s = 10;
  double abort_grace_s = 15;
  double progress_timeout_s = 0;  // 0 = off
  std::string tmpdir = "/tmp";
};

// Parses `fjit_launch [options] -- COMMAND...` (argv without the program name); throws
// std::invalid_argument naming the bad option. `help` is set for -h/--help.
LaunchOptions parse_launch_args(const std::vector<std::string>& args, bool& help);
std::string launch_usage();

// The value of --checkpoint-dir in `command` ("" when it has none).
std::string checkpoint_dir_of(const std::vector<std::string>& command);

// Runs the job as described above; returns 0 when an attempt succeeded, else the last
// attempt's exit status (1 when it had none). Progress and decisions go to `log`.
int run_elastic(const LaunchOptions& options, std::ostream& log);

}  // namespace fjit::launch
