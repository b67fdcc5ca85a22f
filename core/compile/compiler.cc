#include "core/compile/compiler.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "core/base/log.h"
#include "core/base/timeline.h"
#include "core/compile/control_flow.h"
#include "core/compile/memory_plan.h"
#include "core/compile/schedule.h"
#include "core/ir/region.h"
#include "core/compile/fusion/fusion.h"
#include "core/compile/passes/pass.h"

namespace fjit {

class Compiler {
 public:
  // Records `fusion` and `overlap` in the plan it returns. `prefetch`: CompileOptions::
  // gather_prefetch (never in a control-flow body's plan: it runs nothing on the worker).
  static std::shared_ptr<Executable> lower(std::shared_ptr<const Graph> g, std::vector<CheckSite> sites,
                                           Fusion fusion, Overlap overlap, bool prefetch = false);
};

namespace {

void dump(const std::string& dir, const std::string& stem, const std::string& suffix,
          const std::string& text) {
  std::error_code ignored;  // a folder that cannot be made shows as the warning below
  std::filesystem::create_directories(dir, ignored);
  std::ofstream f(dir + "/" + stem + suffix);
  if (!f) {
    log().warn("FJIT_DUMP_DIR: cannot write {}/{}{}", dir, stem, suffix);
    return;
  }
  f << text;
}

// The fusion planner's switches for a Fusion mode.
FusionOptions fusion_options_for(Fusion f) {
  FusionOptions o;
  o.elementwise = f == Fusion::all || f == Fusion::elementwise || f == Fusion::single;
  o.gemm_epilogue = f == Fusion::all || f == Fusion::gemm || f == Fusion::single;
  o.multi_output = f != Fusion::single;
  o.copy_chains = o.elementwise;
  return o;
}

// Whether n's kernel may write its result over `in` (the planner decides whether `in` is dead
// by then): elementwise kernels read each element before they write it, and an all-reduce
// reduces its buffer in place (so a gradient is reduced where its matmul wrote it, not copied),
// and a reshape whose operand dies there is no copy at all (its kernel skips out == in).
bool in_place_ok(const Node& n, const Node& in) {
  if (n.op == Op::Reshape) return in.dtype == n.dtype;
  const bool kernel_ok = (op_is_elementwise(n.op) && n.op != Op::Cast) || n.op == Op::AllReduce;
  return kernel_ok && in.shape == n.shape && dtype_size(in.dtype) == dtype_size(n.dtype);
}

}  // namespace

Graph optimize(const Graph& traced, bool verify, std::vector<CheckSite>* sites) {
  if (verify) traced.verify();
  // The pipeline, in order: the one place that says which passes run.
  std::vector<std::unique_ptr<Pass>> pipeline;
  pipeline.reserve(9);  // also keeps GCC 12 from a false use-after-free warning on regrowth
  if (sites != nullptr) pipeline.push_back(make_automatic_checks(sites));
  pipeline.push_back(make_algebraic_simplification());
  pipeline.push_back(make_constant_folding());
  pipeline.push_back(make_algebraic_simplification());
  pipeline.push_back(make_padded_sums());
  pipeline.push_back(make_relu_pool_grad());
  pipeline.push_back(make_patches_products());
  pipeline.push_back(make_cast_hoisting());
  pipeline.push_back(make_cast_placement());
  pipeline.push_back(make_dead_code_elimination());
  Graph g = traced;
  for (const auto& pass : pipeline) {
    g = pass->run(g);
    if (verify) g.verify();
    log().trace("after {}:\n{}", pass->name(), g.to_string());
  }
  return g;
}

std::shared_ptr<Executable> Compiler::lower(std::shared_ptr<const Graph> gp, std::vector<CheckSite> sites,
                                            Fusion fusion_mode, Overlap overlap_mode, bool prefetch) {
  const Graph& g = *gp;
  auto exe = std::make_shared<Executable>();
  exe->graph = gp;
  exe->check_sites = std::move(sites);
  exe->fusion = fusion_mode;
  exe->overlap = overlap_mode;
  const FusionOptions fusion_options = fusion_options_for(fusion_mode);
  const bool overlap = overlap_mode != Overlap::off;
  std::vector<int> node_buf(g.size(), -1);
  auto new_buffer = [&](BufferRef r) {
    exe->buffers.push_back(r);
    return static_cast<int>(exe->buffers.size()) - 1;
  };
  for (size_t k = 0; k < g.parameters.size(); ++k) {
    const Node& p = g.node(g.parameters[k]);
    node_buf[g.parameters[k]] = new_buffer({BufferRef::kInput, static_cast<int64_t>(k)});
    exe->input_types.push_back({p.dtype, p.shape});
  }
  std::vector<bool> live = live_nodes(g);
  // Outputs computed by an instruction are written straight into the caller's buffer.
  std::vector<int> output_of(g.size(), -1);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Node& o = g.node(g.outputs[k]);
    exe->output_types.push_back({o.dtype, o.shape});
    if (o.op != Op::Parameter && o.op != Op::Constant && output_of[g.outputs[k]] < 0)
      output_of[g.outputs[k]] = static_cast<int>(k);
  }
  const FusionPlan fusion = plan_fusion(g, live, fusion_options);
  exe->output_writer.assign(g.outputs.size(), -1);
  std::vector<int> input_of(g.size(), -1);
  for (size_t k = 0; k < g.parameters.size(); ++k) input_of[g.parameters[k]] = static_cast<int>(k);
  exe->input_last_read.assign(g.parameters.size(), -1);
  exe->input_last_read_in_place.assign(g.parameters.size(), false);
  std::vector<PlannedValue> planned;
  std::vector<int> planned_buf;  // per planned value, its buffer
  std::vector<int> value_of(g.size(), -1);
  // Per control-flow node, its read results (output nodes) by index; they are defined by the
  // control node's instruction (core/compile/control_flow.h).
  absl::flat_hash_map<int, std::vector<int>> results_of;
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (!live[id] || n.op != Op::Output) continue;
    std::vector<int>& r = results_of[n.inputs[0]];
    r.resize(n.attrs.region->outputs.size(), -1);
    r[n.attrs.index] = id;
  }
  const GraphCompiler compile_graph = [fusion_mode](const Graph& sub) {
    auto optimized = std::make_shared<const Graph>(optimize(sub, true));
    return std::shared_ptr<const Executable>(Compiler::lower(optimized, {}, fusion_mode, Overlap::off));
  };
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (!live[id] || n.op != Op::Constant) continue;
    auto data = n.attrs.value ? n.attrs.value
                              : std::make_shared<const Array>(Array::full(n.dtype, n.shape, n.attrs.scalar));
    exe->constants.push_back(data);
    node_buf[id] = new_buffer({BufferRef::kConstant, 0, data->raw()});
  }
  std::vector<uint8_t> async;  // per instruction: runs on the collective worker
  // The all-gathers of plan inputs started ahead of their readers (core/compile/schedule.h)
  // run on the worker.
  std::vector<uint8_t> gathers_ahead(g.size(), 0);
  // A fused group becomes one instruction at its root (or, for a group with further results,
  // at the earliest of them); its other members have none (core/compile/schedule.h).
  for (int id : schedule_instructions(g, live, fusion, overlap, prefetch ? &gathers_ahead : nullptr)) {
    const Node& n = g.node(id);
    const int group = fusion.group_of[id];
    static const std::vector<int> kNone;
    const std::vector<int>& extras = group >= 0 ? fusion.groups[group].extra_roots : kNone;
    const int main_id = group >= 0 ? fusion.groups[group].root : id;
    const bool elementwise_group = group >= 0 && fusion.groups[group].kind == FusionGroup::kElementwise;
    // Allocates the buffer of a value the instruction defines.
    auto define = [&](int node, const std::vector<int>& in_place, int index) {
      if (output_of[node] >= 0) {
        exe->output_writer[output_of[node]] = index;
        node_buf[node] = new_buffer({BufferRef::kOutput, output_of[node]});
        return;
      }
      node_buf[node] = new_buffer({BufferRef::kArena, 0});
      PlannedValue v;
      v.bytes = g.node(node).size() * dtype_size(g.node(node).dtype);
      v.def = v.last_use = index;
      v.in_place_candidates = in_place;
      value_of[node] = static_cast<int>(planned.size());
      planned.push_back(std::move(v));
      planned_buf.push_back(node_buf[node]);
    };
    Instr instr;
    std::vector<int> operands = n.inputs;
    if (group >= 0) {
      const FusionGroup& grp = fusion.groups[group];
      instr = grp.instr;
      instr.label = fusion.describe(group);
      operands = grp.inputs;
    } else {
      instr.op = n.op;
      instr.out = {n.dtype, n.shape};
      instr.attrs = n.attrs;
      for (int in : operands) instr.ins.push_back({g.node(in).dtype, g.node(in).shape});
    }
    instr.node = main_id;
    for (int in : operands) instr.in_bufs.push_back(node_buf[in]);
    const int index = static_cast<int>(exe->instrs.size());
    // Whether operand k may share storage with the instruction's main result: same shape, and
    // a kernel that reads each element before it writes it (for a GEMM epilogue, only the addend).
    const Node& main_node = g.node(main_id);
    auto in_place_operand = [&](size_t k) {
      const int in = operands[k];
      if (group >= 0 && fusion.groups[group].kind == FusionGroup::kGemm)
        return k == 2 && in != operands[0] && in != operands[1] && g.node(in).shape == main_node.shape;
      // Other replicas read the gradient, and the default backend stages the sum in the output.
      if (group >= 0 && fusion.groups[group].kind == FusionGroup::kReduceUpdate) return false;
      // A copy group moves elements to other places.
      if (group >= 0 && fusion.groups[group].kind == FusionGroup::kCopy) return false;
      if (group >= 0)
        return g.node(in).shape == main_node.shape && dtype_size(g.node(in).dtype) == dtype_size(main_node.dtype);
      return in_place_ok(main_node, g.node(in));
    };
    // Donation bookkeeping (Executable::can_alias): the last instruction reading each input.
    for (size_t k = 0; k < operands.size(); ++k) {
      const int p = input_of[operands[k]];
      if (p < 0) continue;
      // An elementwise group writes every result after its block's reads (fused.h).
      const bool ok = in_place_operand(k) && (extras.empty() || elementwise_group);
      if (exe->input_last_read[p] == index) exe->input_last_read_in_place[p] = exe->input_last_read_in_place[p] && ok;
      else exe->input_last_read[p] = index, exe->input_last_read_in_place[p] = ok;
    }
    std::vector<int> in_place;
    for (size_t k = 0; k < operands.size(); ++k)
      if (value_of[operands[k]] >= 0 && in_place_operand(k)) in_place.push_back(value_of[operands[k]]);
    define(main_id, output_of[main_id] < 0 ? in_place : std::vector<int>{}, index);
    for (int x : extras) {  // further results' buffers follow the operands (fused.h)
      define(x, elementwise_group ? in_place : std::vector<int>{}, index);
      instr.in_bufs.push_back(node_buf[x]);
    }
    for (int in : operands)
      if (value_of[in] >= 0) planned[value_of[in]].last_use = index;
    if (instr.op == Op::MatMul) {
      // The depth from B: operand 0 may be an image whose patches are op(A) (patches_gemm.h).
      const auto& b = instr.ins[1].shape;
      const int64_t k = instr.attrs.trans_b ? b.back() : b[b.size() - 2];
      // A product folded into its patches_adjoint (index 1): [pixels, taps], not the image.
      const bool folded = !instr.attrs.window.empty() && instr.attrs.index == 1;
      const int64_t taps = folded ? instr.attrs.window[0] * instr.attrs.window[1] * n.shape[3] : 0;
      exe->flops += 2 * (folded ? instr.ins[0].shape[0] * taps : n.size()) * k;
    }
    if (op_kind(n.op) == OpKind::kControl) {
      const std::vector<int> none(n.attrs.region->outputs.size(), -1);
      auto found = results_of.find(id);
      const std::vector<int>& results = found == results_of.end() ? none : found->second;
      prepare_control(instr, n, results, compile_graph);
      const auto* plan = static_cast<const ControlPlan*>(instr.prepared.get());
      for (int r : results) {
        if (r >= 0) define(r, {}, index);
        instr.in_bufs.push_back(r >= 0 ? node_buf[r] : -1);
      }
      instr.in_bufs.push_back(new_buffer({BufferRef::kArena, 0}));  // scratch, live in this instruction
      PlannedValue v;
      v.bytes = static_cast<int64_t>(plan->scratch_bytes);
      v.def = v.last_use = index;
      planned.push_back(std::move(v));
      planned_buf.push_back(instr.in_bufs.back());
    } else if (group < 0) {
      select_kernel(instr);
    }
    exe->instrs.push_back(std::move(instr));
    async.push_back((overlap && overlappable(g, fusion, id)) || gathers_ahead[id] != 0);
  }
  // Outputs that are inputs, constants, or repeats of another output are copied.
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int id = g.outputs[k];
    if (output_of[id] == static_cast<int>(k)) continue;
    Instr copy;
    copy.op = Op::Reshape;
    copy.node = id;
    copy.out = exe->output_types[k];
    copy.ins = {copy.out};
    copy.in_bufs = {node_buf[id]};
    copy.out_buf = new_buffer({BufferRef::kOutput, static_cast<int64_t>(k)});
    const int index = static_cast<int>(exe->instrs.size());
    if (value_of[id] >= 0) planned[value_of[id]].last_use = index;
    exe->output_writer[k] = index;
    if (const int p = input_of[id]; p >= 0) {  // a copy reads each byte before writing it
      if (exe->input_last_read[p] != index) exe->input_last_read_in_place[p] = true;
      exe->input_last_read[p] = index;
    }
    select_kernel(copy);
    exe->instrs.push_back(std::move(copy));
    async.push_back(0);
  }
  for (Instr& instr : exe->instrs) {
    if (instr.out_buf < 0) instr.out_buf = node_buf[instr.node];
    instr.trace_name = timeline::intern(instr.label.empty() ? op_name(instr.op) : instr.label);
    bool pairs = op_kind(instr.op) == OpKind::kCollective;
    if (op_kind(instr.op) == OpKind::kControl && instr.prepared)
      for (const auto& sub : static_cast<const ControlPlan*>(instr.prepared.get())->plans)
        pairs = pairs || sub->holds_collective;
    exe->pairs.push_back(pairs ? 1 : 0);
    exe->holds_collective = exe->holds_collective || pairs;
  }
  plan_arena(*exe, async, planned, planned_buf);
  exe->table_bytes_ = (exe->buffers.size() * sizeof(void*) + 63) / 64 * 64;
  return exe;
}

