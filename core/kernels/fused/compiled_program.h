// Compiled fused programs, derived by recording: a compiled program is a short elementwise
// function known when fjit is built (an optimizer's update) that runs as one loop over vector
// packets with every intermediate in a register (compiled_loop.h) wherever a fused program of
// a plan computes the same thing (select_compiled_fused, fused_compiled.h).
//
// A program is never written out by hand. Its author writes the function once, as a template
// over its value type; traced with Tensors it is what the plan's fused program comes from, and
// run at compile time on Sym values (below) it records its own table. So the two come from one
// declaration, and the matcher compares them as DAGs, whatever order the trace put the steps
// and the operands of add and mul in.
//
// What a recording keeps, so that its table is what the fusion planner will fuse:
//   - An op with an operand of the output's shape (a full value) is a step. Only ops whose
//     every element is correctly rounded or exact may be steps: add, sub, mul, div, sqrt,
//     sign. Any other op on a full value fails the recording, which is a compile error.
//   - An op whose operands are all scalars gives a new scalar operand (leaf) of the program:
//     the planner fuses only values of the output's shape, so a scalar computed from scalars
//     (a bias correction, 1 - lr * weight_decay) is computed outside and read by the program.
//   - Equal steps (the same op over the same operands in the same order) are one step, as
//     hash-consing makes them one node.
//   - Only the steps of the first result's component are kept (the steps it reads, and the
//     other results that share a step with them): a result that shares no step with it is a
//     fused group of its own in the plan. Leaves and steps nothing kept reads are dropped.
#pragma once

#include <array>
#include <initializer_list>

#include "core/ir/op.h"

namespace fjit::compiled {

inline constexpr int kMaxSteps = 32, kMaxLeaves = 32, kMaxResults = 4, kMaxName = 40;

// An operand of a step: an earlier step's value, or leaf i (an operand of the program).
struct Arg {
  bool step = false;
  int i = -1;
  constexpr bool operator==(const Arg&) const = default;
};

// One step: add, sub, mul, div (a, b), or sqrt, sign (a).
struct CStep {
  Op op = Op::Add;
  Arg a, b;
  constexpr bool operator==(const CStep&) const = default;
};

constexpr bool is_unary_step(Op op) { return op == Op::Sqrt || op == Op::Sign; }
constexpr bool is_step_op(Op op) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div || is_unary_step(op);
}
constexpr bool is_commutative_step(Op op) { return op == Op::Add || op == Op::Mul; }

enum class Kind : unsigned char { full, scalar };  // a leaf: the output's shape, or one element

// A recorded program. Steps are in an order where every operand comes before its reader.
struct Program {
  std::array<char, kMaxName> name{};  // plan dumps: "[compiled: <name>]"
  int n = 0, k = 0, e = 0;            // steps, leaves, results
  std::array<CStep, kMaxSteps> steps{};
  std::array<Kind, kMaxLeaves> leaf{};
  // The steps whose values the program writes, in the declaration's order (for an optimizer:
  // the parameter, then its moments).
  std::array<int, kMaxResults> results{};
};

class Recorder;

// A value of a function being recorded: a leaf or a step of `rec`. Default-constructed, it is
// no value; an op reading it fails the recording.
struct Sym {
  Recorder* rec = nullptr;
  Arg at;
  bool scalar = false;
};

class Recorder {
 public:
  // `cut`: bit i set makes the i-th value marked shared() a full leaf instead of its steps.
  constexpr explicit Recorder(unsigned cut = 0) : cut_(cut) {}

  constexpr Sym full() { return leaf(Kind::full); }
  constexpr Sym scalar() { return leaf(Kind::scalar); }

  // `op` over a (and b, for a binary op), as the rules above say.
  constexpr Sym apply(Op op, const Sym& a, const Sym& b = {}) {
    const bool unary = !b.rec;
    if (!a.rec || a.rec != this || (!unary && b.rec != this))
      throw "a recorded op reads a value that is not of this recording";
    if (a.scalar && (unary || b.scalar)) return scalar();
    if (!is_step_op(op) || unary != is_unary_step(op))
      throw "only add, sub, mul, div, sqrt and sign may compute a full value of a compiled program";
    const CStep s{op, a.at, unary ? Arg{} : b.at};
    for (int i = 0; i < n_; ++i)
      if (steps_[i] == s) return {this, {true, i}, false};
    if (n_ == kCap) throw "a recorded program has too many steps";
    steps_[n_] = s;
    return {this, {true, n_++}, false};
  }

  // A value that another part of a step may compute too, and then pass in (the squared
  // gradient, which a global norm also sums): each mark doubles the forms recorded, one with
  // the value's steps, one reading it as a full leaf, named "<name>_<label>_operand".
  constexpr Sym shared(const Sym& v, const char* label) {
    if (marks_ == kMaxMarks) throw "a recorded program has too many shared values";
    labels_[marks_] = label;
    return (cut_ >> marks_++) & 1u ? full() : v;
  }
  constexpr int marks() const { return marks_; }

