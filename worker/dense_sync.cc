#include "worker/dense_sync.h"

#include <algorithm>

#include "common/logging.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "embedding/row_dtype.h"

namespace dlrm::worker {

DenseGradientSync::DenseGradientSync(Collectives* reducer, bool bf16)
    : reducer_(reducer),
      bf16_(bf16),
      max_bucket_floats_(kMaxBucketBytes / (bf16 ? sizeof(uint16_t) : sizeof(float))),
      thread_([this] { Loop(); }) {}

DenseGradientSync::~DenseGradientSync() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DenseGradientSync::Begin(float* grads, size_t n) {
  grads_ = grads;
  bucket_floats_ = std::min(max_bucket_floats_, (n + 1) / 2);
  pending_begin_ = pending_end_ = n;
  if (bf16_ && wire_.size() < n) wire_.resize(n);
}

void DenseGradientSync::Ready(const float* g, size_t count) {
  const size_t begin = static_cast<size_t>(g - grads_);
  DLRM_CHECK(begin + count == pending_begin_)
      << "gradients [" << begin << ", " << begin + count << ") reported out of order, before "
      << pending_begin_;
  pending_begin_ = begin;
  if (pending_end_ - pending_begin_ >= bucket_floats_) {
    Submit(pending_begin_, pending_end_);
    pending_end_ = pending_begin_;
  }
}

absl::Status DenseGradientSync::Finish() {
  if (pending_end_ > pending_begin_) Submit(pending_begin_, pending_end_);
  pending_end_ = pending_begin_;
  DLRM_CHECK(pending_begin_ == 0) << "the backward reported " << pending_begin_
                                  << " gradients too few";
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](DenseGradientSync* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->done_ == s->submitted_; },
      this));
  absl::Status status = status_;
  status_ = absl::OkStatus();
  return status;
}

int64_t DenseGradientSync::sent_bytes() const {
  absl::MutexLock lock(&mu_);
  return sent_bytes_;
}

int64_t DenseGradientSync::buckets() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

void DenseGradientSync::Submit(size_t begin, size_t end) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({begin, end});
  ++submitted_;
}

void DenseGradientSync::Loop() {
  common::NameThisThread("dlrm-dense-sync");
  while (true) {
    Range r;
    bool skip = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DenseGradientSync* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stop_ || !s->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      r = queue_.front();
      queue_.pop_front();
      skip = !status_.ok();
    }
    const int64_t sent_before = reducer_->sent_bytes();
    absl::Status s = skip ? absl::OkStatus() : Reduce(r);
    const int64_t sent = reducer_->sent_bytes() - sent_before;
    absl::MutexLock lock(&mu_);
    if (!s.ok() && status_.ok()) status_ = s;
    sent_bytes_ += sent;
    ++done_;
  }
}

absl::Status AllReduceDenseMean(Collectives* reducer, bool bf16, float* g, size_t n,
                                uint16_t* wire) {
  if (bf16) {
    // Rounded to nearest even before they travel; every rank decodes the same summed bits.
    embedding::EncodeValues(embedding::RowDtype::kBf16, g, static_cast<int64_t>(n), wire);
    DLRM_RETURN_IF_ERROR(reducer->AllReduceSumBf16(wire, n));
    embedding::DecodeValues(embedding::RowDtype::kBf16, wire, static_cast<int64_t>(n), g);
  } else {
    DLRM_RETURN_IF_ERROR(reducer->AllReduceSum(g, n));
  }
  const float scale = 1.0f / static_cast<float>(reducer->world_size());
  for (size_t i = 0; i < n; ++i) g[i] *= scale;
  return absl::OkStatus();
}

absl::Status DenseGradientSync::Reduce(Range r) {
  return AllReduceDenseMean(reducer_, bf16_, grads_ + r.begin, r.end - r.begin,
                            bf16_ ? wire_.data() + r.begin : nullptr);
}

}  // namespace dlrm::worker
