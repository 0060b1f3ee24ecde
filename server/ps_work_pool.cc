#include "server/ps_work_pool.h"

#include <utility>

#include "common/logging.h"

namespace dlrm::server {

PsWorkPool::PsWorkPool(int num_threads) : num_threads_(num_threads) {
  DLRM_CHECK(num_threads >= 1) << "PsWorkPool needs at least one thread, got " << num_threads;
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

PsWorkPool::~PsWorkPool() { Stop(); }

void PsWorkPool::Submit(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ || !queue_.empty()) {
      // While stopping, workers still drain the queue until it is empty.
      queue_.push_back(std::move(task));
      return;
    }
  }
  task();  // the pool is gone: run it here rather than drop it
}

void PsWorkPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // Tasks that raced with the last worker's exit.
  std::deque<std::function<void()>> rest;
  {
    absl::MutexLock lock(&mu_);
    rest.swap(queue_);
  }
  for (auto& task : rest) task();
}

void PsWorkPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PsWorkPool* p) { return p->stopping_ || !p->queue_.empty(); }, this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace dlrm::server
