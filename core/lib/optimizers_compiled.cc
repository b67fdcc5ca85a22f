// The compiled forms of the optimizers (optimizer_compiled.h): the structures of each update
// that the plan runs as one compiled loop. Every program is recorded from the optimizer's
// `element` and its loop instantiated here, in a file built with -ffp-contract=off
// (CMakeLists.txt; compiled_loop.h says why). A form not listed runs through the op-by-op
// fused pass, with the same bits.
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/fused/fused_compiled.h"
#include "core/lib/optimizer_compiled.h"
#include "core/lib/optimizers.h"

namespace fjit {
namespace {

using optimizer_compiled::Form;

constexpr Form<SGD> kSgd[] = {
    {"sgd_momentum", {.momentum = 1}},
    {"sgd_nesterov", {.momentum = 1, .nesterov = true}},
    {"sgd_momentum_l2", {.momentum = 1, .weight_decay = 1}},
    {"sgd_nesterov_l2", {.momentum = 1, .nesterov = true, .weight_decay = 1}},
};
constexpr Form<Adam> kAdam[] = {{"adam", {.weight_decay = 0}}, {"adam_l2", {.weight_decay = 1}}};
// AdamW without weight decay is Adam's "adam".
constexpr Form<AdamW> kAdamW[] = {{"adamw", {.weight_decay = 1}}};
// The new moment shares no step with the new parameter: it is a fused group of its own.
constexpr Form<Lion> kLion[] = {{"lion", {.weight_decay = 0}}, {"lion_wd", {.weight_decay = 1}}};

template <const auto& kForms, size_t I, unsigned kCut>
inline constexpr compiled::Program kProgram = optimizer_compiled::record(kForms[I], kCut);

template <const auto& kForms, size_t I>
void add_form(std::vector<compiled::CompiledEntry>& out) {
  constexpr unsigned n = optimizer_compiled::programs_of(kForms[I]);
  [&]<unsigned... C>(std::integer_sequence<unsigned, C...>) {
    (out.push_back(compiled::compiled_entry<kProgram<kForms, I, C>>()), ...);
  }(std::make_integer_sequence<unsigned, n>{});
}

template <const auto& kForms>
void add_forms(std::vector<compiled::CompiledEntry>& out) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (add_form<kForms, I>(out), ...);
  }(std::make_index_sequence<std::size(kForms)>{});
}

const std::vector<compiled::CompiledEntry>& entries() {
  static const std::vector<compiled::CompiledEntry> all = [] {
    std::vector<compiled::CompiledEntry> out;
    add_forms<kAdam>(out);
    add_forms<kAdamW>(out);
    add_forms<kSgd>(out);
    add_forms<kLion>(out);
    register_compiled_programs(out);
    return out;
  }();
  return all;
}

}  // namespace

void optimizer_detail::use_compiled_programs() { entries(); }

std::vector<std::string> compiled_optimizer_programs() {
  std::vector<std::string> names;
  for (const compiled::CompiledEntry& e : entries()) names.emplace_back(e.program->name.data());
  return names;
}

}  // namespace fjit
