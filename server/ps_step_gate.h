// StepGate: the stale-synchronous-parallel bound of one job on one parameter server
// (DESIGN.md "One training step"). With staleness k, a lookup for step t must see every update
// of every worker for steps <= t - 1 - k. The gate tracks, per worker rank, the highest step
// whose push has completed on this PS (a push of step s also completes every earlier step of
// that worker; steps start at 0, so "nothing pushed" is -1).
//
// A lookup whose bound is not met yet is parked, never blocking a thread: its continuation runs
// when the pushes it needs arrive, or with DEADLINE_EXCEEDED at its deadline (naming the step
// and the lagging workers). Lookups with step < 0 (evaluation) pass at once.
//
// Thread-safe. Continuations run without the gate's lock held: inline in WhenVisible when the
// bound already holds, on the thread calling Complete when a push releases them, on the
// TimerQueue's thread at a deadline, or on the thread calling Close. They must not block
// (hand real work to a pool).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/timer_queue.h"

namespace dlrm::server {

class StepGate : public std::enable_shared_from_this<StepGate> {
 public:
  using Continuation = std::function<void(absl::Status)>;

  // `timers` is not owned and must outlive every deadline scheduled on it (the gate may die
  // first: timers hold only a weak reference). REQUIRES: num_workers >= 1, staleness >= 0.
  static std::shared_ptr<StepGate> Create(int num_workers, int staleness, TimerQueue* timers);

  // Rank `rank` finished pushing `step` (and so every earlier step). Releases the lookups whose
  // bound now holds. REQUIRES: 0 <= rank < num_workers.
  void Complete(int rank, int64_t step);

  // Whether a lookup for `step` may proceed now (a cheap check before WhenVisible).
  bool Ready(int64_t step) const;

  // Runs done(OkStatus) once a lookup for `step` by `rank` may proceed, or done(error) at
  // `deadline` (absl::InfiniteFuture(): no deadline) or on Close.
  void WhenVisible(int64_t step, int rank, absl::Time deadline, Continuation done);

  // Fails every parked lookup with `status` (job unloaded or reloaded, server shutting down),
  // and every later WhenVisible that would have to wait. Ready lookups still pass.
  void Close(const absl::Status& status);

  // Highest completed step of `rank` (-1: none).
  int64_t completed(int rank) const;
  int parked() const;
  int staleness() const { return staleness_; }
  int num_workers() const { return static_cast<int>(num_workers_); }

 private:
  struct Waiter {
    int64_t step;
    int rank;
    int64_t needed;  // every worker must have completed this step
    Continuation done;
    int64_t timer_id;  // 0: none
  };

  StepGate(int num_workers, int staleness, TimerQueue* timers);
  // REQUIRES: mu_ held.
  int64_t MinCompleted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LaggingWorkers(int64_t needed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire(int64_t waiter_id);

  const size_t num_workers_;
  const int staleness_;
  TimerQueue* const timers_;

  mutable absl::Mutex mu_;
  std::vector<int64_t> completed_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // not OK once closed
};

}  // namespace dlrm::server
