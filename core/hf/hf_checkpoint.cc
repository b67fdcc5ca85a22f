// Loading and saving Hugging Face model directories (core/hf/hf_checkpoint.h).
#include "core/hf/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/hf/hf_internal.h"
#include "core/io/atomic_file.h"

namespace fjit::hf {
namespace {

namespace fs = std::filesystem;
using namespace detail;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot read (missing or unreadable)");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  io::AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

bool stored_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A tensor as found, with the file it came from.
struct Found {
  Array array;
  std::string file;
  std::string full_name;  // as the checkpoint names it
  bool used = false;
};
using Found_map = std::map<std::string, Found>;

void add_tensors(Found_map& out, io::Checkpoint&& ck, const std::string& prefix) {
  for (auto& [name, a] : ck.tensors) {
    const std::string key = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    auto [it, fresh] = out.try_emplace(key, Found{std::move(a), ck.path, name});
    if (!fresh)
      fail(ck.path, fmt::format("tensor \"{}\" is given twice (also as \"{}\" in {})", name,
                                it->second.full_name, it->second.file));
  }
}

// model.safetensors.index.json: every shard it names is read, and each shard must hold exactly
// the tensors the index gives it.
Found_map read_shards(const std::string& dir, const std::string& index_path, const std::string& prefix) {
  using Json = nlohmann::json;
  Json j;
  try {
    j = Json::parse(read_text(index_path));
  } catch (const Json::exception& e) {
    fail(index_path, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index_path, "malformed index: needs \"weight_map\" as an object of tensor name -> shard file");
  std::map<std::string, std::set<std::string>> by_shard;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(index_path, fmt::format("tensor \"{}\": the shard must be a file name", name));
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail(index_path, fmt::format("tensor \"{}\": shard \"{}\" is not a file name in {}", name, f, dir));
    by_shard[f].insert(name);
  }
  if (by_shard.empty()) fail(index_path, "the index lists no tensors");
  Found_map out;
  for (const auto& [file, names] : by_shard) {
    const std::string path = dir + "/" + file;
    if (!fs::exists(path))
      fail(path, fmt::format("shard missing (named by {} for tensor \"{}\")", index_path, *names.begin()));
    io::Checkpoint ck = io::load_checkpoint(path);
    for (const auto& [name, a] : ck.tensors)
      if (!names.count(name))
        fail(path, fmt::format("unexpected tensor \"{}\" (the index does not list it in this shard)", name));
    for (const std::string& name : names)
      if (!ck.find(name)) fail(path, fmt::format("missing tensor \"{}\" (the index lists it in this shard)", name));
    add_tensors(out, std::move(ck), prefix);
  }
  return out;
}

// Names and shapes of `params` against the decoder's; LoRA entries pass when allowed.
void check_params(const std::vector<Mapping>& maps, const ArrayDict& params, bool allow_lora,
                  const char* who) {
  std::set<std::string> expected;
  for (const Mapping& m : maps) {
    expected.insert(m.fjit);
    if (!params.contains(m.fjit)) throw std::invalid_argument(fmt::format("{}: params lack \"{}\"", who, m.fjit));
    const Array& a = params.at(m.fjit);
    if (a.shape() != m.shape)
      throw std::invalid_argument(fmt::format("{}: \"{}\" is {}, the model needs {}", who, m.fjit,
                                              type_str(a.dtype(), a.shape()), shape_str(m.shape)));
    if (!stored_dtype(a.dtype()))
      throw std::invalid_argument(fmt::format("{}: \"{}\" is {}; HF checkpoints hold f32, bf16 or f16", who,
                                              m.fjit, dtype_name(a.dtype())));
  }
  for (const auto& [name, a] : params) {
    if (expected.count(name)) continue;
    if (is_lora_name(name)) {
      if (allow_lora) continue;
      throw std::invalid_argument(fmt::format(
          "{}: params hold the LoRA entry \"{}\": merge the adapters first (merge_lora), or save "
          "them with save_peft_adapter", who, name));
    }
    throw std::invalid_argument(fmt::format("{}: \"{}\" is not a parameter of the model", who, name));
  }
}

}  // namespace

const char* architecture_name(Architecture a) { return a == Architecture::kGpt2 ? "gpt2" : "llama"; }

HfModel load_hf_model(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  HfModel model;
  model.config_json = read_text(config_path);
  const ParsedConfig pc = parse_config(config_path, model.config_json);
  model.architecture = pc.architecture;
  model.config = pc.config;
  const std::string prefix = model_prefix(pc.architecture);

  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  Found_map found;
  std::string where;  // the file named for a missing tensor
  if (fs::exists(single)) {
    io::Checkpoint ck = io::load_checkpoint(single);
    add_tensors(found, std::move(ck), prefix);
    where = single;
  } else if (fs::exists(index)) {
    found = read_shards(dir, index, prefix);
    where = index;
  } else {
    fail(dir, "holds neither model.safetensors nor model.safetensors.index.json");
  }
  // Names in errors as the checkpoint spells them: with the prefix when it uses one.
  bool prefixed = false;
  for (const auto& [key, f] : found) prefixed |= f.full_name != key;

  for (const Mapping& m : mappings(pc.architecture, pc.config)) {
    std::vector<Array> parts;
    for (const Part& p : m.parts) {
      const bool bare = p.name == "lm_head.weight";
      auto it = found.find(p.name);
      if (it == found.end())
        fail(where, fmt::format("missing tensor \"{}\" ({} of {})", (prefixed && !bare ? prefix : "") + p.name,
                                m.fjit, architecture_name(pc.architecture)));
      Found& f = it->second;
      f.used = true;
      const Array& a = f.array;
      if (!stored_dtype(a.dtype()))
        fail(f.file, fmt::format("tensor \"{}\": dtype {} is not supported (fjit reads F32, BF16 and F16)",
                                 f.full_name, dtype_name(a.dtype())));
      if (a.shape() != p.shape)
        fail(f.file, fmt::format("tensor \"{}\" is {}, config.json's model needs {}", f.full_name,
                                 type_str(a.dtype(), a.shape()), shape_str(p.shape)));
      if (!parts.empty() && a.dtype() != parts[0].dtype())
        fail(f.file, fmt::format("tensor \"{}\" is {} but \"{}\" is {}: the parts of {} must share a dtype",
                                 f.full_name, dtype_name(a.dtype()), m.parts[0].name,
                                 dtype_name(parts[0].dtype()), m.fjit));
      parts.push_back(a);
    }
    model.params.set(m.fjit, from_parts(m, parts));
  }
  for (const auto& [key, f] : found)
    if (!f.used && !ignored_tensor(pc.architecture, pc.config, key))
      fail(f.file, fmt::format("unexpected tensor \"{}\" (not part of a {} model with this config.json)",
                               f.full_name, architecture_name(pc.architecture)));
  return model;
}

io::NamedArrays hf_tensors(const HfModel& model, const ArrayDict& params) {
  const std::vector<Mapping> maps = mappings(model.architecture, model.config);
  check_params(maps, params, false, "hf_tensors");
  const std::string prefix = model_prefix(model.architecture);
  io::NamedArrays out;
  for (const Mapping& m : maps) {
    std::vector<Array> parts = to_parts(m, params.at(m.fjit));
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string& name = m.parts[k].name;
      out.emplace_back(name == "lm_head.weight" ? name : prefix + name, std::move(parts[k]));
    }
  }
  return out;
}

