#include "core/base/activity.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace fjit {
namespace {

ReplicaActivity g_slots[kMaxTrackedReplicas];
thread_local ReplicaActivity* t_current = nullptr;
std::atomic<ActivityPollFn> g_poll{nullptr};
std::atomic<void*> g_poll_ctx{nullptr};

}  // namespace

ReplicaActivity* replica_activity(int replica) {
  return replica >= 0 && replica < kMaxTrackedReplicas ? &g_slots[replica] : nullptr;
}

ReplicaActivity* current_activity() { return t_current; }

void bind_activity(int replica) {
  ReplicaActivity* a = replica_activity(replica);
  if (a == t_current) return;
  t_current = a;
  if (a) a->tid.store(static_cast<int>(::syscall(SYS_gettid)), std::memory_order_relaxed);
}

void set_activity_poll(ActivityPollFn fn, void* ctx) {
  g_poll_ctx.store(ctx, std::memory_order_relaxed);
  g_poll.store(fn, std::memory_order_release);
}

void set_activity_poll_if(ActivityPollFn fn, void* ctx) {
  ActivityPollFn expected = fn;
  if (g_poll_ctx.load(std::memory_order_relaxed) == ctx)
    g_poll.compare_exchange_strong(expected, nullptr);
}

void activity_poll() {
  if (ActivityPollFn fn = g_poll.load(std::memory_order_acquire))
    fn(g_poll_ctx.load(std::memory_order_relaxed));
}

}  // namespace fjit
