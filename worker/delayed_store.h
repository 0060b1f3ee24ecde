// DelayedStore: an EmbeddingStore decorator that adds a fixed latency to every Lookup and Push
// before forwarding it, and can fail a chosen call. It stands in for a remote parameter server in
// pipeline tests and benchmarks: the delay is a sleep, like a network round trip, so it costs no
// CPU and concurrent calls wait concurrently.
//
// Without `enforce_staleness` the whole delay is spent before the call reaches the wrapped store.
// With it, the store models a parameter server that enforces the staleness bound itself (like
// server/ps_step_gate.h, for one worker whose steps start at 0): each delay is a round trip with
// the server-side work at its midpoint.
//   Push(s):   arrives after push_delay / 2, is applied, returns push_delay / 2 later.
//   Lookup(t): arrives after lookup_delay / 2, waits until every push of steps <= t - 1 - k has
//              been applied (k = `staleness`; t < 0 never waits), reads, returns lookup_delay / 2
//              later. A lookup still waiting after `staleness_timeout` fails with
//              DEADLINE_EXCEEDED naming the step and the pushes it waited for.
// The staleness every lookup actually saw (t - 1 - u, u the highest step whose push and every
// earlier one had been applied when it read) is recorded: max_observed_staleness().
//
// Thread-safe when the wrapped store is. The wrapped store is not owned and must outlive this one.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/embedding_store.h"

namespace dlrm::worker {

struct DelayedStoreOptions {
  absl::Duration lookup_delay = absl::ZeroDuration();
  absl::Duration push_delay = absl::ZeroDuration();
  // Fault injection: the first Lookup (Push) whose step equals this returns `error` instead of
  // reaching the wrapped store; later calls for that step fail too. -1: never. A failed push is
  // not applied, so with enforce_staleness the lookups that need it wait until their timeout.
  int64_t fail_lookup_at_step = -1;
  int64_t fail_push_at_step = -1;
  absl::Status error = absl::UnavailableError("injected parameter-server failure");
  // Server-side staleness bound (see above). REQUIRES: staleness >= 0.
  bool enforce_staleness = false;
  int staleness = 0;
  absl::Duration staleness_timeout = absl::Seconds(30);
};

class DelayedStore : public embedding::EmbeddingStore {
 public:
  DelayedStore(embedding::EmbeddingStore* inner, const DelayedStoreOptions& options);

  const std::vector<embedding::TableConfig>& tables() const override { return inner_->tables(); }
  absl::Status Lookup(int64_t step, absl::Span<embedding::TableRows> requests) override;
  absl::Status Push(int64_t step, absl::Span<const embedding::TableRows> grads,
                    float learning_rate = embedding::kTableLearningRate) override;

  // With enforce_staleness: the largest staleness a lookup with step >= 0 read at (-1: none yet),
  // and how many lookups had to wait for a push.
  int64_t max_observed_staleness() const;
  int64_t lookups_held() const;

 private:
  embedding::EmbeddingStore* inner_;
  DelayedStoreOptions options_;

  mutable absl::Mutex mu_;
  // Every push of steps <= applied_through_ has been applied; `applied_ahead_` holds applied
  // steps beyond it (pushes that overtook an earlier one).
  int64_t applied_through_ ABSL_GUARDED_BY(mu_) = -1;
  std::set<int64_t> applied_ahead_ ABSL_GUARDED_BY(mu_);
  int64_t max_observed_staleness_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t lookups_held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlrm::worker
