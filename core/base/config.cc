#include "core/base/config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "core/base/env.h"
#include "core/base/log.h"

namespace fjit::config {
namespace {

// The one read of the environment in fjit. Row names are literals, so data() ends in a NUL.
const char* raw(const Row& r) { return std::getenv(r.name.data()); }

const Row& checked(Id id, Kind kind) {
  const Row& r = row(id);
  if (r.kind != kind)
    throw std::logic_error("fjit::config: " + std::string(r.name) + " is not read as this kind");
  return r;
}

// The choices split at ',', each split at '|' (its spellings), leading blanks dropped.
std::vector<std::vector<std::string>> spellings(std::string_view choices) {
  std::vector<std::vector<std::string>> out(1);
  std::string word;
  auto end_word = [&] {
    out.back().push_back(word);
    word.clear();
  };
  for (char c : choices) {
    if (c == ',') {
      end_word();
      out.emplace_back();
    } else if (c == '|') {
      end_word();
    } else if (c != ' ' || !word.empty()) {
      word += c;
    }
  }
  end_word();
  return out;
}

// "0 (off), schedule, or 1 (worker)": every choice, other spellings in parentheses.
std::string spelled_out(std::string_view choices) {
  const auto all = spellings(choices);
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) s += all.size() > 2 ? ", " : " ";
    if (i + 1 == all.size() && i > 0) s += "or ";
    s += all[i][0];
    for (size_t k = 1; k < all[i].size(); ++k) s += (k == 1 ? " (" : ", ") + all[i][k];
    if (all[i].size() > 1) s += ")";
  }
  return s;
}

// "off, user, all": the first spelling of every choice.
std::string first_spellings(std::string_view choices) {
  std::string s;
  for (const auto& c : spellings(choices)) s += (s.empty() ? "" : ", ") + c[0];
  return s;
}

int64_t fallback_ms(const Row& r) { return std::llround(r.fallback * 1000.0); }

}  // namespace

int64_t count(Id id) {
  const Row& r = checked(id, Kind::kCount);
  const char* text = raw(r);
  if (text == nullptr || *text == '\0') return static_cast<int64_t>(r.fallback);
  const std::string name(r.name), value(text);
  if (r.min == 0 && value == "0") return 0;
  try {
    return parse_count(value, name, static_cast<int>(r.max));
  } catch (const std::invalid_argument&) {
    if (r.min != 0) throw;
    throw std::invalid_argument(name + " must be 0 (off) or an integer from 1 to " +
                                std::to_string(r.max) + ", got '" + value + "'");
  }
}

std::chrono::milliseconds seconds(Id id) {
  const Row& r = checked(id, Kind::kSeconds);
  const char* text = raw(r);
  const std::chrono::milliseconds fallback(fallback_ms(r));
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(s) || s < 0) {
    log().warn("{}='{}' is not a number of seconds; keeping {} ms", r.name, text, fallback.count());
    return fallback;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

int choice(Id id, std::string* warning) {
  const Row& r = checked(id, Kind::kChoice);
  const int fallback = choice_value(r.choices, r.fallback_choice);
  const char* text = raw(r);
  if (text == nullptr || *text == '\0') return fallback;
  if (const int v = choice_value(r.choices, text); v >= 0) return v;
  if (r.on_bad == OnBad::kThrow)
    throw std::invalid_argument(std::string(r.name) + " must be " + spelled_out(r.choices) +
                                ", got '" + text + "'");
  const std::string message = std::string(r.name) + "='" + text + "' is not one of " +
                              first_spellings(r.choices) + "; using " +
                              std::string(r.fallback_choice);
  if (warning != nullptr) *warning = message;
  else log().warn("{}", message);
  return fallback;
}

std::string text(Id id) {
  const char* v = raw(checked(id, Kind::kText));
  return v != nullptr ? v : "";
}

bool flag(Id id) {
  const char* v = raw(checked(id, Kind::kFlag));
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

std::optional<std::string> foreign(Id id) {
  const char* v = raw(checked(id, Kind::kForeign));
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

bool is_set(Id id) {
  const char* v = raw(row(id));
  return v != nullptr && *v != '\0';
}

std::string describe() {
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string own = "| variable | effect | default |\n|---|---|---|\n";
  std::string other = "| variable | why fjit reads it |\n|---|---|\n";
  for (const Row& r : kRows) {
    std::string help(r.help), fallback = "unset";
    switch (r.kind) {
      case Kind::kCount:
        help += std::string("; ") + (r.min == 0 ? "0 (off) or " : "") + "1 to " +
                std::to_string(r.max);
        if (r.fallback >= r.min) fallback = std::to_string(static_cast<int64_t>(r.fallback));
        break;
      case Kind::kSeconds:
        help += "; seconds, a non-negative decimal number";
        fallback = number(r.fallback);
        break;
      case Kind::kChoice:
        help += "; " + spelled_out(r.choices);
        fallback = r.fallback_choice;
        break;
      case Kind::kFlag:
        help += "; on unless unset, empty or 0";
        fallback = "off";
        break;
      case Kind::kText:
      case Kind::kForeign: break;
    }
    if (r.kind == Kind::kForeign) other += "| `" + std::string(r.name) + "` | " + help + " |\n";
    else own += "| `" + std::string(r.name) + "` | " + help + " | " + fallback + " |\n";
  }
  return own + "\nOther programs' variables that fjit looks at:\n\n" + other;
}

}  // namespace fjit::config
