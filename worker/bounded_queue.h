// BoundedQueue<T>: a blocking FIFO of bounded capacity joining two pipeline stages.
//
//   Push blocks while the queue is full; Pop blocks while it is empty and open.
//   Close(): no more items. Push fails (FAILED_PRECONDITION); Pop returns what is left, then
//            std::nullopt. Every blocked thread wakes up.
//   Cancel(status): an error somewhere. Queued items are dropped, Push returns `status`, Pop
//            returns std::nullopt at once. The first Cancel's status sticks.
//
// Both calls can report how long they blocked (the caller's stall time); the queue also keeps
// totals. An optional depth observer (e.g. a prometheus gauge) is called with the new depth after
// every change, under the queue's lock, so it must be cheap and must not touch the queue.
//
// Thread-safe: any number of producers and consumers. A small template, so header-only.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

namespace dlrm::worker {

template <typename T>
class BoundedQueue {
 public:
  using DepthObserver = std::function<void(size_t depth)>;

  // capacity >= 1.
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {
    DLRM_CHECK(capacity >= 1) << "BoundedQueue capacity must be >= 1";
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // Appends `item`, blocking while the queue is full. OK once queued; FAILED_PRECONDITION when
  // the queue is closed, the Cancel status when cancelled (the item is dropped in both cases).
  // When waited_seconds is given, the time spent blocked is added to it.
  absl::Status Push(T item, double* waited_seconds = nullptr) {
    absl::MutexLock lock(&mu_);
    const auto start = std::chrono::steady_clock::now();
    bool waited = false;
    while (open_ && status_.ok() && items_.size() >= capacity_) {
      waited = true;
      not_full_.Wait(&mu_);
    }
    if (waited) AddWait(start, &push_wait_seconds_, waited_seconds);
    if (!status_.ok()) return status_;
    if (!open_) return absl::FailedPreconditionError("push to a closed queue");
    items_.push_back(std::move(item));
    NotifyDepth();
    not_empty_.Signal();
    return absl::OkStatus();
  }

  // Removes the oldest item, blocking while the queue is empty and open. std::nullopt when the
  // queue is closed and drained, or cancelled (status() tells which).
  std::optional<T> Pop(double* waited_seconds = nullptr) {
    absl::MutexLock lock(&mu_);
    const auto start = std::chrono::steady_clock::now();
    bool waited = false;
    while (open_ && status_.ok() && items_.empty()) {
      waited = true;
      not_empty_.Wait(&mu_);
    }
    if (waited) AddWait(start, &pop_wait_seconds_, waited_seconds);
    if (!status_.ok() || items_.empty()) return std::nullopt;
    std::optional<T> item(std::move(items_.front()));
    items_.pop_front();
    NotifyDepth();
    not_full_.Signal();
    return item;
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
    not_empty_.SignalAll();
    not_full_.SignalAll();
  }

  // `status` must not be OK. Later calls do not replace the first status.
  void Cancel(absl::Status status) {
    DLRM_CHECK(!status.ok()) << "BoundedQueue::Cancel needs an error";
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(status);
    open_ = false;
    items_.clear();
    NotifyDepth();
    not_empty_.SignalAll();
    not_full_.SignalAll();
  }

  // OK unless cancelled.
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  size_t size() const {
    absl::MutexLock lock(&mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  // Total seconds producers spent blocked on a full queue, and consumers on an empty one.
  double push_wait_seconds() const {
    absl::MutexLock lock(&mu_);
    return push_wait_seconds_;
  }
  double pop_wait_seconds() const {
    absl::MutexLock lock(&mu_);
    return pop_wait_seconds_;
  }

  // Set before the queue is used.
  void SetDepthObserver(DepthObserver observer) {
    absl::MutexLock lock(&mu_);
    observer_ = std::move(observer);
  }

 private:
  void AddWait(std::chrono::steady_clock::time_point start, double* total, double* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    *total += s;
    if (out != nullptr) *out += s;
  }
  void NotifyDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (observer_) observer_(items_.size());
  }

  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar not_empty_;
  absl::CondVar not_full_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  double push_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double pop_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  DepthObserver observer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlrm::worker
