#include "worker/delayed_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dlrm::worker {
namespace {

void Sleep(absl::Duration d) {
  if (d > absl::ZeroDuration()) absl::SleepFor(d);
}

}  // namespace

DelayedStore::DelayedStore(embedding::EmbeddingStore* inner, const DelayedStoreOptions& options)
    : inner_(inner), options_(options) {}

absl::Status DelayedStore::Lookup(int64_t step, absl::Span<embedding::TableRows> requests) {
  if (!options_.enforce_staleness) {
    Sleep(options_.lookup_delay);
    if (options_.fail_lookup_at_step >= 0 && step == options_.fail_lookup_at_step)
      return options_.error;
    return inner_->Lookup(step, requests);
  }
  Sleep(options_.lookup_delay / 2);  // the request travels to the server
  if (options_.fail_lookup_at_step >= 0 && step == options_.fail_lookup_at_step) {
    Sleep(options_.lookup_delay / 2);
    return options_.error;
  }
  if (step >= 0) {
    const int64_t needed = step - 1 - options_.staleness;
    absl::MutexLock lock(&mu_);
    if (applied_through_ < needed) {
      ++lookups_held_;
      const absl::Time deadline = absl::Now() + options_.staleness_timeout;
      auto ready = [this, needed]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return applied_through_ >= needed; };
      if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "lookup of step ", step, " waited ", absl::FormatDuration(options_.staleness_timeout),
            " for the pushes of steps <= ", needed, " (staleness ", options_.staleness,
            "); applied through step ", applied_through_));
      }
    }
    max_observed_staleness_ = std::max(max_observed_staleness_, step - 1 - applied_through_);
  }
  absl::Status status = inner_->Lookup(step, requests);
  Sleep(options_.lookup_delay / 2);  // the reply travels back
  return status;
}

absl::Status DelayedStore::Push(int64_t step, absl::Span<const embedding::TableRows> grads,
                                float learning_rate) {
  if (!options_.enforce_staleness) {
    Sleep(options_.push_delay);
    if (options_.fail_push_at_step >= 0 && step == options_.fail_push_at_step)
      return options_.error;
    return inner_->Push(step, grads, learning_rate);
  }
  Sleep(options_.push_delay / 2);
  if (options_.fail_push_at_step >= 0 && step == options_.fail_push_at_step) {
    Sleep(options_.push_delay / 2);
    return options_.error;
  }
  absl::Status status = inner_->Push(step, grads, learning_rate);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    if (step > applied_through_) applied_ahead_.insert(step);
    while (!applied_ahead_.empty() && *applied_ahead_.begin() <= applied_through_ + 1) {
      applied_through_ = std::max(applied_through_, *applied_ahead_.begin());
      applied_ahead_.erase(applied_ahead_.begin());
    }
  }
  Sleep(options_.push_delay / 2);
  return status;
}

int64_t DelayedStore::max_observed_staleness() const {
  absl::MutexLock lock(&mu_);
  return max_observed_staleness_;
}

int64_t DelayedStore::lookups_held() const {
  absl::MutexLock lock(&mu_);
  return lookups_held_;
}

}  // namespace dlrm::worker
