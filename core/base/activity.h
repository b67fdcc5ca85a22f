// What each replica of this process is doing, for the reports of a stalled job
// (checks/activity_report.h, parallel/*_communicator.cc).
//
// The executor (core/compile/executable.cc) keeps the index of the instruction each replica
// is running, per nesting level (a loop body's plan runs inside its loop's instruction), and
// the communicators record the collective a replica is in and whether it waits there. Any
// thread may read a replica's activity at any time: the values are a racy snapshot of a
// moment, good for a report, never for synchronisation.
//
// Promises:
//  - Cheap: a run binds its thread once (a thread_local store); each instruction costs one
//    relaxed store; a collective, four.
//  - Bounded: replicas 0 .. kMaxTrackedReplicas-1 are tracked; others are not (null slot).
//  - One thread runs a replica's plans at a time (as pmap does). Plain jit calls made on
//    several threads at once all run as replica 0 and share its slot, whose report is then
//    only a rough guess.
#pragma once

#include <atomic>
#include <cstdint>

namespace fjit {

struct ReplicaActivity {
  static constexpr int kDepth = 4;  // nesting levels recorded (deeper ones are not)
  std::atomic<int> depth{0};        // plans running, nested; level depth-1 is the innermost
  std::atomic<const void*> plan[kDepth] = {};    // the Executable of each level
  std::atomic<int32_t> instr[kDepth] = {};       // its instruction running
  std::atomic<const char*> collective{nullptr};  // the last collective entered (static string)
  std::atomic<uint64_t> seq{0};                  // its number among this replica's collectives
  std::atomic<uint64_t> bytes{0};                // the bytes it moves from this replica
  std::atomic<const char*> axis{nullptr};        // the axis of the collective instruction
                                                 // running (null: none, or fjit's own call)
  std::atomic<bool> waiting{false};              // waiting in it for the other replicas
  std::atomic<int> tid{0};                       // the OS thread running the replica's plan
};

inline constexpr int kMaxTrackedReplicas = 256;

// Replica `replica`'s slot, or null when it is not tracked.
ReplicaActivity* replica_activity(int replica);
// The slot of the replica the calling thread runs (bind_activity), or null.
ReplicaActivity* current_activity();
// The calling thread runs replica `replica` from now on (and records its thread id).
void bind_activity(int replica);

// Kept by the executor around one plan run on the calling thread.
class ActivityLevel {
 public:
  ActivityLevel(ReplicaActivity* a, const void* plan) : a_(a) {
    if (!a_) return;
    level_ = a_->depth.load(std::memory_order_relaxed);
    if (level_ < ReplicaActivity::kDepth) {
      a_->plan[level_].store(plan, std::memory_order_relaxed);
      a_->instr[level_].store(-1, std::memory_order_relaxed);
    }
    a_->depth.store(level_ + 1, std::memory_order_release);
  }
  ~ActivityLevel() {
    if (a_) a_->depth.store(level_, std::memory_order_release);
  }
  ActivityLevel(const ActivityLevel&) = delete;
  ActivityLevel& operator=(const ActivityLevel&) = delete;
  void at(int32_t instr) const {
    if (a_ && level_ < ReplicaActivity::kDepth)
      a_->instr[level_].store(instr, std::memory_order_relaxed);
  }

 private:
  ReplicaActivity* a_;
  int level_ = 0;
};

// Called by a communicator as replica `replica` enters a collective (a static name).
inline void enter_collective(int replica, const char* name, uint64_t seq, uint64_t bytes) {
  if (ReplicaActivity* a = replica_activity(replica)) {
    a->collective.store(name, std::memory_order_relaxed);
    a->seq.store(seq, std::memory_order_relaxed);
    a->bytes.store(bytes, std::memory_order_relaxed);
  }
}

// Kept by a communicator while replica `replica` waits in its collective for the others.
class WaitingInCollective {
 public:
  explicit WaitingInCollective(int replica) : a_(replica_activity(replica)) {
    if (a_) a_->waiting.store(true, std::memory_order_release);
  }
  ~WaitingInCollective() {
    if (a_) a_->waiting.store(false, std::memory_order_release);
  }
  WaitingInCollective(const WaitingInCollective&) = delete;
  WaitingInCollective& operator=(const WaitingInCollective&) = delete;

 private:
  ReplicaActivity* a_;
};

// Long kernels and test seams call this every few milliseconds while they run: it runs the
// hook a backend installed (the MPI backend answers stall roll calls from it), if any.
// Cheap when none is installed (one relaxed load).
using ActivityPollFn = void (*)(void* ctx);
void set_activity_poll(ActivityPollFn fn, void* ctx);  // null fn: none
// Removes the hook if it is (fn, ctx).
void set_activity_poll_if(ActivityPollFn fn, void* ctx);
void activity_poll();

}  // namespace fjit
