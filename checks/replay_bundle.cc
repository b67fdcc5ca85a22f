#include "checks/replay_bundle.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "core/base/log.h"

namespace fjit {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "fjit-replay-1";
constexpr const char* kInputsFile = "inputs.safetensors";
constexpr const char* kOutputsFile = "outputs.safetensors";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kReportFile = "report.txt";

uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
uint64_t fnv(uint64_t h, const std::string& s) { return fnv(h, s.data(), s.size() + 1); }
uint64_t fnv(uint64_t h, uint64_t v) { return fnv(h, &v, sizeof v); }

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void write_text(const std::string& path, const std::string& text) {
  io::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

std::string part_name(int64_t step, int replica) {
  return "step" + std::to_string(step) + "_replica" + std::to_string(replica);
}

// Whether `dir` may take a part of step `step`: a part of that step is there already, or
// fewer than `max_steps` steps have parts there.
bool may_write(const std::string& dir, int64_t step, int max_steps) {
  std::set<std::string> steps;
  const std::string mine = "step" + std::to_string(step);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t sep = name.find("_replica");
    if (name.rfind("step", 0) != 0 || sep == std::string::npos) continue;
    if (name.substr(0, sep) == mine) return true;
    steps.insert(name.substr(0, sep));
  }
  return static_cast<int>(steps.size()) < max_steps;
}

Json meta_json(const StepChecks& s, bool raised) {
  Json m;
  m["format"] = kFormat;
  m["function"] = s.function;
  m["step"] = s.step;
  m["replica"] = s.replica;
  m["num_replicas"] = s.num_replicas;
  m["raised"] = raised;
  m["axis_names"] = std::vector<std::string>(s.axis_names.begin(), s.axis_names.end());
  if (!s.axis_sizes.empty()) m["axis_sizes"] = std::vector<int>(s.axis_sizes.begin(), s.axis_sizes.end());
  m["check_mode"] = check_mode_name(s.mode);
  m["fingerprint"] = hex(plan_fingerprint(*s.exe));
  Json inputs = Json::array();
  for (size_t i = 0; i < s.inputs.size(); ++i)
    inputs.push_back({{"path", s.input_paths[i]},
                      {"dtype", dtype_name(s.inputs[i]->dtype())},
                      {"shape", s.inputs[i]->shape()}});
  m["inputs"] = inputs;
  return m;
}

std::mutex g_write_mu;  // one writer per process at a time: keeps the count bound exact here
int g_skipped_logged = 0;

}  // namespace

uint64_t plan_fingerprint(const Executable& exe) {
  uint64_t h = 1469598103934665603ull;
  for (const auto* types : {&exe.input_types, &exe.output_types}) {
    h = fnv(h, types->size());
    for (const ValueType& t : *types) h = fnv(h, type_str(t.dtype, t.shape));
  }
  if (exe.graph) {
    const auto& nodes = exe.graph->nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      h = fnv(h, n.to_string(static_cast<int>(i)));
      uint64_t bits;
      std::memcpy(&bits, &n.attrs.scalar, sizeof bits);
      h = fnv(h, bits);
      if (n.attrs.value) h = fnv(h, n.attrs.value->fingerprint());
    }
    for (int o : exe.graph->outputs) h = fnv(h, static_cast<uint64_t>(o));
  }
  for (const CheckSite& c : exe.check_sites) {
    h = fnv(h, static_cast<uint64_t>(c.kind));
    h = fnv(h, c.format);
    h = fnv(h, c.op);
  }
  return h;
}

std::string replay_part_path(const std::string& dir, int64_t step, int replica) {
  return (fs::path(dir).parent_path() / part_name(step, replica)).string();
}

std::string write_replay_bundle(const StepChecks& s, const std::string& report, bool raised) {
  const CheckDumpOptions opts = check_dump_options();
  if (opts.dir.empty()) return "";
  const std::string name = part_name(s.step, s.replica);
  const fs::path final_dir = fs::path(opts.dir) / name;
  const fs::path tmp_dir = fs::path(opts.dir) / ("." + name + ".tmp-" + std::to_string(::getpid()));
  std::lock_guard<std::mutex> lock(g_write_mu);
  try {
    fs::create_directories(opts.dir);
    if (!may_write(opts.dir, s.step, opts.max_bundles)) {
      if (g_skipped_logged++ == 0)
        log().warn("fjit: {} holds replay bundles of {} steps (the most FJIT_CHECK_DUMP_MAX allows): "
                   "raising steps from now on write none", opts.dir, opts.max_bundles);
      return "";
    }
    if (fs::exists(final_dir)) {
      log().warn("fjit: replay bundle {} exists already; not overwritten", final_dir.string());
      return "";
    }
    fs::remove_all(tmp_dir);
    fs::create_directory(tmp_dir);
    io::Checkpoint ckpt;
    for (size_t i = 0; i < s.inputs.size(); ++i) ckpt.tensors.emplace_back(s.input_paths[i], *s.inputs[i]);
    ckpt.metadata["fjit.replay"] = kFormat;
    io::save_checkpoint((tmp_dir / kInputsFile).string(), ckpt);
    io::Checkpoint outs;
    for (size_t k = 0; k < s.outputs.size(); ++k)
      if (s.outputs[k].valid()) outs.tensors.emplace_back(fmt::format("out{}", k), s.outputs[k]);
    outs.metadata["fjit.replay"] = kFormat;
    io::save_checkpoint((tmp_dir / kOutputsFile).string(), outs);
    write_text((tmp_dir / kMetaFile).string(), meta_json(s, raised).dump(2) + "\n");
    write_text((tmp_dir / kReportFile).string(), report + "\n");
    fs::rename(tmp_dir, final_dir);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
    log().warn("fjit: could not write the replay bundle {}: {}", final_dir.string(), e.what());
    return "";
  }
  log().warn("fjit: replay bundle of replica {} at step {} written to {} (replay it with fjit::replay)",
             s.replica, s.step, final_dir.string());
  return final_dir.string();
}

