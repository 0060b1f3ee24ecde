#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace dlrm::common {
namespace {

// Shared between a ParallelFor call and the helper tasks it queued; helpers that start after
// the work is gone find next >= n and leave, so the caller never waits for them to be scheduled.
struct LoopState {
  int64_t n = 0;
  const std::function<void(int64_t)>* fn = nullptr;
  std::atomic<int64_t> next{0};
  absl::Mutex mu;
  int64_t done ABSL_GUARDED_BY(mu) = 0;

  void Work() {
    int64_t finished = 0;
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      (*fn)(i);
      ++finished;
    }
    if (finished > 0) {
      absl::MutexLock lock(&mu);
      done += finished;
    }
  }
};

}  // namespace

ParallelPool::ParallelPool(int num_threads) {
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ParallelPool::~ParallelPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ParallelPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ParallelPool* p) { return p->stopping_ || !p->queue_.empty(); }, this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ParallelPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || threads_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto state = std::make_shared<LoopState>();
  state->n = n;
  state->fn = &fn;
  const int64_t helpers = std::min<int64_t>(n - 1, static_cast<int64_t>(threads_.size()));
  {
    absl::MutexLock lock(&mu_);
    for (int64_t h = 0; h < helpers; ++h) queue_.push_back([state] { state->Work(); });
  }
  state->Work();
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](LoopState* s) { return s->done == s->n; }, state.get()));
}

void ParallelForOnce(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace dlrm::common
