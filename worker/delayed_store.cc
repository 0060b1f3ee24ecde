#include "worker/delayed_store.h"

#include "absl/time/clock.h"

namespace dlrm::worker {

DelayedStore::DelayedStore(embedding::EmbeddingStore* inner, const DelayedStoreOptions& options)
    : inner_(inner), options_(options) {}

absl::Status DelayedStore::Lookup(int64_t step, absl::Span<embedding::TableRows> requests) {
  if (options_.lookup_delay > absl::ZeroDuration()) absl::SleepFor(options_.lookup_delay);
  if (step == options_.fail_lookup_at_step) {
    return options_.error;
  }
  return inner_->Lookup(step, requests);
}

absl::Status DelayedStore::Push(int64_t step, absl::Span<const embedding::TableRows> grads) {
  if (options_.push_delay > absl::ZeroDuration()) absl::SleepFor(options_.push_delay);
  if (step == options_.fail_push_at_step) {
    return options_.error;
  }
  return inner_->Push(step, grads);
}

}  // namespace dlrm::worker
