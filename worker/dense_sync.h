// DenseGradientSync: the dense gradients' allreduce of a CPU worker, in buckets, on a thread of its
// own, while the backward computes the rest (as PyTorch's DistributedDataParallel does). The
// backward reports each layer's gradients as they become final (dense::GradientsReady: from the
// end of the gradient buffer to its start); once a bucket's worth has gathered, this thread sums
// it over the workers and divides by their number, while the compute thread goes on with the
// layers below. Finish() sends the rest and waits; the optimizer then runs on the mean as before.
//
// Every worker cuts the same buckets (they follow the layers and kMaxBucketBytes), so the
// collectives match across ranks. With two workers each sum is a + b in either order, so the
// model is bit for bit the one a single allreduce after the backward gives; with more, a ring
// adds in an order that depends on where a bucket's chunks fall, so it may differ in the last bit
// while every rank still holds the same values.
//
//   sync.Begin(grads, n);
//   model.TrainStep(..., [&](const float* g, size_t count) { sync.Ready(g, count); });
//   DLRM_RETURN_IF_ERROR(sync.Finish());
//
// Begin, Ready and Finish are called from one thread (the compute thread), in that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/collective.h"

namespace dlrm::worker {

// The mean over the workers of the n gradients at g, in place: allreduced as fp32, or as bf16
// values through `wire` (n values of scratch; unused for fp32), then divided by the number of
// workers. Each bucket of DenseGradientSync is one call; so is the trainer's single allreduce.
absl::Status AllReduceDenseMean(Collectives* reducer, bool bf16, float* g, size_t n,
                                uint16_t* wire);

class DenseGradientSync {
 public:
  // A bucket holds half of the gradients, or this many wire bytes if that is less. Every bucket
  // is one more collective, each paying the network's delays: with 2 ms one way, a 14 KB
  // allreduce around Gloo's ring took 5.5 ms and one of 950 KB 19 ms (docs/BENCHMARKS.md; the
  // direct exchange, GlooAllReducer, pays one delay instead of four). So the top half goes
  // while the rest of the backward computes, and only large models are cut finer.
  static constexpr size_t kMaxBucketBytes = 4 << 20;

  // `reducer` (not owned; used only from this object's thread between Begin and Finish) sums the
  // gradients; bf16: they travel as bf16 values (Collectives::AllReduceSumBf16).
  DenseGradientSync(Collectives* reducer, bool bf16);
  ~DenseGradientSync();

  // A step's gradients: n floats at grads, reported by Ready from the end to the start.
  void Begin(float* grads, size_t n);
  // [g, g + count) is final; it must end where the last reported part began (at grads + n for
  // the first).
  void Ready(const float* g, size_t count);
  // Sends what is left, waits for every bucket, and returns the first error (later buckets are
  // then skipped: the reducer is broken). grads holds the mean over the workers when it is OK.
  absl::Status Finish();

  // Bytes the reducer reported sent for the buckets so far (Collectives::sent_bytes).
  int64_t sent_bytes() const;
  // Buckets sent since construction.
  int64_t buckets() const;

 private:
  struct Range {
    size_t begin;
    size_t end;
  };
  void Submit(size_t begin, size_t end);
  void Loop();
  absl::Status Reduce(Range r);

  Collectives* const reducer_;
  const bool bf16_;
  const size_t max_bucket_floats_;
  size_t bucket_floats_ = 0;  // this step's
  float* grads_ = nullptr;
  size_t pending_begin_ = 0;  // [pending_begin_, pending_end_): reported, not yet submitted
  size_t pending_end_ = 0;
  std::vector<uint16_t> wire_;  // bf16 values of the buckets in flight (indexed like grads_)

  mutable absl::Mutex mu_;
  std::deque<Range> queue_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t sent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace dlrm::worker
