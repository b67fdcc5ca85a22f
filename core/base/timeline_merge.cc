#include "core/base/timeline_merge.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "nlohmann/json.hpp"

namespace fjit::timeline {
namespace {

struct Input {
  std::string path;
  int process = 0;
  std::string host = "unknown";
  bool aligned = false;
  int64_t offset_ns = 0, error_ns = 0;
  nlohmann::json events;  // the non-metadata events
};

Input read_input(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("timeline merge: cannot read {}", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("timeline merge: {} is not JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw std::runtime_error(
        fmt::format("timeline merge: {} is not a trace-event file (no traceEvents array)", path));
  Input input;
  input.path = path;
  input.events = nlohmann::json::array();
  const nlohmann::json other = j.value("otherData", nlohmann::json::object());
  try {
    input.process = other.value("process", 0);
    input.host = other.value("host", std::string("unknown"));
    input.aligned = other.value("time_base", std::string()) == "rank 0 clock";
    input.offset_ns = other.value("clock_offset_ns", int64_t{0});
    input.error_ns = other.value("clock_error_ns", int64_t{0});
    for (const nlohmann::json& e : j["traceEvents"]) {
      if (!e.is_object() || !e.contains("ph")) throw std::runtime_error("an event without ph");
      if (e["ph"] == "M") continue;  // the merge names processes and threads itself
      if (!e.contains("ts") || !e["ts"].is_number())
        throw std::runtime_error("an event without a numeric ts: " + e.dump());
      if (e.contains("tid") && !e["tid"].is_number_integer())
        throw std::runtime_error("an event whose tid is not an integer: " + e.dump());
      input.events.push_back(e);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("timeline merge: {}: {}", path, e.what()));
  }
  return input;
}

}  // namespace

MergeResult merge(const std::vector<std::string>& inputs, const std::string& out) {
  if (inputs.empty()) throw std::invalid_argument("timeline merge: no input files");
  std::vector<Input> files;
  for (const std::string& path : inputs) files.push_back(read_input(path));

  MergeResult result;
  result.files = static_cast<int>(files.size());
  std::map<int, size_t> owner;  // replica -> the input holding it
  double origin = std::numeric_limits<double>::infinity();
  for (size_t f = 0; f < files.size(); ++f) {
    result.aligned &= files[f].aligned || files.size() == 1;
    result.clock_error_ns = std::max(result.clock_error_ns, files[f].error_ns);
    for (nlohmann::json& e : files[f].events) {
      const int replica = e.value("tid", files[f].process);
      auto [it, fresh] = owner.emplace(replica, f);
      if (!fresh && it->second != f)
        throw std::runtime_error(fmt::format("timeline merge: replica {} is in both {} and {}",
                                             replica, files[it->second].path, files[f].path));
      e["pid"] = replica;
      e["tid"] = replica;
      origin = std::min(origin, e["ts"].get<double>());
    }
  }
  result.replicas = static_cast<int>(owner.size());

  nlohmann::json events = nlohmann::json::array();
  for (const auto& [replica, f] : owner) {
    const Input& in = files[f];
    const std::string name =
        fmt::format("replica {} (rank {}, host {})", replica, in.process, in.host);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", replica},
                      {"args", {{"name", name}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", replica},
                      {"args", {{"sort_index", replica}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", replica}, {"tid", replica},
                      {"args", {{"name", fmt::format("replica {}", replica)}}}});
  }
  std::vector<nlohmann::json> body;
  for (Input& in : files)
    for (nlohmann::json& e : in.events) {
      e["ts"] = e["ts"].get<double>() - origin;
      body.push_back(std::move(e));
    }
  std::stable_sort(body.begin(), body.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["ts"].get<double>() < b["ts"].get<double>();
  });
  for (nlohmann::json& e : body) events.push_back(std::move(e));

  nlohmann::json sources = nlohmann::json::array();
  for (const Input& in : files)
    sources.push_back({{"file", in.path}, {"process", in.process}, {"host", in.host},
                       {"time_base", in.aligned ? "rank 0 clock" : "process start"},
                       {"clock_offset_ns", in.offset_ns}, {"clock_error_ns", in.error_ns}});
  const nlohmann::json other = {
      {"time_base", result.aligned ? "rank 0 clock" : "unaligned"},
      {"clock_error_ns", result.clock_error_ns},
      {"origin_us", origin == std::numeric_limits<double>::infinity() ? 0.0 : origin},
      {"sources", std::move(sources)}};
  std::ofstream file(out);
  file << nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
                         {"otherData", other}}
              .dump();
  file.close();
  if (!file) throw std::runtime_error(fmt::format("timeline merge: cannot write {}", out));
  return result;
}

}  // namespace fjit::timeline
