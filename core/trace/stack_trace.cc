#include "core/trace/stack_trace.h"

#include <execinfo.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string_view>

#include "core/trace/symbolizer.h"

#ifndef FJIT_SOURCE_DIR
#define FJIT_SOURCE_DIR ""
#endif

namespace fjit {
namespace {

std::string_view basename_of(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

const std::string& source_dir() {
  // Normalized like the paths the symbolizer returns; no trailing '/'.
  static const std::string dir = [] {
    std::string d = std::filesystem::path(FJIT_SOURCE_DIR).lexically_normal().string();
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return d;
  }();
  return dir;
}

bool under(std::string_view file, std::string_view dir, std::string_view sub) {
  return file.size() > dir.size() + sub.size() && file.substr(0, dir.size()) == dir &&
         file.substr(dir.size(), sub.size()) == sub;
}

// `file` relative to the source tree, or "" when it is not in it. Besides absolute paths,
// this takes the relative ones a compiler records when it is given relative paths (ccache
// with CCACHE_BASEDIR rewrites /work/x/core/a.cc to ../core/a.cc, relative to the build
// folder): leading "./" and "../" are dropped and what remains must exist in the tree.
std::string in_source_tree(std::string_view file) {
  const std::string& src = source_dir();
  if (src.empty() || file.empty()) return {};
  if (file.front() == '/') return under(file, src, "/") ? std::string(file.substr(src.size() + 1)) : std::string();
  while (file.starts_with("./") || file.starts_with("../")) file.remove_prefix(file[1] == '/' ? 2 : 3);
  if (file.empty()) return {};
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(src) / file, ec) ? std::string(file) : std::string();
}

// The qualified name without a leading return type (demangled template functions carry one:
// "void testing::internal::Run<...>(...)"): what follows the last top-level space before the
// parameter list.
std::string_view qualified_name(std::string_view fn) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < fn.size(); ++i) {
    const char c = fn[i];
    if (c == '<') ++depth;
    else if (c == '>') --depth;
    else if (c == '(' && depth == 0) break;
    else if (c == ' ' && depth == 0) start = i + 1;
  }
  return fn.substr(start);
}

bool is_system_module(std::string_view module) {
  return module.starts_with("/lib/") || module.starts_with("/lib64/") ||
         module.starts_with("/usr/lib/") || module.starts_with("/usr/lib64/") ||
         module == "[vdso]";
}

// Entry points of the process and of threads, and the test driver.
bool is_runtime_function(std::string_view fn) {
  static constexpr std::string_view kExact[] = {
      "_start", "start_thread", "clone", "clone3", "__clone", "__clone3",
      "execute_native_thread_routine"};
  std::string_view name = qualified_name(fn);
  if (name.starts_with("testing::") || name.starts_with("__libc_start")) return true;
  return std::find(std::begin(kExact), std::end(kExact), name) != std::end(kExact);
}

}  // namespace

// noinline: the frame that `skip` counts from must exist even under link-time optimization.
__attribute__((noinline)) StackTrace StackTrace::capture(int skip) {
  skip = std::clamp(skip, 0, kMaxFrames);
  constexpr int kSlack = 4;  // frames that may come before our caller's
  void* buf[kSlack + 2 * kMaxFrames];
  int n = backtrace(buf, kSlack + skip + kMaxFrames);
  // Our caller's frame is the one holding our return address. Usually that is frame 1 (frame 0
  // is capture() itself), but a sanitizer's interceptor of backtrace() adds frames of its own.
  int first = 1;
  void* const caller = __builtin_return_address(0);
  for (int i = 0; i < std::min(n, kSlack); ++i) {
    if (buf[i] == caller) {
      first = i;
      break;
    }
  }
  first += skip;
  n = std::min(n, first + kMaxFrames);
  std::vector<uintptr_t> pcs;
  if (n > first) {
    pcs.reserve(n - first);
    for (int i = first; i < n; ++i) pcs.push_back(reinterpret_cast<uintptr_t>(buf[i]));
  }
  return StackTrace(std::move(pcs));
}

StackTrace StackTrace::from_pcs(std::vector<uintptr_t> pcs) {
  if (pcs.size() > kMaxFrames) pcs.resize(kMaxFrames);
  return StackTrace(std::move(pcs));
}

std::vector<StackFrame> StackTrace::symbolize() const {
  if (pcs_.empty()) return {};
  return detail::symbolize_return_addresses(pcs_);
}

bool is_user_frame(const StackFrame& f) {
  if (f.function.empty() && f.file.empty()) return false;
  if (!f.file.empty()) {
    const std::string rel = in_source_tree(f.file);
    for (const char* layer : {"core", "checks", "parallel"})  // fjit's own source folders
      if (rel.starts_with(std::string(layer) + "/")) return false;
    if (f.file.starts_with("/usr/include/")) return false;
  } else if (qualified_name(f.function).starts_with("fjit::") || f.function == "main") {
    return false;  // fjit built without debug info; a test driver's main (gtest_main)
  }
  if (is_system_module(f.module)) return false;
  return !is_runtime_function(f.function);
}

std::vector<StackFrame> StackTrace::user_frames() const {
  std::vector<StackFrame> frames = symbolize();
  std::erase_if(frames, [](const StackFrame& f) { return !is_user_frame(f); });
  return frames;
}

std::string relative_to_source_dir(const std::string& file) {
  std::string rel = in_source_tree(file);
  return rel.empty() ? file : rel;
}

namespace {

// "file:line", "file", or "" when the frame has no file.
std::string location(const StackFrame& f) {
  if (f.file.empty()) return {};
  std::string out = relative_to_source_dir(f.file);
  if (f.line > 0) {
    out += ':';
    out += std::to_string(f.line);
  }
  return out;
}

}  // namespace

std::string StackTrace::to_string(int max_frames) const {
  const std::vector<StackFrame> frames = user_frames();
  std::string out;
  size_t shown = 0;
  for (const StackFrame& f : frames) {
    if (max_frames > 0 && shown == static_cast<size_t>(max_frames)) {
      out += "\n  ... " + std::to_string(frames.size() - shown) + " more frames";
      break;
    }
    if (shown++ > 0) out += '\n';
    out += "  at " + (f.function.empty() ? std::string("??") : f.function);
    std::string where = location(f);
    if (where.empty() && !f.module.empty()) where = basename_of(f.module);
    if (!where.empty()) out += " (" + where + ")";
  }
  return out;
}

std::string user_call_site(const StackTrace& t) {
  const std::vector<StackFrame> frames = t.user_frames();
  if (frames.empty()) return "<unknown>";
  const StackFrame& f = frames.front();
  std::string where = location(f);
  if (where.empty()) return f.function;
  if (!f.function.empty()) where += " (" + f.function + ")";
  return where;
}

}  // namespace fjit
