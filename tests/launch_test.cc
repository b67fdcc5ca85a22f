// fjit_launch's library (parallel/launch): host lists, the rules that read a failed job's
// output, the command line, bounded child processes, and the restart loop driven by a fake
// mpirun (a shell script that fails its first run naming a host, then succeeds) whose
// arguments are recorded and checked.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/launch/child_process.h"
#include "parallel/launch/launcher.h"

namespace fjit::launch {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch_dir() {
  fs::path dir = fs::temp_directory_path() / ("fjit_launch_test." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Hosts, ParsesListsAndHostfiles) {
  const std::vector<Host> hosts = parse_host_list("a:2,b,c:4");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[1].name, "b");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(total_slots(hosts), 7);
  EXPECT_EQ(describe(hosts), "a (2 slots), b (1 slot), c (4 slots)");
  EXPECT_EQ(hostfile_text(hosts), "a slots=2\nb slots=1\nc slots=4\n");
  EXPECT_THROW(parse_host_list("a:0"), std::invalid_argument);
  EXPECT_THROW(parse_host_list("a:x"), std::invalid_argument);
  EXPECT_THROW(parse_host_list(":2"), std::invalid_argument);

  const fs::path dir = scratch_dir();
  std::ofstream(dir / "hosts") << "# the job's hosts\nnode1 slots=2\n\nnode2  # one slot\n";
  const std::vector<Host> read = read_hostfile((dir / "hosts").string());
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].slots, 2);
  EXPECT_EQ(read[1].name, "node2");
  EXPECT_EQ(read[1].slots, 1);
  std::ofstream(dir / "bad") << "node1 slots=2\nnode2 cpus=4\n";
  try {
    read_hostfile((dir / "bad").string());
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad:2: 'cpus=4' is not slots=N"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Hosts, ReadsTheHostsAFailedJobNames) {
  const std::vector<Host> known = parse_host_list("fjit-node1,fjit-node2,node3");
  using Set = std::set<std::string>;
  EXPECT_EQ(hosts_named_as_failed(
                "[fjit] [critical] aborting the job (rank 0 of 2, mpi): stall: rank 0 (on fjit-node1) "
                "waited 3.00 s in all_gather #133 (abort_after 3000 ms); not arrived: rank 1 (on "
                "fjit-node2); waiting in it: rank 0 (on fjit-node1)", known),
            Set{"fjit-node2"});
  EXPECT_EQ(hosts_named_as_failed("not arrived: rank 1 (on fjit-node2), ranks 4,5 (on node3)", known),
            (Set{"fjit-node2", "node3"}));
  EXPECT_EQ(hosts_named_as_failed("  Remote daemon: [[35944,0],1] on node fjit-node2", known),
            Set{"fjit-node2"});
  EXPECT_EQ(hosts_named_as_failed("  HNP daemon   : [[35944,0],0] on node fjit-node1", known), Set{});
  EXPECT_EQ(hosts_named_as_failed(
                "mpirun noticed that process rank 1 with PID 0 on node node3 exited on signal 9 (Killed).",
                known),
            Set{"node3"});
  EXPECT_EQ(hosts_named_as_failed("not arrived: rank 1 (on elsewhere)", known), Set{});
}

