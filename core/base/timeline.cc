#include "core/base/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_set.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/base/mutex.h"
#include "core/base/timeline_testing.h"
#include "nlohmann/json.hpp"

namespace fjit::timeline {
namespace {

struct Event {
  const char* name;
  const char* category;
  int64_t start_ns, end_ns;  // end_ns < 0: an instant
  int64_t bytes;
  std::string message;
};

struct Step {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
  std::vector<Event> events;
};

struct Track {
  Mutex mu;
  std::vector<Step> ring ABSL_GUARDED_BY(mu);  // slot s % ring.size() holds step slot s
  int64_t steps ABSL_GUARDED_BY(mu) = 0;       // steps begun
  bool in_step ABSL_GUARDED_BY(mu) = false;
  std::deque<Event> loose ABSL_GUARDED_BY(mu);

  void record(Event e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (in_step) {
      ring[steps % ring.size()].events.push_back(std::move(e));
      return;
    }
    if (loose.size() == static_cast<size_t>(kMaxLooseEvents)) loose.pop_front();
    loose.push_back(std::move(e));
  }
};

struct State {
  Mutex mu;
  std::map<int, std::unique_ptr<Track>> tracks ABSL_GUARDED_BY(mu);
  std::string path ABSL_GUARDED_BY(mu);
  int max_steps ABSL_GUARDED_BY(mu) = kDefaultMaxSteps;
  int process = 0, processes = 1;  // written under mu, read by write() under mu
  int64_t origin_ns ABSL_GUARDED_BY(mu) = 0;
  bool aligned ABSL_GUARDED_BY(mu) = false;  // set_clock_offset() ran: rank 0's time base
  ClockOffset offset ABSL_GUARDED_BY(mu);
};

std::atomic<bool> g_on{false};
std::atomic<uint64_t> g_generation{0};  // bumped by start(): thread caches drop their track
std::atomic<int64_t> g_skew_ns{0};       // the test seam's (timeline_testing.h)
// A thread that has not said which replica it records for: the process's first replica.
constexpr int kNoTrack = -1;

State& state() {
  static State* s = new State;  // never destroyed: replicas may record during exit
  return *s;
}

thread_local int t_track = kNoTrack;
thread_local Track* t_cached = nullptr;
thread_local uint64_t t_generation = ~uint64_t{0};

Track* current_track() {
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (t_cached != nullptr && t_generation == gen) return t_cached;
  State& s = state();
  MutexLock lock(&s.mu);
  std::unique_ptr<Track>& t = s.tracks[t_track];
  if (!t) {
    t = std::make_unique<Track>();
    MutexLock track_lock(&t->mu);
    t->ring.resize(s.max_steps);
  }
  t_cached = t.get();
  t_generation = gen;
  return t_cached;
}

std::string file_for(const std::string& path, int process) {
  if (process == 0) return path;
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  const std::string tag = ".rank" + std::to_string(process);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

// Microseconds on the file's time base: `shift` is added to this process's readings.
double us(int64_t ns, int64_t shift) { return static_cast<double>(ns + shift) / 1e3; }
double us_between(int64_t end_ns, int64_t start_ns) {
  return static_cast<double>(end_ns - start_ns) / 1e3;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

nlohmann::json event_json(const Event& e, int pid, int tid, int64_t shift) {
  nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"pid", pid}, {"tid", tid},
                      {"ts", us(e.start_ns, shift)}};
  if (e.end_ns < 0) {
    j["ph"] = "i";
    j["s"] = "t";
    j["args"] = {{"message", e.message}};
  } else {
    j["ph"] = "X";
    j["dur"] = us_between(e.end_ns, e.start_ns);
    if (e.bytes >= 0) j["args"] = {{"bytes", e.bytes}};
  }
  return j;
}

void write_on_exit() { write(); }

}  // namespace

bool enabled() { return g_on.load(std::memory_order_relaxed); }

void start(const std::string& path, int max_steps) {
  if (max_steps < 1) throw std::invalid_argument("timeline::start: max_steps must be >= 1");
  State& s = state();
  MutexLock lock(&s.mu);
  s.tracks.clear();
  s.path = path;
  s.max_steps = max_steps;
  s.origin_ns = now_ns();
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  g_on.store(true, std::memory_order_release);
}

bool stop() {
  const bool ok = write();
  g_on.store(false, std::memory_order_release);
  return ok;
}

void write_at_exit() {
  static const bool once = [] {
    std::atexit(&write_on_exit);
    return true;
  }();
  (void)once;
}

void set_process(int index, int count) {
  State& s = state();
  MutexLock lock(&s.mu);
  s.process = index;
  s.processes = count;
}

void set_clock_offset(const ClockOffset& offset) {
  State& s = state();
  MutexLock lock(&s.mu);
  s.aligned = true;
  s.offset = offset;
}

int64_t clock_ns() { return now_ns() + g_skew_ns.load(std::memory_order_relaxed); }

void testing::set_clock_skew(int64_t skew_ns) {
  g_skew_ns.store(skew_ns, std::memory_order_relaxed);
}

bool write(const std::string& path_in) {
  State& s = state();
  MutexLock lock(&s.mu);
  const std::string path = file_for(path_in.empty() ? s.path : path_in, s.process);
  if (path.empty()) return false;
  const int pid = s.process;
  // Aligned: rank 0's clock; otherwise this process's, from start() (the skew cancels there).
  const int64_t shift = s.aligned ? g_skew_ns.load(std::memory_order_relaxed) + s.offset.offset_ns
                                  : -s.origin_ns;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                    {"args", {{"name", s.processes > 1 ? "fjit rank " + std::to_string(pid) : "fjit"}}}});
  std::map<int, std::vector<Track*>> by_tid;  // kNoTrack joins the process's first replica
  for (auto& [key, track] : s.tracks) by_tid[key == kNoTrack ? pid : key].push_back(track.get());
  for (auto& [tid, tracks] : by_tid) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", "replica " + std::to_string(tid)}}}});
    for (Track* track : tracks) {
      MutexLock track_lock(&track->mu);
      for (const Event& e : track->loose) events.push_back(event_json(e, pid, tid, shift));
      const int64_t n = static_cast<int64_t>(track->ring.size());
      const int64_t done = track->steps;  // a step still running is left out
      for (int64_t k = std::max<int64_t>(0, done - n); k < done; ++k) {
        const Step& st = track->ring[k % n];
        events.push_back({{"name", "step " + std::to_string(st.step)}, {"cat", "step"},
                          {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", us(st.start_ns, shift)},
                          {"dur", us_between(st.end_ns, st.start_ns)},
                          {"args", {{"step", st.step}}}});
        for (const Event& e : st.events) events.push_back(event_json(e, pid, tid, shift));
      }
    }
  }
  const nlohmann::json other = {
      {"process", pid},
      {"processes", s.processes},
      {"host", host_name()},
      {"time_base", s.aligned ? "rank 0 clock" : "process start"},
      {"clock_offset_ns", s.aligned ? s.offset.offset_ns : 0},
      {"clock_error_ns", s.aligned ? s.offset.error_ns : 0}};
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
                        {"otherData", other}}
             .dump();
  out.close();
  if (!out) {
    log().error("timeline: could not write {}", path);
    return false;
  }
  return true;
}

