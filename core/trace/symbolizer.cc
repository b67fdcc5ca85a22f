#include "core/trace/symbolizer.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "core/base/config.h"
#include "core/base/mutex.h"

namespace fjit::detail {
namespace {

std::string demangle(const char* name) {
  if (name == nullptr) return {};
  if (name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = (status == 0 && plain != nullptr) ? plain : name;
    std::free(plain);
    return out;
  }
  return name;
}

// Debug info may spell paths with "." and ".." (relative includes); normalized paths make the
// prefix tests against the source tree work.
std::string normalize(const char* file) {
  if (file == nullptr || *file == '\0') return {};
  std::string path = file;
  if (path.find("/.") == std::string::npos && path.find("//") == std::string::npos &&
      path[0] != '.')
    return path;  // already normal, as most are: skip the allocations of lexically_normal
  return std::filesystem::path(path).lexically_normal().string();
}

// The standard lookup asks debuginfod servers for debug files missing on disk (libc's, say)
// when DEBUGINFOD_URLS is set: that would block an error report on the network. Then separate
// debug files are looked up by build-id on local disk only. The variable is libdw's, not an
// option of fjit: it is looked at (through core/base/config.def) where libdw would read it.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                   const char* file, const char* debuglink, GElf_Word crc, char** found) {
  static const bool remote = [] {
    const std::optional<std::string> urls = config::debuginfod_urls();
    return urls.has_value() && !urls->empty();
  }();
  if (remote)
    return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file, debuglink, crc, found);
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file, debuglink, crc, found);
}

const Dwfl_Callbacks kCallbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = nullptr,
};

std::string die_string(Dwarf_Die* die, int name) {
  Dwarf_Attribute attr;  // _integrate: inlined instances keep names in their abstract origin
  if (dwarf_attr_integrate(die, name, &attr) == nullptr) return {};
  const char* s = dwarf_formstring(&attr);
  return s != nullptr ? s : "";
}

// Qualified names of call operators, by their declaration DIE's place in the mapped debug info.
using NameCache = absl::flat_hash_map<const void*, std::string>;

// A lambda's call operator is named "operator()" and has no linkage name; "{lambda}::" and the
// function around it make it recognizable. That costs a walk of the unit (dwarf_getscopes_die:
// bench/RESULTS.md, "Figures quoted by the sources"), hence the cache, and why the (rarer) other nameless functions keep their plain
// name, which their file:line disambiguates.
std::string qualify_call_operator(Dwarf_Die* die, std::string name, NameCache* cache) {
  Dwarf_Die decl = *die;
  for (int hop = 0; hop < 4; ++hop) {  // concrete -> abstract -> declaration in the class
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if ((dwarf_attr(&decl, DW_AT_abstract_origin, &attr) == nullptr &&
         dwarf_attr(&decl, DW_AT_specification, &attr) == nullptr) ||
        dwarf_formref_die(&attr, &next) == nullptr)
      break;
    decl = next;
  }
  auto [cached, inserted] = cache->try_emplace(decl.addr);
  if (!inserted) return cached->second;
  Dwarf_Die* scopes = nullptr;
  const int n = dwarf_getscopes_die(&decl, &scopes);
  for (int i = 1; i < n; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    std::string outer;
    if (tag == DW_TAG_subprogram) {
      outer = demangle(die_string(&scopes[i], DW_AT_linkage_name).c_str());
      if (outer.empty()) outer = die_string(&scopes[i], DW_AT_name);
      i = n;  // a linkage name is already fully qualified; stop either way
    } else if (tag == DW_TAG_namespace) {
      outer = die_string(&scopes[i], DW_AT_name);
      if (outer.empty()) outer = "(anonymous namespace)";
    } else if (tag == DW_TAG_class_type || tag == DW_TAG_structure_type) {
      outer = die_string(&scopes[i], DW_AT_name);
      if (outer.empty()) outer = "{lambda}";  // g++ leaves closure types unnamed
    } else {
      continue;
    }
    if (!outer.empty()) name = outer + "::" + name;
  }
  std::free(scopes);
  cached->second = name;
  return name;
}

