#include "server/ps_step_gate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dlrm::server {

std::shared_ptr<StepGate> StepGate::Create(int num_workers, int staleness, TimerQueue* timers) {
  return std::shared_ptr<StepGate>(new StepGate(num_workers, staleness, timers));
}

StepGate::StepGate(int num_workers, int staleness, TimerQueue* timers)
    : num_workers_(static_cast<size_t>(std::max(1, num_workers))),
      staleness_(std::max(0, staleness)),
      timers_(timers),
      completed_(num_workers_, -1) {
  DLRM_CHECK(timers != nullptr) << "StepGate needs a TimerQueue";
}

int64_t StepGate::MinCompleted() const {
  return *std::min_element(completed_.begin(), completed_.end());
}

std::string StepGate::LaggingWorkers(int64_t needed) const {
  std::string out;
  for (size_t r = 0; r < completed_.size(); ++r) {
    if (completed_[r] >= needed) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", "worker ", r, " has completed step ",
                    completed_[r]);
  }
  return out;
}

void StepGate::Complete(int rank, int64_t step) {
  std::vector<Waiter> released;
  {
    absl::MutexLock lock(&mu_);
    if (rank < 0 || static_cast<size_t>(rank) >= completed_.size()) return;
    if (step <= completed_[rank]) return;
    completed_[rank] = step;
    const int64_t min_completed = MinCompleted();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.needed <= min_completed) {
        released.push_back(std::move(it->second));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Waiter& w : released) {
    if (w.timer_id != 0) timers_->Cancel(w.timer_id);
    w.done(absl::OkStatus());
  }
}

bool StepGate::Ready(int64_t step) const {
  const int64_t needed = step - 1 - staleness_;
  if (step < 0 || needed < 0) return true;
  absl::MutexLock lock(&mu_);
  return MinCompleted() >= needed;
}

void StepGate::WhenVisible(int64_t step, int rank, absl::Time deadline, Continuation done) {
  const int64_t needed = step - 1 - staleness_;
  int64_t id = 0;
  absl::Status closed;
  {
    absl::MutexLock lock(&mu_);
    if (step >= 0 && needed >= 0 && MinCompleted() < needed) {
      if (closed_.ok()) {
        id = next_waiter_id_++;
        waiters_.emplace(id, Waiter{step, rank, needed, std::move(done), 0});
      } else {
        closed = closed_;
      }
    }
  }
  if (id == 0) {
    done(closed);
    return;
  }
  if (deadline == absl::InfiniteFuture()) return;
  std::weak_ptr<StepGate> weak = weak_from_this();
  const int64_t timer_id = timers_->Schedule(deadline, [weak, id] {
    if (auto gate = weak.lock()) gate->Expire(id);
  });
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it != waiters_.end()) {
    it->second.timer_id = timer_id;
  } else {
    timers_->Cancel(timer_id);  // released between parking and scheduling
  }
}

void StepGate::Expire(int64_t waiter_id) {
  Waiter w;
  std::string lagging;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(waiter_id);
    if (it == waiters_.end()) return;
    w = std::move(it->second);
    waiters_.erase(it);
    lagging = LaggingWorkers(w.needed);
  }
  w.done(absl::DeadlineExceededError(
      absl::StrCat("lookup for step ", w.step, " (worker ", w.rank, ", staleness ", staleness_,
                   ") timed out waiting for the updates of step ", w.needed, ": ", lagging)));
}

void StepGate::Close(const absl::Status& status) {
  std::map<int64_t, Waiter> failed;
  {
    absl::MutexLock lock(&mu_);
    closed_ = status.ok() ? absl::AbortedError("closed") : status;
    failed.swap(waiters_);
  }
  for (auto& [id, w] : failed) {
    if (w.timer_id != 0) timers_->Cancel(w.timer_id);
    w.done(status);
  }
}

int64_t StepGate::completed(int rank) const {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || static_cast<size_t>(rank) >= completed_.size()) return -1;
  return completed_[rank];
}

int StepGate::parked() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace dlrm::server
