// Timeline: a Chrome trace-event / Perfetto JSON record of a run, in the spirit of Horovod's
// timeline and JAX's profiler trace. Open the file in https://ui.perfetto.dev or
// chrome://tracing.
//
// What it records, on one track per replica (the replica index is the track; under MPI each
// rank is one replica): every step, inside it every plan instruction (a fused instruction is
// one event, named by what it fuses), each with the bytes it writes (a collective's bytes are
// its buffer), the time a replica waits for the others at a collective (backends report it),
// compiles (on the track of the thread that compiled), and raised checks (instant events).
//
// Contracts:
//  - Off by default. When off, recording costs one relaxed atomic load per step and none per
//    instruction (Executable::run picks its timed loop once per run).
//  - Bounded: each track keeps the events of its last `max_steps` steps (a ring) and the last
//    kMaxLooseEvents events outside any step (compiles before the first step, say).
//  - Turned on by start(), or by FJIT_TIMELINE=path.json (FJIT_TIMELINE_STEPS=N steps, default
//    100), which the first jit or pmap reads (apply_process_environment, core/runtime/jit_core.h);
//    written by write() or stop(), and at process exit after write_at_exit() (as the
//    environment's timeline is).
//  - A process that runs one replica of several processes (MPI) writes `path` with
//    ".rankR" before its extension ("t.json" -> "t.rank1.json") for R > 0; the tracks of all
//    ranks are distinct (the replica index; events recorded before a thread has a replica, a
//    compile say, go on the process's first replica, rank R's under MPI).
//  - One time base per job: once set_clock_offset() has run (the MPI backend estimates each
//    rank's offset against rank 0 at start-up, parallel/clock_sync.h), timestamps are written
//    on rank 0's monotonic clock (microseconds since its boot), so the files of all ranks line
//    up; otherwise on this process's clock, from start(). The file's "otherData" says which
//    ("time_base"), with the process, its host, and the offset and its error bound
//    (clock_offset_ns, clock_error_ns). merge() (core/base/timeline_merge.h, the program
//    fjit_timeline) writes the files of a job as one trace.
//  - Thread-safe: any thread may record; each track has its own lock, held only by the
//    replica that owns it and by write().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fjit::timeline {

inline constexpr int kDefaultMaxSteps = 100;
inline constexpr int kMaxLooseEvents = 1024;

// Starts (or restarts, dropping what was recorded) recording into memory; `path` is where
// write() and stop() put the file. REQUIRES: max_steps >= 1.
void start(const std::string& path, int max_steps = kDefaultMaxSteps);
// Writes the file and stops recording. Returns false (and logs why) if the file could not be
// written.
bool stop();
// Writes what is recorded so far to `path` (empty: the path given to start()).
bool write(const std::string& path = "");
// Has write() run at process exit; registers once however often it is called.
void write_at_exit();

bool enabled();

// This process's place among the processes of a job (set by the MPI backend): names the
// file of a rank > 0 and labels its tracks.
void set_process(int index, int count);

// This process's clock against the job's time base (rank 0's clock): a local reading t is
// t + offset_ns there, within +-error_ns.
struct ClockOffset {
  int64_t offset_ns = 0;
  int64_t error_ns = 0;
};
// Writes timestamps on the job's time base from now on (see the contracts above).
void set_clock_offset(const ClockOffset& offset);
// The clock the timeline records by: now_ns(), plus the test seam's skew
// (core/base/timeline_testing.h). Clock exchanges between processes read this one.
int64_t clock_ns();

// The recording calls; each is a no-op when the timeline is off. `name` must outlive the
// process (a literal, op_name(), or intern()).
// The calling thread records on `track` (a replica index) from now on.
void set_track(int track);
void begin_step(int64_t step, int64_t start_ns);
void end_step(int64_t end_ns);
// A complete event [start_ns, end_ns) on the calling thread's track; bytes < 0: none.
void event(const char* name, const char* category, int64_t start_ns, int64_t end_ns,
           int64_t bytes = -1);
// A point in time with a message (copied).
void instant(const char* name, std::string_view message);

// A copy of `s` that lives as long as the process; equal strings give the same pointer.
const char* intern(std::string_view s);

}  // namespace fjit::timeline
