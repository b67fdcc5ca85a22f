// The hosts of an elastic job (parallel/launch): a host list as the user gives it
// ("node1:2,node2:2" or an OpenMPI hostfile), the hostfile mpirun is given, and the rules
// that read a failed attempt's output for the hosts it names as failed.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace fjit::launch {

struct Host {
  std::string name;
  int slots = 1;
};

// "a:2,b,c:4" (slots default to 1). Throws std::invalid_argument naming the bad entry.
std::vector<Host> parse_host_list(const std::string& list);
// An OpenMPI hostfile: one host a line, "name [slots=N]", '#' comments. Throws
// std::runtime_error naming the file and line.
std::vector<Host> read_hostfile(const std::string& path);
// The hostfile text for `hosts` ("name slots=N" lines).
std::string hostfile_text(const std::vector<Host>& hosts);
int total_slots(const std::vector<Host>& hosts);
// "a (2 slots), b (1 slot)".
std::string describe(const std::vector<Host>& hosts);

// The hosts one line of a failed attempt's output names as failed, among `known`:
//   fjit's stall report and abort: "not arrived: rank 3 (on node2)" (each "(on HOST)" after
//   "not arrived:", up to the next ';');
//   mpirun: "... on node HOST exited on signal ..." and "Remote daemon: [[j,v],1] on node HOST"
//   (it lost that host's daemon).
// Hosts not in `known` are ignored.
std::set<std::string> hosts_named_as_failed(const std::string& line, const std::vector<Host>& known);

}  // namespace fjit::launch
