// GpuInputStager: the dense features and labels of a batch staged for a CUDA backend through
// pinned host memory and copied on a copy stream of their own (dense/cuda/pinned_buffer.h), so
// that the copy of batch i+1 overlaps the device work still queued for batch i.
//
//   DLRM_ASSIGN_OR_RETURN(GpuInputStager::Staged in, stager->Stage(batch));
//   ... enqueue the step on the backend reading in.dense and in.labels ...
//   DLRM_RETURN_IF_ERROR(stager->Release(in));   // after the last reader was enqueued
//
// Two slots alternate: Stage waits (host side) only until the copy out of the slot used two
// batches ago has finished, and the backend's stream waits (device side) for this batch's copy.
// Not thread-safe: the trainer's compute thread owns it. Without CUDA, Create is UNIMPLEMENTED.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dense/backend.h"
#include "worker/batch.h"

namespace dlrm::worker {

class GpuInputStager {
 public:
  struct Staged {
    int slot = 0;
    const float* dense = nullptr;   // device, batch.size x num_dense
    const float* labels = nullptr;  // device, batch.size
  };

  // `backend` must be a CUDA backend (not owned; must outlive the stager). Buffers hold batches of
  // up to max_batch samples with num_dense dense features.
  static absl::StatusOr<std::unique_ptr<GpuInputStager>> Create(dense::Backend* backend,
                                                                int max_batch, int num_dense);
  virtual ~GpuInputStager() = default;

  // Copies batch.dense and batch.labels to the device (INVALID_ARGUMENT when the batch is larger
  // than the buffers). The batch may be reused as soon as Stage returns.
  virtual absl::StatusOr<Staged> Stage(const Batch& batch) = 0;
  // Marks the device work enqueued so far as the last reader of the slot's device buffers.
  virtual absl::Status Release(const Staged& staged) = 0;
};

}  // namespace dlrm::worker
