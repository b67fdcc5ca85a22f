#include "parallel/mpi_roll_call.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "checks/activity_report.h"
#include "core/trace/thread_stacks.h"
#include "parallel/mpi_runtime.h"

namespace fjit {
namespace {

constexpr int kTag = 1;  // the roll call's communicator carries nothing else
constexpr int kQuery = 1;
constexpr int kAnswer = 2;  // from a rank waiting in a collective
constexpr int kBusy = 3;    // from a rank computing (a poll point: core/base/activity.h)
constexpr int kStacks = 4;  // a rank's host stacks, sent after its answer to a kQueryStacks
constexpr int kQueryStacks = 5;  // the abort's query: answer, then send host stacks
// What a rank's host stacks may cost it: frames per thread, how long one thread may take to
// answer, the whole collection, and the size of the text sent.
constexpr int kStackFrames = 40;
constexpr auto kStackThreadTimeout = std::chrono::milliseconds(100);
constexpr auto kStackBudget = std::chrono::milliseconds(2000);
constexpr size_t kStackBytes = 16 * 1024;
// How long an answer may be in flight before the stacks are built anyway.
constexpr auto kAnswerInFlight = std::chrono::milliseconds(100);
// How long the abort's survey waits, after the answers, for the answering ranks' stacks:
// past the collection's budget, since symbolizing alone can take seconds in a sanitized build.
constexpr auto kStacksGrace = std::chrono::milliseconds(5000);
constexpr size_t kHostBytes = 256;
// How often a surveying rank looks for answers.
constexpr auto kPollEvery = std::chrono::milliseconds(1);

// "rank 3" or "ranks 0,1,5".
std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

bool is_query(int kind) { return kind == kQuery || kind == kQueryStacks; }

// Every line after the first indented under a rank's entry of the report.
std::string indented(std::string lines) {
  while (!lines.empty() && lines.back() == '\n') lines.pop_back();
  for (size_t at = lines.find('\n'); at != std::string::npos; at = lines.find('\n', at + 1))
    lines.replace(at, 1, "\n    ");
  return lines;
}

// This process's host stacks, at most kStackBytes (cut at a line).
std::string capped_host_stacks(const std::string& header) {
  std::string text = fmt::format(
      "{}\n{}", header, all_thread_stacks(kStackFrames, kStackThreadTimeout, kStackBudget));
  if (text.size() > kStackBytes) {
    const size_t cut = text.rfind('\n', kStackBytes - 64);
    text.resize(cut == std::string::npos ? kStackBytes - 64 : cut + 1);
    text += fmt::format("(cut at {} KiB)\n", kStackBytes / 1024);
  }
  return text;
}

}  // namespace

struct MpiRollCall::Note {
  int32_t kind = 0;
  int32_t rank = 0;
  uint64_t seq = 0;
  char collective[48] = {};
};

struct MpiRollCall::Heard {
  bool any = false;
  Note note;
  uint64_t at_seq = 0;  // the surveyor's collective number when the note came
  std::string doing;    // an answer's account of what its rank is doing
  std::string stacks;   // its host stacks, when they came (kStacks)
};

// A note, then (answers only) the text saying what the rank is doing.
struct MpiRollCall::Outgoing {
  std::vector<char> bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

MpiRollCall::MpiRollCall(MPI_Comm comm) : outbox_(std::make_unique<std::deque<Outgoing>>()) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  char mine[kHostBytes] = {};
  if (gethostname(mine, kHostBytes - 1) != 0) std::snprintf(mine, kHostBytes, "(unknown host)");
  std::vector<char> all(kHostBytes * static_cast<size_t>(size_));
  MPI_Allgather(mine, kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR, comm_);
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + r * kHostBytes);
  heard_.resize(static_cast<size_t>(size_));
}

