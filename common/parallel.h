// A small fixed pool of threads for data-parallel loops inside the libraries (per-table
// work in LocalEmbeddingStore, row initialisation, the CPU backend's element-wise kernels).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace dlrm::common {

class ParallelPool {
 public:
  // num_threads helper threads (0 is allowed: everything then runs on the caller).
  explicit ParallelPool(int num_threads);
  ~ParallelPool();
  ParallelPool(const ParallelPool&) = delete;
  ParallelPool& operator=(const ParallelPool&) = delete;

  int num_threads() const { return static_cast<int>(threads_.size()); }

  // Runs fn(i) for every i in [0, n), on the calling thread and the pool's threads, and returns
  // when all are done. Safe to call from several threads at once; fn must not call ParallelFor on
  // the same pool (the caller always works too, so this never deadlocks otherwise).
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Runs fn(i) for i in [0, n) on up to `threads` std::threads started for this call (for one-off
// bulk work such as initialising a large table).
void ParallelForOnce(int64_t n, int threads, const std::function<void(int64_t)>& fn);

}  // namespace dlrm::common
