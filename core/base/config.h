// Configuration by environment variable: the table of every variable fjit reads (config.def)
// and one typed accessor per row. This file (config.cc) is the only place that reads the
// environment; a second declaration of a name fails the build (the static_assert below).
//
// Contracts:
//  - An accessor reads the environment on every call, through its row's parser (config.def
//    says what each kind accepts); it never caches. The edges that call them (JitOptions::
//    resolved(), the process settings applied by the first jit or pmap, Mesh start-up, the
//    logger's set-up) read once and pass the values down as options: compile, trace, autodiff
//    and kernels take options and never read the environment.
//  - A malformed count, or a kThrow choice, throws std::invalid_argument naming the variable
//    and the value, on the calling thread; a kWarn choice or a malformed number of seconds logs
//    a warning and gives the default.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fjit::config {

enum class Kind : uint8_t { kCount, kSeconds, kChoice, kText, kFlag, kForeign };
enum class OnBad : uint8_t { kThrow, kWarn };

// One row of config.def. Columns a kind does not use are zero or empty.
struct Row {
  std::string_view name;
  Kind kind;
  double fallback;               // kCount, kSeconds: the default value
  int64_t min, max;              // kCount: the accepted range
  std::string_view choices;      // kChoice: "a|a2, b, c", in value order
  std::string_view fallback_choice;  // kChoice: the default, as spelt in `choices`
  OnBad on_bad;                  // kChoice
  std::string_view help;
};

// The rows' identifiers, in table order.
enum class Id : uint8_t {
#define FJIT_COUNT(id, ...) id,
#define FJIT_SECONDS(id, ...) id,
#define FJIT_CHOICE(id, ...) id,
#define FJIT_TEXT(id, ...) id,
#define FJIT_FLAG(id, ...) id,
#define FJIT_FOREIGN(id, ...) id,
#include "core/base/config.def"
#undef FJIT_COUNT
#undef FJIT_SECONDS
#undef FJIT_CHOICE
#undef FJIT_TEXT
#undef FJIT_FLAG
#undef FJIT_FOREIGN
};

inline constexpr Row kRows[] = {
#define FJIT_COUNT(id, name, fallback, min, max, help) \
  {name, Kind::kCount, fallback, min, max, "", "", OnBad::kThrow, help},
#define FJIT_SECONDS(id, name, fallback, help) \
  {name, Kind::kSeconds, fallback, 0, 0, "", "", OnBad::kWarn, help},
#define FJIT_CHOICE(id, name, choices, fallback, on_bad, help) \
  {name, Kind::kChoice, 0, 0, 0, choices, fallback, OnBad::on_bad, help},
#define FJIT_TEXT(id, name, help) {name, Kind::kText, 0, 0, 0, "", "", OnBad::kThrow, help},
#define FJIT_FLAG(id, name, help) {name, Kind::kFlag, 0, 0, 0, "", "", OnBad::kThrow, help},
#define FJIT_FOREIGN(id, name, help) {name, Kind::kForeign, 0, 0, 0, "", "", OnBad::kThrow, help},
#include "core/base/config.def"
#undef FJIT_COUNT
#undef FJIT_SECONDS
#undef FJIT_CHOICE
#undef FJIT_TEXT
#undef FJIT_FLAG
#undef FJIT_FOREIGN
};
inline constexpr int kNumRows = static_cast<int>(std::size(kRows));

constexpr const Row& row(Id id) { return kRows[static_cast<int>(id)]; }

// The choices of a kChoice row, and the value of one spelling (-1: none). Constexpr, so that
// an edge can check at build time that a row and the enum it fills agree.
constexpr int choice_count(Id id) {
  int n = 1;
  for (char c : row(id).choices) n += c == ',';
  return n;
}
constexpr int choice_value(std::string_view choices, std::string_view spelling) {
  int value = 0;
  size_t at = 0;
  while (at <= choices.size()) {
    size_t end = choices.find(',', at);
    if (end == std::string_view::npos) end = choices.size();
    std::string_view choice = choices.substr(at, end - at);
    while (!choice.empty() && choice.front() == ' ') choice.remove_prefix(1);
    for (size_t s = 0; s <= choice.size();) {
      size_t bar = choice.find('|', s);
      if (bar == std::string_view::npos) bar = choice.size();
      if (choice.substr(s, bar - s) == spelling) return value;
      s = bar + 1;
    }
    ++value;
    at = end + 1;
  }
  return -1;
}
constexpr int choice_value(Id id, std::string_view spelling) {
  return choice_value(row(id).choices, spelling);
}

// Whether no two rows share a name (the build-time guard below; config_test tests it too).
constexpr bool names_distinct(std::span<const Row> rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = i + 1; j < rows.size(); ++j)
      if (rows[i].name == rows[j].name) return false;
  return true;
}
static_assert(names_distinct(kRows), "core/base/config.def declares a variable twice");

// What each row promises about itself: defaults within range, defaults among the choices.
constexpr bool row_consistent(const Row& r) {
  switch (r.kind) {
    case Kind::kCount: return (r.min == 0 || r.min == 1) && r.min <= r.max && r.max <= INT32_MAX;
    case Kind::kSeconds: return r.fallback >= 0;
    case Kind::kChoice: return choice_value(r.choices, r.fallback_choice) >= 0;
    default: return true;
  }
}
constexpr bool rows_consistent() {
  for (const Row& r : kRows)
    if (!row_consistent(r) || (r.kind != Kind::kForeign && !r.name.starts_with("FJIT_")))
      return false;
  return true;
}
static_assert(rows_consistent(), "a row of core/base/config.def contradicts itself");

// Reads by row, through the row's parser (config.def). count: the default when unset or empty.
// choice: the chosen value; `warning`, when given, receives a kWarn row's warning instead of
// the log (the logger's own set-up reads its level so). text: "" when unset. foreign: nullopt
// when unset. is_set: set and not empty.
int64_t count(Id id);
std::chrono::milliseconds seconds(Id id);
int choice(Id id, std::string* warning = nullptr);
std::string text(Id id);
bool flag(Id id);
std::optional<std::string> foreign(Id id);
bool is_set(Id id);

// One accessor per row, named by its id: config::recompile_warn(), config::overlap(), ...
#define FJIT_COUNT(id, ...) inline int64_t id() { return count(Id::id); }
#define FJIT_SECONDS(id, ...) inline std::chrono::milliseconds id() { return seconds(Id::id); }
#define FJIT_CHOICE(id, ...) inline int id() { return choice(Id::id); }
#define FJIT_TEXT(id, ...) inline std::string id() { return text(Id::id); }
#define FJIT_FLAG(id, ...) inline bool id() { return flag(Id::id); }
#define FJIT_FOREIGN(id, ...) inline std::optional<std::string> id() { return foreign(Id::id); }
#include "core/base/config.def"
#undef FJIT_COUNT
#undef FJIT_SECONDS
#undef FJIT_CHOICE
#undef FJIT_TEXT
#undef FJIT_FLAG
#undef FJIT_FOREIGN

// The table as Markdown, one row per variable: name, help (with what it accepts), default;
// fjit's own variables first, then the other programs' ones. README.md's list follows it.
std::string describe();

}  // namespace fjit::config
