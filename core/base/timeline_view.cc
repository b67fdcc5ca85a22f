// write_html_view (core/base/timeline_merge.h): a trace drawn as inline SVG in one HTML page.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/base/timeline_merge.h"
#include "nlohmann/json.hpp"

namespace fjit::timeline {
namespace {

constexpr int kLeft = 260, kRight = 30, kTop = 70, kLane = 16, kRowGap = 16, kAxis = 40;
constexpr int kLanes = 3;  // steps; instructions, collectives and compiles; waits

struct Box {
  std::string name, category;  // an instant's name carries its message
  double ts = 0, dur = -1;  // dur < 0: an instant
};

struct Row {
  std::string label;
  std::vector<Box> boxes;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

const char* colour(const std::string& category) {
  static const std::map<std::string, const char*> colours = {
      {"step", "#b8c2cc"}, {"op", "#4e79a7"},   {"collective", "#f28e2b"},
      {"wait", "#e15759"}, {"compile", "#59a14f"}, {"check", "#b07aa1"}};
  auto it = colours.find(category);
  return it == colours.end() ? "#9c9c9c" : it->second;
}

int lane(const std::string& category) {
  if (category == "step") return 0;
  if (category == "wait") return 2;
  return 1;
}

// What the view says under its title about the trace's clocks ("" for one process's file).
std::string clock_note(const nlohmann::json& trace) {
  const nlohmann::json other = trace.value("otherData", nlohmann::json::object());
  if (!other.contains("sources")) return "";
  if (other.value("time_base", std::string()) != "rank 0 clock")
    return "clocks NOT aligned: the processes' events do not line up";
  return fmt::format("clocks aligned to rank 0's within {:.1f} us",
                     other.value("clock_error_ns", 0.0) / 1e3);
}

std::map<int, Row> read_rows(const std::string& path, std::string* note) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("timeline view: cannot read {}", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("timeline view: {} is not JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw std::runtime_error(
        fmt::format("timeline view: {} is not a trace-event file (no traceEvents array)", path));
  std::map<int, Row> rows;
  try {
    *note = clock_note(j);
    for (const nlohmann::json& e : j["traceEvents"]) {
      const int pid = e.value("pid", 0);
      const std::string ph = e.value("ph", std::string());
      if (ph == "M" && e.value("name", std::string()) == "process_name") {
        rows[pid].label = e["args"].value("name", std::string());
      } else if (ph == "X" || ph == "i") {
        std::string name = e.value("name", std::string());
        if (ph == "i" && e.contains("args") && e["args"].contains("message"))
          name += ": " + e["args"]["message"].get<std::string>();
        Box b{std::move(name), e.value("cat", std::string()),
              e.at("ts").get<double>(), ph == "X" ? e.at("dur").get<double>() : -1.0};
        rows[pid].boxes.push_back(std::move(b));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("timeline view: {}: {}", path, e.what()));
  }
  for (auto& [pid, row] : rows)
    if (row.label.empty()) row.label = fmt::format("process {}", pid);
  return rows;
}

// The window [t0, t1) in microseconds: the last `last_steps` step numbers, or everything.
std::pair<double, double> window(const std::map<int, Row>& rows, int last_steps) {
  double t0 = INFINITY, t1 = -INFINITY;
  int64_t last = -1;
  std::vector<std::pair<int64_t, const Box*>> steps;
  for (const auto& [pid, row] : rows)
    for (const Box& b : row.boxes) {
      if (b.dur >= 0) t0 = std::min(t0, b.ts), t1 = std::max(t1, b.ts + b.dur);
      int64_t n = 0;
      if (b.category == "step" && b.name.rfind("step ", 0) == 0 &&
          std::from_chars(b.name.data() + 5, b.name.data() + b.name.size(), n).ec == std::errc()) {
        steps.emplace_back(n, &b);
        last = std::max(last, n);
      }
    }
  if (last_steps > 0 && !steps.empty()) {
    t0 = INFINITY, t1 = -INFINITY;
    for (auto [n, b] : steps)
      if (n > last - last_steps) t0 = std::min(t0, b->ts), t1 = std::max(t1, b->ts + b->dur);
  }
  if (!(t0 < t1)) t0 = 0, t1 = 1;
  return {t0, t1};
}

double tick_step_ms(double span_ms) {
  const double raw = span_ms / 8;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

void write_html_view(const std::string& trace, const std::string& html, const ViewOptions& options) {
  std::string note;
  const std::map<int, Row> rows = read_rows(trace, &note);
  const auto [t0, t1] = window(rows, options.last_steps);
  const int width = std::max(options.width, kLeft + kRight + 200);
  const double plot = width - kLeft - kRight;
  const int row_h = kLanes * kLane + kRowGap;
  const int height = kTop + static_cast<int>(rows.size()) * row_h + kAxis;
  auto x = [&](double t) { return kLeft + (t - t0) / (t1 - t0) * plot; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"10\" y=\"22\" font-size=\"16\">{}</text>\n",
      width, height, escape(options.title.empty() ? trace : options.title));
  double lx = 10;
  for (const char* cat : {"step", "op", "collective", "wait", "compile", "check"}) {
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"36\" width=\"12\" height=\"12\" fill=\"{}\"/>"
                       "<text x=\"{:.1f}\" y=\"46\">{}</text>\n",
                       lx, colour(cat), lx + 16, cat);
    lx += 110;
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"46\">{}</text>\n", lx + 20, escape(note));
  int r = 0;
  for (const auto& [pid, row] : rows) {
    const int y = kTop + r++ * row_h;
    svg += fmt::format("<text x=\"10\" y=\"{}\">{}</text>\n", y + kLanes * kLane / 2 + 4,
                       escape(row.label));
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#f4f5f7\"/>\n",
                       kLeft, y, plot, kLanes * kLane);
    for (const Box& b : row.boxes) {
      if (b.dur < 0) {
        if (b.ts < t0 || b.ts > t1) continue;
        svg += fmt::format("<line x1=\"{0:.2f}\" x2=\"{0:.2f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" "
                           "stroke-width=\"2\"><title>{4}</title></line>\n",
                           x(b.ts), y, y + kLanes * kLane, colour("check"), escape(b.name));
        continue;
      }
      const double a = std::max(b.ts, t0), e = std::min(b.ts + b.dur, t1);
      if (e < a) continue;
      const int ly = y + lane(b.category) * kLane + 1;
      svg += fmt::format("<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
                         "stroke=\"white\" stroke-width=\"0.3\"><title>{} ({:.3f} ms)</title></rect>\n",
                         x(a), ly, std::max(0.6, x(e) - x(a)), kLane - 2, colour(b.category),
                         escape(b.name), b.dur / 1e3);
    }
  }
  const int axis_y = kTop + static_cast<int>(rows.size()) * row_h;
  svg += fmt::format("<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", kLeft,
                     kLeft + plot, axis_y, axis_y);
  const double span_ms = (t1 - t0) / 1e3, step = tick_step_ms(span_ms);
  for (double t = 0; t <= span_ms + 1e-9; t += step) {
    const double px = x(t0 + t * 1e3);
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"black\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g} ms</text>\n",
                       px, axis_y, axis_y + 5, axis_y + 20, t);
  }
  svg += "</svg>\n";

  std::ofstream out(html);
  out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
      << escape(options.title.empty() ? trace : options.title)
      << "</title></head>\n<body style=\"margin:0\">\n" << svg << "</body></html>\n";
  out.close();
  if (!out) throw std::runtime_error(fmt::format("timeline view: cannot write {}", html));
}

}  // namespace fjit::timeline