TEST(Options, ParsesAndRefuses) {
  bool help = false;
  const LaunchOptions o = parse_launch_args(
      {"--hosts", "a:2,b:2", "--max-restarts", "5", "--mpirun-arg", "-x", "--mpirun-arg", "V=1",
       "--abort-grace", "2.5", "--", "train", "--checkpoint-dir=ck", "--epochs", "3"},
      help);
  EXPECT_FALSE(help);
  EXPECT_EQ(o.max_restarts, 5);
  EXPECT_EQ(o.mpirun_args, (std::vector<std::string>{"-x", "V=1"}));
  EXPECT_DOUBLE_EQ(o.abort_grace_s, 2.5);
  EXPECT_EQ(o.command.size(), 4u);
  EXPECT_EQ(checkpoint_dir_of(o.command), "ck");
  EXPECT_EQ(checkpoint_dir_of({"train", "--checkpoint-dir", "d"}), "d");
  auto error = [](const std::vector<std::string>& args) {
    bool h = false;
    try {
      parse_launch_args(args, h);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error({"--hosts", "a", "--", "train"}),
            "the command has no --checkpoint-dir: a restart could not resume (give one, or "
            "--max-restarts 0)");
  EXPECT_EQ(error({"--hosts", "a", "--max-restarts", "0", "--", "train"}), "(no error)");
  EXPECT_EQ(error({"--", "train"}), "no hosts: give --hosts or --hostfile");
  EXPECT_EQ(error({"--hosts", "a"}), "no command: give it after '--'");
  EXPECT_EQ(error({"--hosts", "a", "--retries", "2"}), "unknown option '--retries' (the command follows '--')");
  EXPECT_EQ(error({"--hosts", "a", "--probe-timeout", "-1"}), "--probe-timeout '-1': not a number of seconds >= 0");
}

TEST(ChildProcess, ReportsStatusOutputAndTimeout) {
  std::string out;
  EXPECT_EQ(run_bounded({"sh", "-c", "echo one; echo two >&2; exit 3"}, 10, &out), 3);
  EXPECT_EQ(out, "one\ntwo\n");
  EXPECT_EQ(run_bounded({"sh", "-c", "kill -9 $$"}, 10), 128 + 9);
  // A child that outlives its bound is ended with what it started (its group).
  EXPECT_EQ(run_bounded({"sh", "-c", "sleep 30 & sleep 30"}, 0.3), std::nullopt);
  EXPECT_EQ(run_bounded({"/nonexistent/program"}, 10), 127);
}

// The fake mpirun records its arguments (one a line, a blank line between runs) and the
// hostfile it was given; its first run fails naming host b as not arrived.
TEST(RunElastic, DropsTheNamedHostAndResumesOnTheOthers) {
  const fs::path dir = scratch_dir();
  const fs::path mpirun = dir / "mpirun", agent = dir / "agent", calls = dir / "calls";
  std::ofstream(mpirun) << "#!/bin/sh\n"
                           "for a; do echo \"$a\"; done >> " << calls.string() << "\n"
                           "echo >> " << calls.string() << "\n"
                           "cat \"$2\" >> " << (dir / "hostfiles").string() << "\n"
                           "if [ ! -e " << (dir / "ran").string() << " ]; then\n"
                           "  touch " << (dir / "ran").string() << "\n"
                           "  echo 'aborting the job (rank 0 of 3, mpi): stall: not arrived: rank 2 (on b)'\n"
                           "  exit 1\n"
                           "fi\n"
                           "echo trained\n";
  std::ofstream(agent) << "#!/bin/sh\necho \"$1\" >> " << (dir / "probed").string() << "\n";
  fs::permissions(mpirun, fs::perms::owner_all);
  fs::permissions(agent, fs::perms::owner_all);
  LaunchOptions o;
  o.hosts = parse_host_list("a:2,b:1");
  o.mpirun = mpirun.string();
  o.rsh_agent = agent.string();
  o.tmpdir = dir.string();
  o.command = {"train", "--checkpoint-dir", (dir / "ck").string()};
  std::ostringstream log;
  EXPECT_EQ(run_elastic(o, log), 0) << log.str();
  EXPECT_NE(log.str().find("dropping b: the job's output names it as failed"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("restart 1 of 3: 2 rank(s) on a (2 slots), no checkpoint yet"),
            std::string::npos) << log.str();
  const std::string args = read_file(calls);
  const size_t second = args.find("\n\n");
  ASSERT_NE(second, std::string::npos);
  EXPECT_NE(args.find("-np\n3\n"), std::string::npos) << args;
  EXPECT_EQ(args.substr(0, second).find("--resume"), std::string::npos) << args;
  EXPECT_NE(args.find("-np\n2\n", second), std::string::npos) << args;
  EXPECT_NE(args.find("--mca\nplm_rsh_agent\n" + agent.string() + "\n", second), std::string::npos);
  EXPECT_NE(args.find("train\n--checkpoint-dir\n" + (dir / "ck").string() + "\n--resume\n", second),
            std::string::npos) << args;
  EXPECT_EQ(read_file(dir / "hostfiles"), "a slots=2\nb slots=1\na slots=2\n");
  fs::remove_all(dir);
}

TEST(RunElastic, GivesUpAfterMaxRestarts) {
  const fs::path dir = scratch_dir();
  const fs::path mpirun = dir / "mpirun";
  std::ofstream(mpirun) << "#!/bin/sh\necho failing\nexit 7\n";
  fs::permissions(mpirun, fs::perms::owner_all);
  LaunchOptions o;
  o.hosts = parse_host_list("a,b");
  o.mpirun = mpirun.string();
  o.rsh_agent = "true";
  o.tmpdir = dir.string();
  o.max_restarts = 2;
  o.command = {"train", "--checkpoint-dir", (dir / "ck").string()};
  std::ostringstream log;
  EXPECT_EQ(run_elastic(o, log), 7);
  EXPECT_NE(log.str().find("attempt 3 of at most 3"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("attempt 4"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("giving up after 2 restart(s) (--max-restarts 2)"), std::string::npos);
  fs::remove_all(dir);
}


// mpirun that hangs after an abort line (as across a network split), or prints nothing: the
// launcher ends it after the grace or the progress bound instead of waiting for it.
TEST(RunElastic, EndsAnMpirunThatHangs) {
  const fs::path dir = scratch_dir();
  const fs::path aborting = dir / "aborting", silent = dir / "silent";
  std::ofstream(aborting) << "#!/bin/sh\necho 'aborting the job (rank 0 of 2, mpi): stall'\nexec sleep 60\n";
  std::ofstream(silent) << "#!/bin/sh\nexec sleep 60\n";
  fs::permissions(aborting, fs::perms::owner_all);
  fs::permissions(silent, fs::perms::owner_all);
  LaunchOptions o;
  o.hosts = parse_host_list("a");
  o.rsh_agent = "true";
  o.tmpdir = dir.string();
  o.max_restarts = 0;
  o.abort_grace_s = 0.5;
  o.command = {"train"};
  for (const fs::path& mpirun : {aborting, silent}) {
    o.mpirun = mpirun.string();
    o.progress_timeout_s = mpirun == silent ? 0.5 : 0;
    std::ostringstream log;
    EXPECT_EQ(run_elastic(o, log), 128 + 9) << log.str();  // ended by SIGKILL
    EXPECT_NE(log.str().find(mpirun == silent ? "the job printed nothing for 0.5 s: ending mpirun"
                                              : "mpirun still ran 0.5 s after the first abort: ending mpirun"),
              std::string::npos) << log.str();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fjit::launch
