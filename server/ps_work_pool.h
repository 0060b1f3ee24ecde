// PsWorkPool: the parameter server's fixed pool of worker threads. gRPC reactors hand every
// Lookup / PushGradients to it and return at once, so a reactor thread never waits on a table
// lock or on RocksDB; the pool thread does the work and calls Finish.
//
// Thread-safe. The destructor runs every task already submitted, then joins the threads; tasks
// submitted after Stop() began are run on the caller (so a continuation is never lost, which
// matters for RPCs that must be finished).
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dlrm::server {

class PsWorkPool {
 public:
  // REQUIRES: num_threads >= 1.
  explicit PsWorkPool(int num_threads);
  ~PsWorkPool();
  PsWorkPool(const PsWorkPool&) = delete;
  PsWorkPool& operator=(const PsWorkPool&) = delete;

  // Queues `task` to run on a pool thread (FIFO).
  void Submit(std::function<void()> task);
  // Runs the queued tasks, then joins the threads. Idempotent.
  void Stop();

  // The threads it started (also after Stop, which clears threads_ under callers' feet).
  int num_threads() const { return num_threads_; }

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const int num_threads_;
  std::vector<std::thread> threads_;
};

}  // namespace dlrm::server
