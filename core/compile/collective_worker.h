// CollectiveWorker: the thread that runs a replica's collectives while its plan goes on
// (communication overlapped with the backward pass; CompileOptions::overlap).
//
// The plan's thread submits a collective instruction and keeps running the instructions that
// do not read its results; before the first one that does, it waits for it. The worker runs
// what it is given one at a time, in submission order, so a replica still enters its
// collectives in plan order, as every replica must (core/kernels/collective/communicator.h), and only
// one thread at a time calls the replica's Communicator.
//
// Promises:
//  - Tickets count submissions from 1 since the last begin(); wait(k) returns when the first k
//    have finished, and rethrows the first exception any of them threw (once).
//  - drain() waits for everything submitted and swallows exceptions: a run that is leaving by
//    an exception calls it, so no task outlives the frame it reads.
//  - No allocation once the queue has held as many tasks as one run submits.
//  - The worker records its tasks in the timeline on the replica's track, as collectives.
//  - The destructor drains, then joins the thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/kernels/kernel.h"

namespace fjit {

class CollectiveWorker {
 public:
  explicit CollectiveWorker(int track);
  ~CollectiveWorker();
  CollectiveWorker(const CollectiveWorker&) = delete;
  CollectiveWorker& operator=(const CollectiveWorker&) = delete;

  // Starts a run that will submit at most `tasks` instructions. Nothing may be pending.
  void begin(int tasks);
  // Runs instr.fn(instr, frame) on the worker; `recorded`: add a timeline event.
  void submit(const Instr& instr, const Frame& frame, bool recorded);
  void wait(int ticket);
  void drain() noexcept;

 private:
  struct Task {
    const Instr* instr = nullptr;
    Frame frame{nullptr, nullptr};
    bool recorded = false;
  };
  void loop();

  const int track_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<Task> tasks_;   // this run's, by ticket - 1
  int submitted_ = 0;         // guarded by mu_
  int finished_ = 0;          // guarded by mu_
  bool stop_ = false;         // guarded by mu_
  std::exception_ptr error_;  // guarded by mu_: the first task error not yet rethrown
  std::thread thread_;
};

}  // namespace fjit
