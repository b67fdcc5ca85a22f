// The elastic launcher's loop (declared in parallel/launch/launcher.h).
#include "parallel/launch/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/io/checkpoint.h"
#include "parallel/launch/child_process.h"

namespace fjit::launch {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<std::string> agent_argv(const LaunchOptions& o) {
  std::vector<std::string> argv;
  std::stringstream words(o.rsh_agent.empty() ? std::string("ssh") : o.rsh_agent);
  for (std::string w; words >> w;) argv.push_back(w);
  return argv;
}

bool abort_line(const std::string& line) {
  return line.find("aborting the job") != std::string::npos ||
         line.find("MPI_ABORT was invoked") != std::string::npos ||
         line.find("noticed that process rank") != std::string::npos ||
         line.find("lost communication with a remote daemon") != std::string::npos;
}

struct Attempt {
  int status = 0;
  std::set<std::string> named;  // hosts the output named as failed
  std::string ended_because;    // "" when mpirun ended by itself
};

Attempt watch(const std::vector<std::string>& argv, const LaunchOptions& o, std::ostream& log) {
  Attempt a;
  Child mpirun(argv);
  const Clock::time_point started = Clock::now();
  Clock::time_point last_output = started;
  std::optional<Clock::time_point> first_abort;
  std::vector<std::string> lines;
  bool open = true;
  auto take = [&] {
    for (const std::string& line : lines) {
      std::fputs((line + "\n").c_str(), stdout);
      const std::set<std::string> named = hosts_named_as_failed(line, o.hosts);
      a.named.insert(named.begin(), named.end());
      if (!first_abort && abort_line(line)) first_abort = Clock::now();
    }
    std::fflush(stdout);
    if (!lines.empty()) last_output = Clock::now();
    lines.clear();
  };
  while (true) {
    if (open) open = mpirun.read_lines(0.2, lines);
    else std::this_thread::sleep_for(std::chrono::milliseconds(200));
    take();
    if (mpirun.poll_exit()) break;
    if (first_abort && seconds_since(*first_abort) > o.abort_grace_s) {
      a.ended_because = fmt::format("mpirun still ran {:g} s after the first abort", o.abort_grace_s);
      break;
    }
    if (o.progress_timeout_s > 0 && seconds_since(last_output) > o.progress_timeout_s) {
      a.ended_because = fmt::format("the job printed nothing for {:g} s", o.progress_timeout_s);
      break;
    }
  }
  if (!a.ended_because.empty()) log << "fjit_launch: " << a.ended_because << ": ending mpirun\n" << std::flush;
  // Ended by the launcher: SIGKILL at once (OpenMPI's mpirun can crash on SIGTERM while an
  // abort is under way); the marker's clean-up then ends what it started on each host.
  a.status = mpirun.end_group(a.ended_because.empty() ? 3 : 0);
  for (size_t before = lines.size() + 1; open && before != lines.size();) {
    before = lines.size();
    open = mpirun.read_lines(0.05, lines);
  }
  take();
  if (!a.ended_because.empty() && a.status == 0) a.status = 1;
  return a;
}

// Kills every process of the attempt named by `marker` on `host` through the agent and
// removes its session directory; false when the host did not answer in time.
bool clean_host(const LaunchOptions& o, const std::string& host, const std::string& marker) {
  // Only processes in the agent's own network namespace: on a real host that is all of them,
  // in the namespace-simulated hosts of the tests only that host's.
  const std::string script = fmt::format(
      "m='{}'; me=$(readlink /proc/$$/ns/net); for d in /proc/[0-9]*; do p=${{d#/proc/}}; "
      "[ \"$p\" = $$ ] && continue; [ \"$(readlink $d/ns/net 2>/dev/null)\" = \"$me\" ] || continue; "
      "if tr '\\000' '\\n' < $d/cmdline 2>/dev/null | grep -qxF \"$m\" || "
      "tr '\\000' '\\n' < $d/environ 2>/dev/null | grep -qxF \"FJIT_LAUNCH_JOB=$m\"; then "
      "kill -KILL $p 2>/dev/null; fi; done; rm -rf \"$m\"; true",
      marker);
  std::vector<std::string> argv = agent_argv(o);
  argv.push_back(host);
  argv.push_back(script);
  const std::optional<int> status = run_bounded(argv, o.probe_timeout_s);
  return status && *status == 0;
}

bool probe(const LaunchOptions& o, const std::string& host) {
  std::vector<std::string> argv = agent_argv(o);
  argv.push_back(host);
  argv.push_back("true");
  const std::optional<int> status = run_bounded(argv, o.probe_timeout_s);
  return status && *status == 0;
}

// The latest checkpoint in `dir` whose checksum holds ("" when none); one that fails it is
// renamed to <name>.torn, so that the trainer's --resume takes the one before.
std::string latest_complete_checkpoint(const std::string& dir, std::ostream& log) {
  while (true) {
    const std::string path = io::latest_checkpoint(dir);
    if (path.empty()) return "";
    try {
      const io::Checkpoint ck = io::load_checkpoint(path);
      io::require_checksum(ck, "so it cannot be resumed from");
      return path;
    } catch (const std::exception& e) {
      log << "fjit_launch: " << e.what() << ": set aside as " << path << ".torn\n";
      std::filesystem::rename(path, path + ".torn");
    }
  }
}

}  // namespace