// The name of a subprogram or inlined-subroutine DIE, qualified like the symbol table's when it
// has a linkage name.
std::string die_function_name(Dwarf_Die* die, NameCache* cache) {
  std::string name = demangle(die_string(die, DW_AT_linkage_name).c_str());
  if (name.empty()) name = demangle(die_string(die, DW_AT_MIPS_linkage_name).c_str());
  if (!name.empty()) return name;
  name = die_string(die, DW_AT_name);
  return name == "operator()" ? qualify_call_operator(die, std::move(name), cache) : name;
}

// Where an inlined subroutine was inlined into its caller.
void inlined_call_site(Dwarf_Die* cu, Dwarf_Die* inlined, std::string* file, int* line) {
  Dwarf_Attribute attr;
  Dwarf_Word value = 0;
  file->clear();
  *line = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &value) == 0)
    *line = static_cast<int>(value);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &value) == 0 &&
      dwarf_getsrcfiles(cu, &files, &nfiles) == 0 && value < nfiles)
    *file = normalize(dwarf_filesrc(files, value, nullptr, nullptr));
}

// Appends to `chain` the scopes below `parent` (blocks, inlined instances) that contain addr,
// outermost first, entering only scopes that contain it.
void scopes_at(Dwarf_Die* parent, Dwarf_Addr addr, std::vector<Dwarf_Die>* chain) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
         tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
        dwarf_haspc(&child, addr) == 1) {
      chain->push_back(child);
      scopes_at(&chain->back(), addr, chain);
      return;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

// The code ranges of one compilation unit's functions, sorted by start. Finding the function
// around an address by walking the unit's DIEs is slow even in a small unit (as
// dwarf_getscopes does, two or three times over; bench/RESULTS.md, "Figures quoted by the
// sources"); built once, this makes it a binary search.
// Functions are found at the top level and in namespaces, where g++ puts every definition
// except members of classes local to a function (those lose their inlined frames only).
struct FunctionRange {
  Dwarf_Addr low, high;
  Dwarf_Die die;
};

void index_functions(Dwarf_Die* parent, std::vector<FunctionRange>* out) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if (tag == DW_TAG_namespace) {
      index_functions(&child, out);
    } else if (tag == DW_TAG_subprogram) {
      Dwarf_Addr base, low, high;
      for (ptrdiff_t off = 0; (off = dwarf_ranges(&child, off, &base, &low, &high)) > 0;)
        out->push_back({low, high, child});
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

// Module and exported symbol from the dynamic loader: all that is known of an address outside
// every module libdwfl reported (or when there is no libdwfl session at all).
StackFrame loader_frame(uintptr_t pc) {
  StackFrame f;
  f.pc = pc;
  Dl_info info;
  if (pc != 0 && dladdr(reinterpret_cast<void*>(pc - 1), &info) != 0) {
    if (info.dli_fname != nullptr) f.module = info.dli_fname;
    f.function = demangle(info.dli_sname);
  }
  return f;
}

// The process-wide session. libdw objects are not thread-safe, so all of it runs under mu_;
// symbolizing happens when a report is made, so serializing it costs nothing that matters.
class Symbolizer {
 public:
  // Never destroyed: reports may be made from any thread until the process exits.
  static Symbolizer& instance() {
    static Symbolizer* const s = new Symbolizer;
    return *s;
  }

  std::vector<StackFrame> symbolize(const std::vector<uintptr_t>& pcs) {
    std::vector<StackFrame> out;
    MutexLock lock(&mu_);
    bool refreshed = false;
    for (uintptr_t pc : pcs) {
      auto it = cache_.find(pc);
      if (it == cache_.end()) {
        std::vector<StackFrame> frames;
        bool found = lookup(pc, &frames);
        // A library dlopen'ed since the last report is missing from the session: report the
        // process's modules again, at most once per call (an address in no module at all
        // would otherwise re-read /proc/self/maps every time).
        if (!found && !refreshed && pc != 0 && session() != nullptr) {
          report_modules();
          refreshed = true;
          found = lookup(pc, &frames);
        }
        if (!found) {  // not cached: a later dlopen may give it a module
          out.push_back(loader_frame(pc));
          continue;
        }
        if (cache_.size() >= kMaxCached) cache_.clear();  // bounds memory; entries are cheap to redo
        it = cache_.emplace(pc, std::move(frames)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

 private:
  static constexpr size_t kMaxCached = 1 << 16;

  Dwfl* session() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!tried_) {
      tried_ = true;
      dwfl_ = dwfl_begin(&kCallbacks);
      if (dwfl_ != nullptr) report_modules();
    }
    return dwfl_;
  }

  // Modules reported again with the same name and range keep their loaded debug info. The
  // DIE-keyed caches go: a module that was unloaded took the DIEs they point into with it.
  void report_modules() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    functions_.clear();
    names_.clear();
    dwfl_report_begin(dwfl_);
    dwfl_linux_proc_report(dwfl_, getpid());
    dwfl_report_end(dwfl_, nullptr, nullptr);
  }

  // The innermost function definition around addr (an address relative to the unit's module).
  bool function_at(Dwarf_Die* cu, Dwarf_Addr addr, Dwarf_Die* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<FunctionRange>& index = functions_[cu->addr];
    if (index.empty()) {
      index_functions(cu, &index);
      std::sort(index.begin(), index.end(),
                [](const FunctionRange& a, const FunctionRange& b) { return a.low < b.low; });
      if (index.empty()) index.push_back({0, 0, *cu});  // no functions: remember, with no range
    }
    auto it = std::upper_bound(index.begin(), index.end(), addr,
                               [](Dwarf_Addr a, const FunctionRange& r) { return a < r.low; });
    if (it == index.begin() || addr >= std::prev(it)->high) return false;
    *out = std::prev(it)->die;
    return true;
  }

  // Appends the frames at pc (inlined ones first, then the real function) and returns true,
  // or returns false when no reported module holds pc.
  bool lookup(uintptr_t pc, std::vector<StackFrame>* frames) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Dwfl* dwfl = session();
    if (dwfl == nullptr || pc == 0) return false;
    // A return address points just past the call; pc-1 lies inside the call instruction, so it
    // belongs to the right function and line even when the call is the function's last act.
    const Dwarf_Addr addr = pc - 1;
    Dwfl_Module* mod = dwfl_addrmodule(dwfl, addr);
    if (mod == nullptr) return false;

    StackFrame outer;
    outer.pc = pc;
    const char* mainfile = nullptr;
    const char* modname =
        dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &mainfile, nullptr);
    if (mainfile != nullptr) outer.module = mainfile;
    else if (modname != nullptr) outer.module = modname;
    outer.function = demangle(dwfl_module_addrname(mod, addr));
    // Versioned C symbols come as "name@@GLIBC_2.34"; mangled C++ names never hold '@'.
    outer.function.resize(std::min(outer.function.size(), outer.function.find('@')));

    // The line table's row for addr belongs to the innermost inlined function, if any.
    std::string file;
    int line = 0;
    if (Dwfl_Line* row = dwfl_module_getsrc(mod, addr))
      file = normalize(dwfl_lineinfo(row, nullptr, &line, nullptr, nullptr, nullptr));

    // Each inlined instance around addr is a frame of its own, whose caller location is its
    // DW_AT_call_file/line; the function that holds them is the real one.
    Dwarf_Addr bias = 0;
    Dwarf_Die function;
    Dwarf_Die* cu = dwfl_module_addrdie(mod, addr, &bias);
    if (cu != nullptr && function_at(cu, addr - bias, &function)) {
      std::vector<Dwarf_Die> chain;  // outermost first
      scopes_at(&function, addr - bias, &chain);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        if (dwarf_tag(&*it) != DW_TAG_inlined_subroutine) continue;
        frames->push_back({pc, die_function_name(&*it, &names_), file, line, outer.module});
        inlined_call_site(cu, &*it, &file, &line);
      }
      if (outer.function.empty()) outer.function = die_function_name(&function, &names_);
    }
    outer.file = std::move(file);
    outer.line = line;
    frames->push_back(std::move(outer));
    return true;
  }

  Mutex mu_;
  bool tried_ ABSL_GUARDED_BY(mu_) = false;
  Dwfl* dwfl_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<uintptr_t, std::vector<StackFrame>> cache_ ABSL_GUARDED_BY(mu_);
  // Per compilation unit, keyed by where its DIE lies in the mapped debug info.
  absl::flat_hash_map<const void*, std::vector<FunctionRange>> functions_ ABSL_GUARDED_BY(mu_);
  NameCache names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::vector<StackFrame> symbolize_return_addresses(const std::vector<uintptr_t>& pcs) {
  return Symbolizer::instance().symbolize(pcs);
}

}  // namespace fjit::detail
