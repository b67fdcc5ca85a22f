// Compiled fused programs (fused_compiled.h): the registry and the matcher. The loops are
// instantiated where the programs are declared (compiled_loop.h).
#include "core/kernels/fused/fused_compiled.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "core/base/mutex.h"

namespace fjit {
namespace {

using compiled::Arg;
using compiled::CompiledEntry;
using compiled::CStep;
using compiled::Kind;
using compiled::Program;

Mutex registry_mu;
std::vector<CompiledEntry>& registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static std::vector<CompiledEntry> entries;
  return entries;
}

// A search for a map from a compiled program onto a fused one (the header's "same DAG"): a
// depth-first search over pairs (fused operand, compiled operand) still to be equal, which
// binds compiled steps to fused steps and leaves to operands as it goes and undoes what a
// failed choice bound. The only choices are the two orders of an add's or a mul's operands,
// and the operands bound first cut most of them short.
class Matcher {
 public:
  Matcher(const Program& t, const Instr& instr, const std::vector<FusedOp>& prog)
      : t_(t), instr_(instr), prog_(prog) {}

  // Whether the fused program, with root j computing the compiled result perm[j], is t.
  // roots: the fused program's further results, then its last step.
  bool run(const std::vector<int>& roots, const std::vector<int>& perm) {
    leaf_.assign(t_.k, -1);
    step_.assign(t_.n, -1);
    owner_.assign(prog_.size(), -1);
    trail_.clear();
    todo_.clear();
    for (size_t j = 0; j < roots.size(); ++j) todo_.push_back({roots[j], {true, t_.results[perm[j]]}});
    if (!solve()) return false;
    // Every fused step is some compiled step (the counts are equal), every operand is read.
    std::vector<bool> read(instr_.ins.size(), false);
    for (int k : leaf_) {
      if (k < 0) return false;
      read[k] = true;
    }
    return std::all_of(read.begin(), read.end(), [](bool r) { return r; });
  }

  std::vector<int> leaf_;  // compiled leaf -> instr.ins index

 private:
  struct Pair {
    int prog;  // a fused operand: a step (>= 0) or an external operand -1 - k
    Arg want;  // what the compiled program has there
  };

  void set(int& slot, int value) {
    trail_.push_back({&slot, slot});
    slot = value;
  }
  void undo(size_t mark) {
    for (; trail_.size() > mark; trail_.pop_back()) *trail_.back().first = trail_.back().second;
  }

  bool bind_leaf(int leaf, int prog) {
    if (prog >= 0) return false;  // the fused program computes what the compiled one reads
    const int k = -1 - prog;
    if (leaf_[leaf] >= 0) return leaf_[leaf] == k;
    const ValueType& in = instr_.ins[k];
    if (in.dtype != instr_.out.dtype) return false;
    if (t_.leaf[leaf] == Kind::full ? in.shape != instr_.out.shape : in.size() != 1) return false;
    set(leaf_[leaf], k);
    return true;
  }

  bool same_step(int s, int j) const {
    const FusedOp& op = prog_[s];
    const CStep& c = t_.steps[j];
    return op.op == c.op && op.dtype == instr_.out.dtype &&
           op.args.size() == (compiled::is_unary_step(c.op) ? 1u : 2u);
  }

  // Empties todo_ binding as it goes; on failure, leaves todo_ and the bindings as they were.
  bool solve() {
    if (todo_.empty()) return true;
    if (--budget_ < 0) return false;
    const Pair q = todo_.back();
    todo_.pop_back();
    const size_t mark = trail_.size(), depth = todo_.size();
    bool ok = false;
    if (!q.want.step) {
      ok = bind_leaf(q.want.i, q.prog) && solve();
    } else if (q.prog >= 0) {
      const int j = q.want.i, s = q.prog;
      if (step_[j] == s) {
        ok = solve();  // reached before: its operands are queued already
      } else if (step_[j] < 0 && owner_[s] < 0 && same_step(s, j)) {
        set(step_[j], s);
        set(owner_[s], j);
        const FusedOp& op = prog_[s];
        const CStep& c = t_.steps[j];
        todo_.push_back({op.args[0], c.a});
        if (op.args.size() == 2) todo_.push_back({op.args[1], c.b});
        ok = solve();
        if (!ok && op.args.size() == 2 && compiled::is_commutative_step(c.op)) {
          todo_.resize(depth);
          todo_.push_back({op.args[1], c.a});
          todo_.push_back({op.args[0], c.b});
          ok = solve();
        }
      }
    }
    if (!ok) {
      undo(mark);
      todo_.resize(depth);
      todo_.push_back(q);
    }
    return ok;
  }