int run_elastic(const LaunchOptions& o, std::ostream& log) {
  std::vector<Host> hosts = o.hosts;
  std::multimap<std::string, std::string> unclean;  // host -> marker of an attempt left there
  const std::string ckpt_dir = checkpoint_dir_of(o.command);
  auto retry_unclean = [&] {
    for (auto it = unclean.begin(); it != unclean.end();) {
      if (clean_host(o, it->first, it->second)) {
        log << fmt::format("fjit_launch: {} answers again: ended what was left there of {}\n",
                           it->first, it->second);
        it = unclean.erase(it);
      } else {
        ++it;
      }
    }
  };
  int status = 1;
  for (int attempt = 0;; ++attempt) {
    LaunchOptions now = o;
    now.hosts = hosts;
    const std::string marker = fmt::format("{}/fjit_launch.{}.{}", o.tmpdir, ::getpid(), attempt);
    const std::string hostfile = marker + ".hosts";
    std::ofstream(hostfile) << hostfile_text(hosts);
    std::vector<std::string> argv = {o.mpirun, "--hostfile", hostfile, "-np",
                                     std::to_string(total_slots(hosts)), "--mca",
                                     "orte_tmpdir_base", marker, "-x", "FJIT_LAUNCH_JOB=" + marker};
    if (!o.rsh_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.rsh_agent});
    argv.insert(argv.end(), o.mpirun_args.begin(), o.mpirun_args.end());
    argv.insert(argv.end(), o.command.begin(), o.command.end());
    if (attempt > 0 && std::find(o.command.begin(), o.command.end(), "--resume") == o.command.end())
      argv.push_back("--resume");
    log << fmt::format("fjit_launch: attempt {} of at most {}: {} rank(s) on {}\n", attempt + 1,
                       o.max_restarts + 1, total_slots(hosts), describe(hosts))
        << std::flush;
    const Clock::time_point started = Clock::now();
    const Attempt a = watch(argv, now, log);
    std::filesystem::remove(hostfile);
    status = a.status;
    if (status == 0) {
      log << fmt::format("fjit_launch: the job ended normally after {:.1f} s\n", seconds_since(started));
      break;
    }
    log << fmt::format("fjit_launch: attempt {} failed after {:.1f} s (mpirun exit status {})\n",
                       attempt + 1, seconds_since(started), status);
    std::vector<Host> survivors;
    for (const Host& h : hosts) {
      const bool answers = probe(o, h.name);
      const bool named = a.named.count(h.name) > 0;
      if (answers && clean_host(o, h.name, marker)) {
        if (!named) {
          survivors.push_back(h);
          continue;
        }
      } else {
        unclean.emplace(h.name, marker);
      }
      log << fmt::format("fjit_launch: dropping {}: {}\n", h.name,
                         !answers ? fmt::format("no answer through the rsh agent within {:g} s",
                                                o.probe_timeout_s)
                                  : named ? "the job's output names it as failed"
                                          : "its clean-up did not finish in time");
    }
    retry_unclean();
    if (attempt >= o.max_restarts) {
      log << fmt::format("fjit_launch: giving up after {} restart(s) (--max-restarts {})\n",
                         attempt, o.max_restarts);
      break;
    }
    if (survivors.empty()) {
      log << "fjit_launch: giving up: no host left\n";
      break;
    }
    hosts = survivors;
    const std::string resume = latest_complete_checkpoint(ckpt_dir, log);
    log << fmt::format("fjit_launch: restart {} of {}: {} rank(s) on {}, {}\n", attempt + 1,
                       o.max_restarts, total_slots(hosts), describe(hosts),
                       resume.empty() ? "no checkpoint yet: from the start"
                                      : "resuming from " + resume)
        << std::flush;
  }
  retry_unclean();
  for (const auto& [host, marker] : unclean)
    log << fmt::format("fjit_launch: {} still does not answer: processes of {} (OpenMPI's daemon, "
                       "ranks) may still run there\n", host, marker);
  return status;
}

}  // namespace fjit::launch
