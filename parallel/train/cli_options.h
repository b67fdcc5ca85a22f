// Strict command-line values for the training programs, on CLI11: every value goes through a
// parser of ours (the whole string, no trailing text, no silent wrap-around, finite numbers),
// and a bad one is a BadValue whose message is the whole error. Shared by the classifier's
// options (train_options.cc) and the language model's (parallel/lm/lm_options.cc).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/ir/check_site.h"

namespace fjit::training::cli {

// A value the option does not accept; the message is the whole error.
struct BadValue : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole string as a T, or false (CLI11's own conversions accept more than we want).
template <class T>
bool parse_number(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

// Adds options whose values are parsed strictly into fields of an options struct.
class OptionAdder {
 public:
  explicit OptionAdder(CLI::App& app) : app_(app) {}

  // `parse` sets the field and says whether the value was acceptable; `want` says what is.
  void value(const std::string& name, const std::string& type, const std::string& help,
             std::function<bool(const std::string&)> parse, const std::string& want) {
    app_.add_option_function<std::string>(
            name,
            [name, parse, want](const std::string& v) {
              if (!parse(v)) throw BadValue("option " + name + ": '" + v + "' is not " + want);
            },
            help)
        ->type_name(type)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one given wins
  }
  template <class T>
  void integer(const std::string& name, T& field, int64_t min, const std::string& help) {
    value(name, "N", fmt::format("{} ({})", help, field),
          [&field, min](const std::string& v) { return parse_number(v, field) && field >= min; },
          "an integer >= " + std::to_string(min));
  }
  void real(const std::string& name, double& field, const std::string& help) {
    value(name, "X", fmt::format("{} ({})", help, field),
          [&field](const std::string& v) {
            return parse_number(v, field) && std::isfinite(field) && field >= 0;
          },
          "a finite number >= 0");
  }
  void text(const std::string& name, const std::string& type, std::string& field,
            const std::string& help) {
    value(name, type, help, [&field](const std::string& v) { field = v; return !v.empty(); },
          "a non-empty value");
  }
  // --checks off|user|all|fpe and --on-check-failure throw|skip_step|log.
  void check_options(std::optional<CheckMode>& mode, std::optional<CheckPolicy>& policy) {
    value("--checks", "off|user|all|fpe", "checks compiled into the step (FJIT_CHECKS, else user)",
          [&mode](const std::string& v) {
            if (v == "off") mode = CheckMode::off;
            else if (v == "user") mode = CheckMode::user;
            else if (v == "all") mode = CheckMode::all;
            else if (v == "fpe") mode = CheckMode::fpe;
            else return false;
            return true;
          }, "off, user, all or fpe");
    value("--on-check-failure", "throw|skip_step|log",
          "what a failed check does (FJIT_ON_CHECK_FAILURE, else throw)",
          [&policy](const std::string& v) {
            if (v == "throw") policy = CheckPolicy::throw_error;
            else if (v == "skip_step") policy = CheckPolicy::skip_step;
            else if (v == "log") policy = CheckPolicy::log;
            else return false;
            return true;
          }, "throw, skip_step or log");
  }

  // --compute-dtype f32|bf16: the layers' mixed-precision policy (core/nn/precision.h).
  void compute_dtype_option(std::string& compute_dtype) {
    value("--compute-dtype", "T", "f32, or bf16: the layers' products on bf16 operands with f32 "
          "results; parameters, optimizer state and everything else stay f32 (f32)",
          [&compute_dtype](const std::string& v) {
            compute_dtype = v;
            return v == "f32" || v == "bf16";
          }, "f32 or bf16");
  }

  // --grad-dtype f32|f16, --loss-scale dynamic|N and --loss-scale-growth-interval N
  // (parallel/train/loss_scaling.h).
  void loss_scale_options(std::string& grad_dtype, std::string& loss_scale, int64_t& growth_interval) {
    value("--grad-dtype", "T", "f32, or f16: gradients all-reduced in half precision, with a loss scale (f32)",
          [&grad_dtype](const std::string& v) {
            grad_dtype = v;
            return v == "f32" || v == "f16";
          }, "f32 or f16");
    value("--loss-scale", "S", "dynamic, or a static scale N: the loss is multiplied by it before the "
          "gradients, which are divided by it after the all-reduce; an overflow skips the step and "
          "halves a dynamic scale (none; dynamic with --grad-dtype f16)",
          [&loss_scale](const std::string& v) {
            loss_scale = v;
            double n = 0;
            return v == "dynamic" || (parse_number(v, n) && std::isfinite(n) && n > 0 &&
                                      n <= std::numeric_limits<float>::max());
          }, "dynamic or a positive number");
    integer("--loss-scale-growth-interval", growth_interval, 1,
            "good steps before a dynamic loss scale doubles");
  }

 private:
  CLI::App& app_;
};

// Parses argv into what `app` was built over. Returns the error ("" when none); sets *help
// for --help. Never exits.
inline std::string parse(CLI::App& app, int argc, char** argv, bool* help) {
  *help = false;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    *help = true;
  } catch (const BadValue& e) {
    return e.what();
  } catch (const CLI::ExtrasError&) {
    return "unknown option '" + app.remaining().front() + "' (see --help)";
  } catch (const CLI::ArgumentMismatch& e) {
    return std::string(e.what()) + ": the option needs a value";
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

}  // namespace fjit::training::cli
