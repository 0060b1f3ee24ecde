#include "server/timer_queue.h"

namespace dlrm::server {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() { Stop(); }

void TimerQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  std::call_once(joined_, [this] {
    if (thread_.get_id() != std::this_thread::get_id()) thread_.join();
  });
}

int64_t TimerQueue::Schedule(absl::Time when, std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(callback));
  due_by_id_.emplace(id, when);
  return id;
}

bool TimerQueue::Cancel(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = due_by_id_.find(id);
  if (it == due_by_id_.end()) return false;
  timers_.erase(std::make_pair(it->second, id));
  due_by_id_.erase(it);
  return true;
}

void TimerQueue::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (timers_.empty()) {
      mu_.Await(absl::Condition(
          +[](TimerQueue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stop_ || !q->timers_.empty(); },
          this));
      continue;
    }
    auto first = timers_.begin();
    const absl::Time due = first->first.first;
    const absl::Time now = absl::Now();
    if (due > now) {
      // Wake early when an earlier timer is scheduled or on stop.
      const size_t size_before = timers_.size();
      const absl::Time earliest = due;
      struct Args {
        TimerQueue* q;
        size_t size;
        absl::Time earliest;
      } args{this, size_before, earliest};
      mu_.AwaitWithDeadline(
          absl::Condition(
              +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                return a->q->stop_ || a->q->timers_.size() != a->size ||
                       (!a->q->timers_.empty() && a->q->timers_.begin()->first.first < a->earliest);
              },
              &args),
          due);
      continue;
    }
    std::function<void()> callback = std::move(first->second);
    due_by_id_.erase(first->first.second);
    timers_.erase(first);
    mu_.Unlock();
    callback();
    mu_.Lock();
  }
}

}  // namespace dlrm::server