ReplayBundle load_replay_bundle(const std::string& dir) {
  ReplayBundle b;
  b.dir = dir;
  const std::string meta_path = (fs::path(dir) / kMetaFile).string();
  auto fail = [&](const std::string& what) -> void { throw std::runtime_error(meta_path + ": " + what); };
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": not a replay bundle directory");
  std::ifstream in(meta_path);
  if (!in) fail("cannot be read (is " + dir + " a replay bundle?)");
  std::stringstream text;
  text << in.rdbuf();
  Json m = Json::parse(text.str(), nullptr, false);
  if (m.is_discarded() || !m.is_object()) fail("is not valid JSON");
  try {
    if (m.value("format", "") != kFormat) fail("format is not " + std::string(kFormat));
    b.function = m.at("function").get<std::string>();
    b.step = m.at("step").get<int64_t>();
    b.replica = m.at("replica").get<int>();
    b.num_replicas = m.at("num_replicas").get<int>();
    b.raised = m.value("raised", true);
    b.axis_names = m.at("axis_names").get<std::vector<std::string>>();
    if (m.contains("axis_sizes")) {
      b.axis_sizes = m.at("axis_sizes").get<std::vector<int>>();
      int64_t product = 1;
      for (int n : b.axis_sizes) product *= n < 1 ? 0 : n;
      if (b.axis_sizes.size() != b.axis_names.size() || product != m.at("num_replicas").get<int64_t>())
        fail(fmt::format("axis_sizes [{}] do not fit axis_names ({}) and num_replicas ({})",
                         fmt::join(b.axis_sizes, ","), b.axis_names.size(), m.at("num_replicas").get<int64_t>()));
    }
    const std::string mode = m.at("check_mode").get<std::string>();
    if (mode == "all") b.mode = CheckMode::all;
    else if (mode == "user") b.mode = CheckMode::user;
    else if (mode == "fpe") b.mode = CheckMode::fpe;
    else fail("check_mode '" + mode + "' is not user, all or fpe");
    const std::string fp = m.at("fingerprint").get<std::string>();
    char* end = nullptr;
    b.fingerprint = std::strtoull(fp.c_str(), &end, 16);
    if (fp.size() != 16 || *end) fail("fingerprint '" + fp + "' is not 16 hex digits");
    if (b.num_replicas < 1 || b.replica < 0 || b.replica >= b.num_replicas || b.step < 0)
      fail("step, replica or num_replicas out of range");
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("missing or mistyped field: ") + e.what());
  }
  const std::string inputs_path = (fs::path(dir) / kInputsFile).string();
  io::Checkpoint ckpt = io::load_checkpoint(inputs_path);  // names the file on any problem
  const Json& list = m["inputs"];
  if (!list.is_array() || list.size() != ckpt.tensors.size())
    throw std::runtime_error(inputs_path + ": holds " + std::to_string(ckpt.tensors.size()) +
                             " tensors, " + meta_path + " lists " +
                             (list.is_array() ? std::to_string(list.size()) : std::string("none")));
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& [path, value] = ckpt.tensors[i];
    const std::string want = list[i].is_object() ? list[i].value("path", "") : "";
    if (path != want)
      throw std::runtime_error(inputs_path + ": tensor " + std::to_string(i) + " is '" + path + "', " +
                               meta_path + " lists '" + want + "'");
  }
  b.inputs = std::move(ckpt.tensors);
  const std::string outputs_path = (fs::path(dir) / kOutputsFile).string();
  if (fs::exists(outputs_path)) b.outputs = io::load_checkpoint(outputs_path).tensors;
  std::ifstream report((fs::path(dir) / kReportFile).string());
  if (report) {
    std::stringstream r;
    r << report.rdbuf();
    b.report = r.str();
  }
  return b;
}

}  // namespace fjit
