// DelayedStore: an EmbeddingStore decorator that adds a fixed latency to every Lookup and Push
// before forwarding it, and can fail a chosen call. It stands in for a remote parameter server in
// pipeline tests and benchmarks: the delay is a sleep, like a network round trip, so it costs no
// CPU and concurrent calls wait concurrently.
//
// Thread-safe when the wrapped store is. The wrapped store is not owned and must outlive this one.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/embedding_store.h"

namespace dlrm::worker {

struct DelayedStoreOptions {
  absl::Duration lookup_delay = absl::ZeroDuration();
  absl::Duration push_delay = absl::ZeroDuration();
  // Fault injection: the first Lookup (Push) whose step equals this returns `error` instead of
  // reaching the wrapped store; later calls for that step fail too. -1: never.
  int64_t fail_lookup_at_step = -1;
  int64_t fail_push_at_step = -1;
  absl::Status error = absl::UnavailableError("injected parameter-server failure");
};

class DelayedStore : public embedding::EmbeddingStore {
 public:
  DelayedStore(embedding::EmbeddingStore* inner, const DelayedStoreOptions& options);

  const std::vector<embedding::TableConfig>& tables() const override { return inner_->tables(); }
  absl::Status Lookup(int64_t step, absl::Span<embedding::TableRows> requests) override;
  absl::Status Push(int64_t step, absl::Span<const embedding::TableRows> grads) override;

 private:
  embedding::EmbeddingStore* inner_;
  DelayedStoreOptions options_;
};

}  // namespace dlrm::worker
