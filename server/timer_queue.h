// Runs callbacks at given times on one background thread. Used where a server must complete an
// RPC later without blocking a reactor thread (e.g. a rendezvous get that times out).
//
// Callbacks run on the timer thread with no lock of the queue held; they must be short and must
// not block. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dlrm::server {

class TimerQueue {
 public:
  TimerQueue();
  // Stop().
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `callback` at or soon after `when`. Returns an id for Cancel.
  int64_t Schedule(absl::Time when, std::function<void()> callback);
  // Drops a callback that has not started; returns whether it was dropped.
  bool Cancel(int64_t id);
  // Stops the thread, after the callback it is running (if any) returns: none runs after this.
  // Callbacks not yet due are dropped without running. Idempotent. An owner whose callbacks use
  // other members calls it before those are destroyed (Cancel cannot stop a callback that
  // already started).
  void Stop();

 private:
  void Run();

  absl::Mutex mu_;
  // Ordered by (due time, id).
  std::map<std::pair<absl::Time, int64_t>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> due_by_id_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::once_flag joined_;
};

}  // namespace dlrm::server
