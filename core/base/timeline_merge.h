// One trace for a whole job: merges the timeline files of its processes (core/base/timeline.h;
// one per MPI rank, or one of thread replicas) and draws a trace as a self-contained HTML page.
// The program fjit_timeline (examples/fjit_timeline.cc) runs both from the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fjit::timeline {

struct MergeResult {
  int files = 0;
  int replicas = 0;
  // Every input is on rank 0's time base (their clocks were aligned at start-up); when false
  // the files are merged on their own clocks and do not line up.
  bool aligned = true;
  int64_t clock_error_ns = 0;  // the largest error bound of the inputs' clock offsets
};

// Writes the events of `inputs` to `out` as one trace-event file: one process per replica,
// named "replica R (rank P, host H)" and sorted by R, timestamps moved so the earliest event of
// the job is at 0; "otherData" lists each input's process, host and clock offset. Throws
// std::runtime_error naming the file for an input that cannot be read or is not a timeline
// file, for a replica found in two inputs, or when `out` cannot be written.
// REQUIRES: !inputs.empty().
MergeResult merge(const std::vector<std::string>& inputs, const std::string& out);

struct ViewOptions {
  int last_steps = 0;  // draw only the window of the last N steps (by step number); 0: all
  int width = 1400;    // pixels
  std::string title;   // empty: the trace's path
};

// Draws the complete events of the trace at `trace` as one HTML page with inline SVG (no
// network resources): one row per process (replica), events as boxes coloured by category
// in lanes (steps; instructions, collectives and compiles; waits), raised checks as marks, and
// a time axis in milliseconds. Throws std::runtime_error naming the file as merge() does.
void write_html_view(const std::string& trace, const std::string& html, const ViewOptions& options);

}  // namespace fjit::timeline