MpiRollCall::~MpiRollCall() {
  if (!mpi_active()) return;  // MPI is gone, and every request with it
  bool pending = false;
  for (Outgoing& o : *outbox_) {
    int done = 0;
    if (o.request != MPI_REQUEST_NULL) MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
    if (o.request != MPI_REQUEST_NULL && !done) {
      MPI_Request_free(&o.request);  // its buffer must stay valid: the outbox is let go below
      pending = true;
    }
  }
  if (pending) (void)outbox_.release();  // a few notes to a rank that never took them
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiRollCall::send(int to, int kind, const char* collective, uint64_t seq,
                       const std::string* body) {
  while (!outbox_->empty()) {
    int done = 0;
    MPI_Test(&outbox_->front().request, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    outbox_->pop_front();
  }
  Note note;
  note.kind = kind;
  note.rank = rank_;
  note.seq = seq;
  std::snprintf(note.collective, sizeof note.collective, "%s", collective);
  // What this rank is doing: built once per roll call that reaches it, and only for answers.
  const auto now = std::chrono::steady_clock::now();
  if ((kind == kAnswer || kind == kBusy) &&
      (doing_.empty() || now - doing_at_ > std::chrono::seconds(1))) {
    doing_ = doing(false);
    doing_at_ = now;
  }
  if (kind == kAnswer || kind == kBusy) body = &doing_;
  const size_t extra = body ? body->size() : 0;
  Outgoing& o = outbox_->emplace_back();  // a deque: earlier notes do not move
  o.bytes.resize(sizeof(Note) + extra);
  std::memcpy(o.bytes.data(), &note, sizeof(Note));
  if (extra > 0) std::memcpy(o.bytes.data() + sizeof(Note), body->data(), extra);
  MPI_Isend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, to, kTag, comm_, &o.request);
}

std::string MpiRollCall::doing(bool host_stacks) const {
  std::string lines = describe_replica_activity(rank_);
  if (host_stacks)
    lines += fmt::format("\n{}", capped_host_stacks(fmt::format(
                                      "host stacks (pid {}):", static_cast<long>(::getpid()))));
  return indented(std::move(lines));
}

void MpiRollCall::send_owed_stacks() {
  if (owed_stacks_.empty()) return;
  // The answers go first: wait (a while) for those in flight to leave.
  bool in_flight = false;
  for (Outgoing& o : *outbox_) {
    int done = 0;
    if (o.request != MPI_REQUEST_NULL) MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
    in_flight = in_flight || o.request != MPI_REQUEST_NULL;
  }
  if (in_flight && std::chrono::steady_clock::now() - owed_since_ < kAnswerInFlight) return;
  const std::string stacks = capped_host_stacks(
      fmt::format("host stacks of rank {} (pid {}, sent after its answer):", rank_,
                  static_cast<long>(::getpid())));
  for (int to : owed_stacks_) send(to, kStacks, owed_collective_.c_str(), owed_seq_, &stacks);
  owed_stacks_.clear();
}

void MpiRollCall::drain(const char* collective, uint64_t seq, int reply) {
  for (;;) {
    int flag = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kTag, comm_, &flag, &message, &status);
    if (!flag) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<char> bytes(std::max<size_t>(static_cast<size_t>(count), sizeof(Note)));
    MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    Note note;
    std::memcpy(&note, bytes.data(), sizeof(Note));
    note.collective[sizeof note.collective - 1] = '\0';
    const int from = status.MPI_SOURCE;
    // A note about a collective more than one call away from this rank's is left over from
    // a stall that resolved itself (every collective needs every rank).
    if (note.seq + 1 < seq || note.seq > seq + 1) continue;
    std::string text = count > static_cast<int>(sizeof(Note))
                           ? std::string(bytes.data() + sizeof(Note), bytes.data() + count)
                           : std::string();
    if (note.kind == kStacks) {  // follows its rank's answer; kept beside it
      heard_[from].stacks = std::move(text);
      continue;
    }
    std::string stacks = std::move(heard_[from].stacks);
    heard_[from] = Heard{true, note, seq, std::move(text), std::move(stacks)};
    if (!is_query(note.kind)) continue;
    send(from, reply, collective, seq);
    if (note.kind == kQueryStacks) {
      if (owed_stacks_.empty()) owed_since_ = std::chrono::steady_clock::now();
      if (std::find(owed_stacks_.begin(), owed_stacks_.end(), from) == owed_stacks_.end())
        owed_stacks_.push_back(from);
      owed_collective_ = collective;
      owed_seq_ = seq;
    }
  }
}

void MpiRollCall::answer(const char* collective, uint64_t seq) {
  drain(collective, seq, kAnswer);
  send_owed_stacks();
}

void MpiRollCall::answer_busy(uint64_t seq) {
  drain("(computing)", seq, kBusy);
  send_owed_stacks();
}

