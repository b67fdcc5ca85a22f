// Recording an elementwise optimizer's update as compiled fused programs (internal to core/lib
// and its tests): the `element` an optimizer declares (optimizer.h) runs at compile time on
// compiled::Sym values (core/kernels/fused/compiled_program.h) and records its table.
//
// A form is one structure of the update: an optimizer whose hyper-parameters say which terms
// the update has (a weight decay that is not zero, Nesterov's momentum); their values do not
// matter, since every hyper-parameter is an operand of the program. Each value `element`
// marks shared() doubles the form's programs: one computes it, one reads it as an operand.
#pragma once

#include "core/kernels/fused/compiled_program.h"
#include "core/lib/optimizer.h"

namespace fjit {

template <>
struct Element<compiled::Sym> {
  compiled::Sym p{}, g{}, m{}, v{}, step{};
  DType dtype = DType::f32;
  compiled::Recorder* rec = nullptr;

  // Every hyper-parameter, and every value computed from scalars alone, is a scalar operand.
  constexpr compiled::Sym scalar(const Scalar&, DType) const { return rec->scalar(); }
  constexpr compiled::Sym cast(const compiled::Sym& x, DType) const { return rec->apply(Op::Cast, x); }
  constexpr compiled::Sym shared(const compiled::Sym& x, const char* label) const {
    return rec->shared(x, label);
  }
  // A form that is a misuse of the optimizer fails to compile.
  constexpr void fail(const char* what) const {
    if (what) throw what;
  }
};

namespace optimizer_compiled {

template <ElementwiseOptimizer O>
struct Form {
  const char* name;  // "[compiled: <name>]", suffixed "_<label>_operand" per value cut
  O optimizer;
};

// Runs form's element on a fresh leaf for the parameter, the gradient, each moment the layout
// keeps and the step count; the results are the new parameter, then the new moments.
template <class O>
constexpr compiled::Program record(const Form<O>& form, unsigned cut, int* marks = nullptr) {
  compiled::Recorder rec(cut);
  const StateLayout layout = form.optimizer.layout();
  Element<compiled::Sym> x{.p = rec.full(), .g = rec.full(), .rec = &rec};
  if (layout.moments > 0) x.m = rec.full();
  if (layout.moments > 1) x.v = rec.full();
  if (layout.counts_steps) x.step = rec.scalar();
  form.optimizer.element(x);
  if (marks) *marks = rec.marks();
  return rec.finish(form.name, {x.p, layout.moments > 0 ? x.m : compiled::Sym{},
                                layout.moments > 1 ? x.v : compiled::Sym{}});
}

// How many programs the form gives: 2^(values marked shared).
template <class O>
constexpr unsigned programs_of(const Form<O>& form) {
  int marks = 0;
  record(form, 0, &marks);
  return 1u << marks;
}

}  // namespace optimizer_compiled
}  // namespace fjit
