// DenseAllReducer: sums a float buffer across the workers of a job. Gloo implements it between
// CPU workers (worker/gloo_allreducer.h), NCCL between GPU workers; a single-process trainer
// passes none. Transport-free so the trainer does not know which one it has.
#pragma once

#include <cstddef>

#include "absl/status/status.h"

namespace dlrm::worker {

class DenseAllReducer {
 public:
  virtual ~DenseAllReducer() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = sum over ranks of data[i]. `data` is host memory. Every rank calls it
  // with the same count in the same order. UNAVAILABLE / DEADLINE_EXCEEDED when a peer is gone.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
};

}  // namespace dlrm::worker
