#include "parallel/launch/hosts.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace fjit::launch {
namespace {

int parse_slots(const std::string& text, const std::string& where) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1)
    throw std::invalid_argument(fmt::format("{}: slots '{}' is not a positive integer", where, text));
  return n;
}

bool known_host(const std::vector<Host>& known, const std::string& name) {
  for (const Host& h : known)
    if (h.name == name) return true;
  return false;
}

}  // namespace

std::vector<Host> parse_host_list(const std::string& list) {
  std::vector<Host> hosts;
  std::stringstream in(list);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    const size_t colon = entry.find(':');
    Host h{entry.substr(0, colon), 1};
    if (h.name.empty())
      throw std::invalid_argument(fmt::format("--hosts '{}': an empty host name", list));
    if (colon != std::string::npos)
      h.slots = parse_slots(entry.substr(colon + 1), fmt::format("--hosts entry '{}'", entry));
    hosts.push_back(h);
  }
  if (hosts.empty()) throw std::invalid_argument("--hosts: no host given");
  return hosts;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the hostfile");
  std::vector<Host> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    Host h;
    if (!(words >> h.name)) continue;
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) == 0)
        h.slots = parse_slots(word.substr(6), fmt::format("{}:{}", path, number));
      else if (word.rfind("max_slots=", 0) != 0)
        throw std::runtime_error(fmt::format("{}:{}: '{}' is not slots=N", path, number, word));
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) throw std::runtime_error(path + ": no host in the hostfile");
  return hosts;
}

std::string hostfile_text(const std::vector<Host>& hosts) {
  std::string text;
  for (const Host& h : hosts) text += fmt::format("{} slots={}\n", h.name, h.slots);
  return text;
}

int total_slots(const std::vector<Host>& hosts) {
  int n = 0;
  for (const Host& h : hosts) n += h.slots;
  return n;
}

std::string describe(const std::vector<Host>& hosts) {
  std::string text;
  for (const Host& h : hosts)
    text += fmt::format("{}{} ({} slot{})", text.empty() ? "" : ", ", h.name, h.slots,
                        h.slots == 1 ? "" : "s");
  return text.empty() ? "(none)" : text;
}

std::set<std::string> hosts_named_as_failed(const std::string& line, const std::vector<Host>& known) {
  std::set<std::string> named;
  auto add = [&](const std::string& name) {
    if (known_host(known, name)) named.insert(name);
  };
  // fjit: "not arrived: rank 3 (on node2), rank 5 (on node3); waiting in it: ..."
  for (size_t at = line.find("not arrived:"); at != std::string::npos;
       at = line.find("not arrived:", at + 1)) {
    const std::string part = line.substr(at, line.find(';', at) - at);
    for (size_t on = part.find("(on "); on != std::string::npos; on = part.find("(on ", on + 1)) {
      const size_t close = part.find(')', on);
      if (close != std::string::npos) add(part.substr(on + 4, close - on - 4));
    }
  }
  // mpirun: "... on node HOST exited on signal 9" and "Remote daemon: [[x,0],1] on node HOST".
  auto word_after = [&](size_t from) {
    const size_t end = line.find_first_of(" \t", from);
    return line.substr(from, end == std::string::npos ? std::string::npos : end - from);
  };
  const size_t node = line.find(" on node ");
  if (node != std::string::npos &&
      (line.find("exited on signal") != std::string::npos ||
       line.find("Remote daemon") != std::string::npos))
    add(word_after(node + 9));
  return named;
}

}  // namespace fjit::launch
