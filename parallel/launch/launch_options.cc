// fjit_launch's command line (declared in parallel/launch/launcher.h).
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel/launch/launcher.h"

namespace fjit::launch {
namespace {

double parse_seconds(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(s >= 0))
    throw std::invalid_argument(fmt::format("{} '{}': not a number of seconds >= 0", option, text));
  return s;
}

}  // namespace

std::string launch_usage() {
  return "usage: fjit_launch (--hosts H1:SLOTS,H2:SLOTS | --hostfile FILE) [options] -- COMMAND...\n"
         "Runs COMMAND under mpirun on the hosts; when the job fails, drops the failed hosts\n"
         "and runs it again on the others with --resume (COMMAND needs --checkpoint-dir).\n"
         "  --mpirun PATH            mpirun to run (mpirun)\n"
         "  --mpirun-arg ARG         one more argument for mpirun (repeat it)\n"
         "  --rsh-agent 'CMD ARGS'   how to reach a host: mpirun's plm_rsh_agent, and the\n"
         "                           launcher's probes and clean-ups (ssh)\n"
         "  --max-restarts N         restarts before giving up (3)\n"
         "  --probe-timeout S        a host that does not answer the agent within S is gone (10)\n"
         "  --abort-grace S          end mpirun S after the first abort line (15)\n"
         "  --progress-timeout S     a job that prints nothing for S has failed (0: off)\n"
         "  --tmpdir DIR             OpenMPI's session directories and hostfiles go here (/tmp)\n";
}

LaunchOptions parse_launch_args(const std::vector<std::string>& args, bool& help) {
  LaunchOptions o;
  help = false;
  size_t i = 0;
  auto value = [&](const std::string& option) -> std::string {
    if (i + 1 >= args.size()) throw std::invalid_argument(option + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "-h" || a == "--help") help = true;
    else if (a == "--hosts") o.hosts = parse_host_list(value(a));
    else if (a == "--hostfile") o.hosts = read_hostfile(value(a));
    else if (a == "--mpirun") o.mpirun = value(a);
    else if (a == "--mpirun-arg") o.mpirun_args.push_back(value(a));
    else if (a == "--rsh-agent") o.rsh_agent = value(a);
    else if (a == "--tmpdir") o.tmpdir = value(a);
    else if (a == "--probe-timeout") o.probe_timeout_s = parse_seconds(a, value(a));
    else if (a == "--abort-grace") o.abort_grace_s = parse_seconds(a, value(a));
    else if (a == "--progress-timeout") o.progress_timeout_s = parse_seconds(a, value(a));
    else if (a == "--max-restarts") {
      const std::string v = value(a);
      size_t used = 0;
      int n = -1;
      try {
        n = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || n < 0)
        throw std::invalid_argument(fmt::format("--max-restarts '{}': not an integer >= 0", v));
      o.max_restarts = n;
    } else {
      throw std::invalid_argument(fmt::format("unknown option '{}' (the command follows '--')", a));
    }
  }
  if (help) return o;
  if (o.hosts.empty()) throw std::invalid_argument("no hosts: give --hosts or --hostfile");
  if (o.command.empty()) throw std::invalid_argument("no command: give it after '--'");
  if (o.max_restarts > 0 && checkpoint_dir_of(o.command).empty())
    throw std::invalid_argument("the command has no --checkpoint-dir: a restart could not resume "
                                "(give one, or --max-restarts 0)");
  return o;
}

std::string checkpoint_dir_of(const std::vector<std::string>& command) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == "--checkpoint-dir" && i + 1 < command.size()) return command[i + 1];
    if (command[i].rfind("--checkpoint-dir=", 0) == 0) return command[i].substr(17);
  }
  return "";
}

}  // namespace fjit::launch