std::shared_ptr<const Executable> compile(const Graph& traced, std::vector<CheckSite> sites,
                                          const CompileOptions& options) {
  static std::atomic<int> counter{0};
  const std::string& dir = options.dump_dir;
  const std::string stem = options.name + "." + std::to_string(counter++);
  if (!dir.empty()) {
    dump(dir, stem, ".before.txt", traced.to_string(true));
    dump(dir, stem, ".before.dot", traced.to_dot(options.name + " (traced)"));
  }
  auto optimized = std::make_shared<const Graph>(
      optimize(traced, options.verify, options.automatic_checks ? &sites : nullptr));
  std::shared_ptr<Executable> exe =
      Compiler::lower(optimized, std::move(sites), options.fusion, options.overlap, options.gather_prefetch);
  if (options.step_deadline) {
    CheckSite site;
    site.kind = CheckKind::step_timeout;
    exe->deadline_site = static_cast<int>(exe->check_sites.size());
    exe->check_sites.push_back(std::move(site));
  }
  if (options.fpe_checks) {
    CheckSite site;
    site.kind = CheckKind::fpe;
    exe->fpe_site = static_cast<int>(exe->check_sites.size());
    exe->check_sites.push_back(std::move(site));
  }
  if (!dir.empty()) {
    dump(dir, stem, ".after.txt", optimized->to_string(true));
    dump(dir, stem, ".after.dot", optimized->to_dot(options.name + " (optimized)"));
    dump(dir, stem, ".plan.txt", exe->plan_string());
    log().info("dumped {} to {}/{}.*", options.name, dir, stem);
  }
  return exe;
}

}  // namespace fjit
