// MessagePool<T>: a small free list of protobuf messages that are parsed or built again and again
// (a Lookup's request on both sides), so their byte fields keep their capacity from call to call.
// Returned messages are cleared; a message larger than max_bytes, or one beyond max_pooled, is
// freed instead, so the pool holds at most max_pooled x max_bytes. Thread-safe. Hold it by
// shared_ptr when messages may come back after their owner is gone.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dlrm::proto {

template <typename T>
class MessagePool {
 public:
  explicit MessagePool(size_t max_pooled = 8, size_t max_bytes = size_t{8} << 20)
      : max_pooled_(max_pooled), max_bytes_(max_bytes) {}

  std::unique_ptr<T> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        std::unique_ptr<T> m = std::move(free_.back());
        free_.pop_back();
        return m;
      }
    }
    return std::make_unique<T>();
  }

  void Return(std::unique_ptr<T> m) {
    if (m == nullptr || m->ByteSizeLong() > max_bytes_) return;
    m->Clear();
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_pooled_) free_.push_back(std::move(m));
  }

 private:
  const size_t max_pooled_;
  const size_t max_bytes_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<T>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlrm::proto
