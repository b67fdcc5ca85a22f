// Stack traces for check sites and trace-time error messages.
//
// Promises:
//  - StackTrace::capture() only records raw return addresses (glibc backtrace() into a fixed
//    buffer, then one small copy) and looks nothing up, so that it can be taken for every check
//    site at trace time.
//  - Names, files and lines are looked up only on demand (symbolize(), user_frames(),
//    to_string()), through elfutils' libdwfl (core/trace/symbolizer.h), using one process-wide
//    session and a per-address cache. Thread-safe: any thread may symbolize at any time. The
//    first call in a process pays for loading debug info, a new address for a search of it,
//    a cached address only for the cache lookup.
//    (What capture and lookups cost: bench/RESULTS.md, "Figures quoted by the sources".)
//  - Addresses without debug info, without a module, or plain garbage never crash: such a
//    frame keeps whatever is known (the module, an exported symbol) and leaves the rest empty.
//  - Frames of functions inlined at an address are reported too, innermost first, each with
//    the line where it was inlined into the next one out.
//  - Symbolization never waits on the network: when DEBUGINFOD_URLS is set, separate debug
//    files are looked up by build-id on local disk only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fjit {

struct StackFrame {
  uintptr_t pc = 0;       // the return address as captured (not pc-1)
  std::string function;   // demangled; may be empty
  std::string file;       // absolute and normalized as the debug info has it; may be empty
  int line = 0;           // 0 when unknown
  std::string module;     // path of the executable or shared object; may be empty
};

class StackTrace {
 public:
  static constexpr int kMaxFrames = 64;

  StackTrace() = default;  // the empty trace

  // The calling thread's stack, innermost first, starting at the caller of capture() after
  // dropping `skip` more frames (skip=1 also drops the caller). At most kMaxFrames frames.
  static StackTrace capture(int skip = 0);
  // A trace made from known return addresses (innermost first), e.g. for tests or traces
  // received from elsewhere in this process. Keeps at most kMaxFrames.
  static StackTrace from_pcs(std::vector<uintptr_t> pcs);

  size_t size() const { return pcs_.size(); }
  bool empty() const { return pcs_.empty(); }
  const std::vector<uintptr_t>& pcs() const { return pcs_; }

  // Every frame, innermost first; an address with inlined calls yields several frames that
  // share its pc. Costs a DWARF lookup per address not seen before (cached afterwards).
  std::vector<StackFrame> symbolize() const;
  // symbolize() minus fjit's own frames and runtime noise; see is_user_frame().
  std::vector<StackFrame> user_frames() const;
  // One line per user frame, innermost first: "  at function (file:line)", the path relative
  // to the source tree when under it (the module's name when there is no file). At most
  // max_frames such lines (all when max_frames <= 0), then "  ... N more frames". Lines are
  // joined by '\n' with none at the end; empty when there is no user frame.
  std::string to_string(int max_frames = 16) const;

 private:
  explicit StackTrace(std::vector<uintptr_t> pcs) : pcs_(std::move(pcs)) {}
  std::vector<uintptr_t> pcs_;
};

// False for frames a user never wants to see in a report:
//  - fjit internals: file under FJIT_SOURCE_DIR/{core,parallel,checks}/, or a function named
//    "fjit::..." with no file info;
//  - the runtime: frames of system libraries (libc, libstdc++, ld.so, ... under /lib or
//    /usr/lib), standard and system headers (/usr/include), GoogleTest ("testing::..."),
//    process and thread entry points (_start, __libc_start_main, start_thread, clone), and a
//    main without file info (a test driver's, such as gtest_main's);
//  - frames with neither a function nor a file, which say nothing.
bool is_user_frame(const StackFrame& f);

// `file` relative to FJIT_SOURCE_DIR when it lies under it, otherwise unchanged. A relative
// `file` (as recorded when the compiler was given relative paths, e.g. "../core/a.cc" from a
// build folder) counts as under it when, without its leading "./" and "../", it names a file
// of the tree.
// FJIT_SOURCE_DIR is a compile definition of this file (the repository root); built
// without it, no path is made relative and no file counts as fjit-internal.
std::string relative_to_source_dir(const std::string& file);

// The innermost user frame as "file:line (function)" (path as relative_to_source_dir), or
// "<unknown>" when there is none. For errors raised by operators that have no
// std::source_location to go by.
std::string user_call_site(const StackTrace& t);

}  // namespace fjit