  // The program computing `results` (the first decides the component kept, see above), named
  // `name` plus the suffixes of the cut marks.
  constexpr Program finish(const char* name, std::initializer_list<Sym> results) const {
    Program p;
    int len = 0;
    auto append = [&](const char* s) {
      for (; *s; ++s) {
        if (len + 1 == kMaxName) throw "a compiled program's name is too long";
        p.name[len++] = *s;
      }
    };
    append(name);
    for (int m = 0; m < marks_; ++m)
      if ((cut_ >> m) & 1u) {
        append("_");
        append(labels_[m]);
        append("_operand");
      }
    // Components of steps linked through step operands (union-find over steps).
    std::array<int, kCap> comp{};
    for (int i = 0; i < n_; ++i) comp[i] = i;
    auto find = [&](int i) {
      while (comp[i] != i) i = comp[i];
      return i;
    };
    for (int i = 0; i < n_; ++i)
      for (const Arg& a : {steps_[i].a, steps_[i].b})
        if (a.step) comp[find(a.i)] = find(i);
    std::array<bool, kCap> live_step{}, live_leaf{};
    int first = -1;
    for (const Sym& r : results) {
      if (!r.rec) continue;  // a moment the form does not keep
      if (r.rec != this || !r.at.step) throw "a result of a compiled program must be a step";
      if (first < 0) first = find(r.at.i);
      if (find(r.at.i) != first) continue;
      if (live_step[r.at.i]) throw "two results of a compiled program are the same value";
      if (p.e == kMaxResults) throw "a compiled program has too many results";
      live_step[r.at.i] = true;
      p.results[p.e++] = r.at.i;
    }
    if (first < 0) throw "a compiled program has no result";
    for (int i = n_ - 1; i >= 0; --i) {
      if (!live_step[i]) continue;
      for (const Arg& a : {steps_[i].a, steps_[i].b}) {
        if (a.i < 0) continue;
        (a.step ? live_step : live_leaf)[a.i] = true;
      }
    }
    // Renumber what is kept, in the recorded order.
    std::array<int, kCap> step_at{}, leaf_at{};
    for (int j = 0; j < k_; ++j) {
      if (!live_leaf[j]) continue;
      if (p.k == kMaxLeaves) throw "a compiled program has too many operands";
      leaf_at[j] = p.k;
      p.leaf[p.k++] = leaves_[j];
    }
    auto renumber = [&](const Arg& a) {
      return a.i < 0 ? a : Arg{a.step, a.step ? step_at[a.i] : leaf_at[a.i]};
    };
    for (int i = 0; i < n_; ++i) {
      if (!live_step[i]) continue;
      if (p.n == kMaxSteps) throw "a compiled program has too many steps";
      step_at[i] = p.n;
      p.steps[p.n++] = {steps_[i].op, renumber(steps_[i].a), renumber(steps_[i].b)};
    }
    for (int r = 0; r < p.e; ++r) p.results[r] = step_at[p.results[r]];
    return p;
  }

 private:
  static constexpr int kCap = 128, kMaxMarks = 4;

  constexpr Sym leaf(Kind kind) {
    if (k_ == kCap) throw "a recorded program has too many operands";
    leaves_[k_] = kind;
    return {this, {false, k_++}, kind == Kind::scalar};
  }

  std::array<CStep, kCap> steps_{};
  std::array<Kind, kCap> leaves_{};
  std::array<const char*, kMaxMarks> labels_{};
  int n_ = 0, k_ = 0, marks_ = 0;
  unsigned cut_;
};

// The arithmetic of a recorded function, as Tensor's: a double is a scalar leaf.
constexpr Sym operator+(const Sym& a, const Sym& b) { return a.rec->apply(Op::Add, a, b); }
constexpr Sym operator-(const Sym& a, const Sym& b) { return a.rec->apply(Op::Sub, a, b); }
constexpr Sym operator*(const Sym& a, const Sym& b) { return a.rec->apply(Op::Mul, a, b); }
constexpr Sym operator/(const Sym& a, const Sym& b) { return a.rec->apply(Op::Div, a, b); }
constexpr Sym operator+(const Sym& a, double) { return a + a.rec->scalar(); }
constexpr Sym operator-(const Sym& a, double) { return a - a.rec->scalar(); }
constexpr Sym operator*(const Sym& a, double) { return a * a.rec->scalar(); }
constexpr Sym operator/(const Sym& a, double) { return a / a.rec->scalar(); }
constexpr Sym operator+(double, const Sym& b) { return b.rec->scalar() + b; }
constexpr Sym operator-(double, const Sym& b) { return b.rec->scalar() - b; }
constexpr Sym operator*(double, const Sym& b) { return b.rec->scalar() * b; }
constexpr Sym operator/(double, const Sym& b) { return b.rec->scalar() / b; }
constexpr Sym sqrt(const Sym& x) { return x.rec->apply(Op::Sqrt, x); }
constexpr Sym sign(const Sym& x) { return x.rec->apply(Op::Sign, x); }
constexpr Sym square(const Sym& x) { return x * x; }  // as Tensor's square: mul(x, x)
constexpr Sym rsqrt(const Sym& x) { return x.rec->apply(Op::Rsqrt, x); }
constexpr Sym pow(const Sym& a, const Sym& b) { return a.rec->apply(Op::Pow, a, b); }

}  // namespace fjit::compiled
