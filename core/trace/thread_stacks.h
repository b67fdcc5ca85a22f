// The stacks of every thread of this process, symbolized: what a stalled replica's host is
// doing (the stall reports of parallel/shm_communicator.cc and parallel/mpi_roll_call.cc).
//
// Promises:
//  - Every thread listed in /proc/self/task is asked, by a real-time signal whose handler
//    records the thread's return addresses (glibc backtrace(), warmed up before the handler
//    is installed, so the handler allocates nothing). A thread that does not record within
//    the timeout (it blocks the signal, or is stuck in the kernel) is listed as not answering.
//  - One collection at a time per process (a mutex); any thread may call it.
//  - Symbolized like StackTrace (core/trace/stack_trace.h), every frame, fjit's own included.
//  - With a budget, the whole collection (asking and symbolizing) stops asking threads once
//    the budget has passed; the threads left are listed as not asked.
//  - Cold path only: it allocates, reads /proc and symbolizes.
#pragma once

#include <chrono>
#include <string>

namespace fjit {

// One block per thread: "thread 1234 (name)[ (this thread)]:" then "    #k function (file:line)"
// lines, at most `max_frames` per thread. `timeout`: how long one thread may take to answer;
// `budget`: how long the whole collection may take (zero: no limit).
std::string all_thread_stacks(int max_frames = 24,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(200),
                              std::chrono::milliseconds budget = std::chrono::milliseconds(0));

}  // namespace fjit
