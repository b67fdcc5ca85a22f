// MpiRollCall: who is where when an MPI collective stalls.
//
// A rank that has not arrived at a collective cannot say so, and MPI has no cheap way to ask
// who has; so the ranks that have arrived tell each other. When a waiting rank's warning (or
// abort) deadline passes it sends a query to every other rank, on a communicator of the roll
// call's own, and gathers answers for a short grace. Every rank waiting in a collective
// answers queries on its slow path (answer(), polled only once its wait has gone to sleep),
// with the collective it is in and that collective's number. Whoever does not answer within
// the grace has not arrived at any collective: it is computing, stopped, or dead.
//
// Promises:
//  - Nothing on the fast path: no message is sent unless a rank's stall deadline passes, and
//    answer() costs one MPI_Improbe on a sleeping waiter.
//  - Host names are gathered once, at construction, so the report names the host of a rank
//    that does not answer.
//  - An answer is only taken as current when it came while the surveyor was in the same
//    collective call, about a collective at most one call away from it; older notes (a stall
//    that resolved itself) are ignored.
//  - Host stacks travel only for the abort's survey, and never in an answer: a rank asked by
//    it answers first, as fast as any answer, then builds its host stacks (all threads,
//    symbolized; bounded in time and size) and sends them as a second note. The survey waits
//    a bounded extra grace for them and names the ranks whose stacks did not come.
//  - Every call is collective-free after construction and safe to repeat.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace fjit {

class MpiRollCall {
 public:
  // Collective over `comm` (every rank must construct it): duplicates it and gathers every
  // rank's host name.
  explicit MpiRollCall(MPI_Comm comm);
  MpiRollCall(const MpiRollCall&) = delete;
  MpiRollCall& operator=(const MpiRollCall&) = delete;
  ~MpiRollCall();

  // Answers the queries that have come, saying this rank waits in `collective` #`seq`, and
  // what it is doing (checks/activity_report.h: its instruction and collective). Answers
  // carry no host stacks: symbolizing them can take longer than the surveyor waits (seconds
  // in a sanitized build), and a rank busy symbolizing answers nobody. When the abort's
  // survey asked, the stacks follow in a second note, once the answer has left.
  // Called by a waiting rank on its slow path.
  void answer(const char* collective, uint64_t seq);
  // The same from a rank that is computing (at a poll point of a long kernel, having made
  // `seq` collective calls): it has not arrived, but says what it is doing.
  void answer_busy(uint64_t seq);

  // Asks every other rank where it is and waits up to `grace` for the answers (answering
  // others meanwhile), this rank being in `collective` #`seq`. Returns what it learned:
  //   "not arrived: rank 3 (on node2); waiting in it: ranks 0,1 (on node1), rank 2 (on node2)"
  // followed by "; in other collectives: rank 4 (on node2) in barrier #58" when some are,
  // then "\nwhat each rank is doing:" and one entry per rank: its instruction and its
  // collective as it answered, or that it cannot answer. With `host_stacks` (the abort's
  // survey), the other ranks are asked for their host stacks too, and waited for a bounded
  // extra grace once the answers are in: every rank's entry adds its host stacks (all
  // threads, symbolized; "host stacks of rank 2 (pid N, sent after its answer):" for
  // another rank's), or "rank 2 (on host): no host stack within 5.0 s".
  std::string survey(const char* collective, uint64_t seq, std::chrono::milliseconds grace,
                     bool host_stacks = false);

  const std::string& host(int rank) const { return hosts_.at(rank); }

 private:
  struct Note;
  struct Heard;
  struct Outgoing;
  // Answers carry doing_; `body` is the text after other notes' header (host stacks).
  void send(int to, int kind, const char* collective, uint64_t seq,
            const std::string* body = nullptr);
  // Sends this rank's host stacks to the ranks that asked for them, once its answers have left.
  void send_owed_stacks();
  // Receives every note that has come; answers queries (as `reply`); keeps the current ones.
  void drain(const char* collective, uint64_t seq, int reply);
  std::string doing(bool host_stacks) const;  // this rank's activity, and its host stacks
  std::string describe(const char* collective, uint64_t seq, bool host_stacks) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::string> hosts_;
  std::vector<Heard> heard_;  // per rank: the latest note, and this rank's call when it came
  std::string doing_;  // this rank's answer text, reused for a second
  std::chrono::steady_clock::time_point doing_at_{};  // when doing_ was built
  // Ranks owed this rank's host stacks (their abort's survey asked), since when, and the
  // collective and number the answer gave.
  std::vector<int> owed_stacks_;
  std::chrono::steady_clock::time_point owed_since_{};
  std::string owed_collective_;
  uint64_t owed_seq_ = 0;
  // Notes being sent: their buffers must outlive their requests.
  std::unique_ptr<std::deque<Outgoing>> outbox_;
};

}  // namespace fjit