std::string MpiRollCall::survey(const char* collective, uint64_t seq,
                                std::chrono::milliseconds grace, bool host_stacks) {
  std::fill(heard_.begin(), heard_.end(), Heard{});
  doing_.clear();
  drain(collective, seq, kAnswer);  // queries that came first are answers too: their senders wait
  for (int r = 0; r < size_; ++r)
    if (r != rank_) send(r, host_stacks ? kQueryStacks : kQuery, collective, seq);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    drain(collective, seq, kAnswer);
    send_owed_stacks();
    int heard = 0;
    for (int r = 0; r < size_; ++r) heard += r != rank_ && heard_[r].any && heard_[r].at_seq == seq;
    if (heard == size_ - 1 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPollEvery);
  }
  // The ranks that answered send their host stacks next: wait for them a while longer.
  const auto stacks_deadline = std::chrono::steady_clock::now() + kStacksGrace;
  while (host_stacks) {
    bool all_in = true;
    for (int r = 0; r < size_; ++r)
      all_in = all_in && (r == rank_ || !heard_[r].any || heard_[r].at_seq != seq ||
                          !heard_[r].stacks.empty());
    if (all_in || std::chrono::steady_clock::now() >= stacks_deadline) break;
    std::this_thread::sleep_for(kPollEvery);
    drain(collective, seq, kAnswer);
    send_owed_stacks();
  }
  return describe(collective, seq, host_stacks);
}

std::string MpiRollCall::describe(const char* collective, uint64_t seq, bool host_stacks) const {
  std::vector<int> missing, waiting;
  std::string elsewhere;
  for (int r = 0; r < size_; ++r) {
    const Heard& h = heard_[r];
    if (r == rank_) {
      waiting.push_back(r);
    } else if (!h.any || h.at_seq != seq || h.note.kind == kBusy) {
      missing.push_back(r);
    } else if (h.note.seq == seq && std::strcmp(h.note.collective, collective) == 0) {
      waiting.push_back(r);
    } else {
      elsewhere += fmt::format("{}rank {} (on {}) in {} #{}", elsewhere.empty() ? "" : ", ", r,
                               hosts_[r], h.note.collective, h.note.seq);
    }
  }
  // Ranks grouped by host, hosts in order of their first rank: "ranks 0,1 (on a), rank 2 (on b)".
  auto by_host = [this](const std::vector<int>& ranks) {
    std::vector<std::string> order;
    std::vector<std::vector<int>> groups;
    for (int r : ranks) {
      const auto at = std::find(order.begin(), order.end(), hosts_[r]);
      if (at == order.end()) {
        order.push_back(hosts_[r]);
        groups.push_back({r});
      } else {
        groups[at - order.begin()].push_back(r);
      }
    }
    std::string out;
    for (size_t i = 0; i < order.size(); ++i)
      out += fmt::format("{}{} (on {})", i > 0 ? ", " : "", rank_list(groups[i]), order[i]);
    return out;
  };
  std::string out = "not arrived: ";
  out += missing.empty() ? "none (every rank answered)" : by_host(missing);
  out += "; waiting in it: " + by_host(waiting);
  if (!elsewhere.empty()) out += "; in other collectives: " + elsewhere;
  out += "\nwhat each rank is doing:";
  for (int r = 0; r < size_; ++r) {
    const Heard& h = heard_[r];
    if (r == rank_)
      out += fmt::format("\n  rank {} (on {}, this rank): {}", r, hosts_[r],
                         host_stacks || doing_.empty() ? doing(host_stacks) : doing_);
    else if (h.any && h.at_seq == seq && is_query(h.note.kind))
      out += fmt::format("\n  rank {} (on {}): waiting in {} #{} (it asked the others; its account did not come)",
                         r, hosts_[r], h.note.collective, h.note.seq);
    else if (!h.any || h.at_seq != seq)
      out += fmt::format("\n  rank {} (on {}): cannot answer (it is neither waiting in a collective nor at a "
                         "poll point: computing in a kernel that does not poll, in host code, stopped, or dead)",
                         r, hosts_[r]);
    else
      out += fmt::format("\n  rank {} (on {}){}: {}", r, hosts_[r],
                         h.note.kind == kBusy ? " answered while computing" : "", h.doing);
    if (r == rank_ || !host_stacks) continue;
    if (!h.stacks.empty())
      out += fmt::format("\n    {}", indented(h.stacks));
    else
      out += fmt::format("\n    rank {} (on {}): no host stack within {:.1f} s", r, hosts_[r],
                         std::chrono::duration<double>(kStacksGrace).count());
  }
  return out;
}

}  // namespace fjit