void set_track(int track) {
  if (t_track == track) return;
  t_track = track;
  t_cached = nullptr;
}

void begin_step(int64_t step, int64_t start_ns) {
  if (!enabled()) return;
  Track* t = current_track();
  MutexLock lock(&t->mu);
  Step& slot = t->ring[t->steps % t->ring.size()];
  slot.step = step;
  slot.start_ns = start_ns;
  slot.events.clear();
  t->in_step = true;
}

void end_step(int64_t end_ns) {
  if (!enabled()) return;
  Track* t = current_track();
  MutexLock lock(&t->mu);
  if (!t->in_step) return;
  t->ring[t->steps % t->ring.size()].end_ns = end_ns;
  t->in_step = false;
  ++t->steps;
}

void event(const char* name, const char* category, int64_t start_ns, int64_t end_ns,
           int64_t bytes) {
  if (!enabled()) return;
  Track* t = current_track();
  MutexLock lock(&t->mu);
  t->record(Event{name, category, start_ns, end_ns, bytes, {}});
}

void instant(const char* name, std::string_view message) {
  if (!enabled()) return;
  Track* t = current_track();
  MutexLock lock(&t->mu);
  t->record(Event{name, "check", now_ns(), -1, -1, std::string(message)});
}

const char* intern(std::string_view s) {
  static Mutex mu;
  static auto* strings = new absl::node_hash_set<std::string>;
  MutexLock lock(&mu);
  return strings->emplace(s).first->c_str();
}

}  // namespace fjit::timeline
