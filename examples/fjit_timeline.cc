// fjit_timeline: one trace for a whole job from the timeline files its processes wrote
// (FJIT_TIMELINE; under MPI one file per rank, core/base/timeline.h), and a self-contained HTML
// picture of a trace. Installed with fjit.
//
//   fjit_timeline merge OUT.json IN.json [IN.rank1.json ...]
//       one process per replica ("replica R (rank P, host H)"), on rank 0's clock
//   fjit_timeline html OUT.html TRACE.json [--last-steps N] [--width PIXELS] [--title TEXT]
//       one row per replica, events as boxes coloured by category, a time axis
#include <charconv>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/base/timeline_merge.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: fjit_timeline merge OUT.json IN.json [IN.rank1.json ...]\n"
               "       fjit_timeline html OUT.html TRACE.json [--last-steps N] [--width PIXELS]"
               " [--title TEXT]\n");
  return 2;
}

int run(const std::vector<std::string>& args) {
  if (args.size() >= 3 && args[0] == "merge") {
    const std::vector<std::string> inputs(args.begin() + 2, args.end());
    const fjit::timeline::MergeResult r = fjit::timeline::merge(inputs, args[1]);
    std::printf("%s: %d replicas from %d files, clocks %s (error bound %.3f us)\n",
                args[1].c_str(), r.replicas, r.files, r.aligned ? "aligned" : "NOT aligned",
                static_cast<double>(r.clock_error_ns) / 1e3);
    if (!r.aligned)
      std::fprintf(stderr, "fjit_timeline: some inputs are on their own clocks (written by a "
                           "process that did not align its clock); their events do not line up\n");
    return 0;
  }
  if (args.size() >= 3 && args[0] == "html") {
    fjit::timeline::ViewOptions options;
    for (size_t i = 3; i < args.size(); i += 2) {
      if (i + 1 >= args.size()) return usage();
      int* number = args[i] == "--last-steps" ? &options.last_steps
                    : args[i] == "--width"      ? &options.width
                                                : nullptr;
      if (number != nullptr) {
        const std::string& text = args[i + 1];
        if (std::from_chars(text.data(), text.data() + text.size(), *number).ptr !=
                text.data() + text.size() || *number < 0) {
          std::fprintf(stderr, "fjit_timeline: %s needs a count, not '%s'\n", args[i].c_str(),
                       text.c_str());
          return usage();
        }
      } else if (args[i] == "--title") {
        options.title = args[i + 1];
      } else {
        return usage();
      }
    }
    fjit::timeline::write_html_view(args[2], args[1], options);
    return 0;
  }
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fjit_timeline: %s\n", e.what());
    return 1;
  }
}