HfModel hf_model_for(const DecoderConfig& config, ArrayDict params) {
  validate(config);
  HfModel model;
  model.architecture = architecture_of(config);
  check_params(mappings(model.architecture, config), params, true, "hf_model_for");
  model.config_json = config_json_for(model.architecture, config, hf_dtype_name(params.at("tok/table").dtype()));
  model.config = parse_config("<generated config.json>", model.config_json).config;
  model.config.remat = config.remat;
  model.params = std::move(params);
  return model;
}

void save_hf_model(const std::string& dir, const HfModel& model) {
  const std::vector<Mapping> maps = mappings(model.architecture, model.config);
  check_params(maps, model.params, false, "save_hf_model");
  std::string text = model.config_json;
  if (text.empty()) {
    text = config_json_for(model.architecture, model.config, hf_dtype_name(model.params.at("tok/table").dtype()));
  } else {
    const ParsedConfig pc = parse_config("save_hf_model: HfModel::config_json", text);
    const std::string diff = config_difference(pc.config, model.config);
    if (pc.architecture != model.architecture || !diff.empty())
      throw std::invalid_argument(fmt::format(
          "save_hf_model: config_json does not describe the model's config ({}): clear it to write "
          "one generated from the config", diff.empty() ? "architecture" : diff));
  }
  io::Checkpoint ck;
  ck.tensors = hf_tensors(model, model.params);
  ck.metadata = {{"format", "pt"}};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create the directory: " + ec.message());
  io::save_checkpoint(dir + "/model.safetensors", ck);
  write_text(dir + "/config.json", text);
}

std::string describe(const HfModel& model) {
  std::set<std::string> dtypes;
  for (const auto& [name, a] : model.params) dtypes.insert(dtype_name(a.dtype()));
  std::string types;
  for (const std::string& t : dtypes) types += (types.empty() ? "" : "+") + t;
  return fmt::format("{} ({}): {}; {} parameters, {}", architecture_name(model.architecture),
                     model.architecture == Architecture::kGpt2 ? "GPT-2" : "Llama", model.config.describe(),
                     parameter_count(model.params), types.empty() ? "no parameters" : types);
}

}  // namespace fjit::hf