  const Program& t_;
  const Instr& instr_;
  const std::vector<FusedOp>& prog_;
  std::vector<int> step_;   // compiled step -> fused step
  std::vector<int> owner_;  // fused step -> compiled step
  std::vector<std::pair<int*, int>> trail_;
  std::vector<Pair> todo_;
  // Pairs visited at most, over every order of the results: a pathological program runs op
  // by op rather than stall the compiler.
  int budget_ = 1 << 16;
};

// Cheap necessary conditions: as many steps, results and of each op.
bool may_match(const Program& t, const std::vector<FusedOp>& program, size_t roots) {
  if (program.size() != static_cast<size_t>(t.n) || roots != static_cast<size_t>(t.e)) return false;
  std::array<int, kNumOps> count{};
  for (int j = 0; j < t.n; ++j) ++count[static_cast<int>(t.steps[j].op)];
  for (const FusedOp& op : program)
    if (--count[static_cast<int>(op.op)] < 0) return false;
  return true;
}

bool try_program(const CompiledEntry& entry, Instr& instr, const std::vector<FusedOp>& program,
                 const std::vector<int>& extras) {
  const Program& t = *entry.program;
  std::vector<int> roots = extras;
  roots.push_back(static_cast<int>(program.size()) - 1);
  if (!may_match(t, program, roots.size())) return false;
  Matcher m(t, instr, program);
  std::vector<int> perm(roots.size());
  std::iota(perm.begin(), perm.end(), 0);
  do {
    if (!m.run(roots, perm)) continue;
    std::vector<int64_t> v(m.leaf_.begin(), m.leaf_.end());
    v.resize(t.k + t.e);
    for (size_t j = 0; j < roots.size(); ++j)  // compiled result perm[j] goes to root j's buffer
      v[t.k + perm[j]] = j + 1 == roots.size() ? -1 : static_cast<int64_t>(j);
    instr.v = std::move(v);
    instr.prepared = nullptr;
    instr.fn = instr.out.dtype == DType::f32 ? entry.f32 : entry.f64;
    return true;
  } while (std::next_permutation(perm.begin(), perm.end()));
  return false;
}

}  // namespace

void register_compiled_programs(std::span<const CompiledEntry> entries) {
  MutexLock lock(&registry_mu);
  for (const CompiledEntry& e : entries) {
    const bool known = std::any_of(registry().begin(), registry().end(),
                                   [&](const CompiledEntry& r) { return r.program == e.program; });
    if (!known) registry().push_back(e);
  }
}

bool select_compiled_fused(Instr& instr, const std::vector<FusedOp>& program,
                           const std::vector<int>& extras) {
  if (instr.out.dtype != DType::f32 && instr.out.dtype != DType::f64) return false;
  if (instr.out.size() == 0) return false;
  MutexLock lock(&registry_mu);
  for (const CompiledEntry& e : registry())
    if (try_program(e, instr, program, extras)) return true;
  return false;
}

const char* compiled_fused_name(const Instr& instr) {
  if (!instr.fn) return nullptr;
  MutexLock lock(&registry_mu);
  for (const CompiledEntry& e : registry())
    if (instr.fn == e.f32 || instr.fn == e.f64) return e.program->name.data();
  return nullptr;
}

}  // namespace fjit
