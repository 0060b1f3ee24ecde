// NCCL allreduce between GPU workers, bootstrapped through bytes that travel out of band (the
// coordinator's rendezvous key-value store): rank 0 calls GetUniqueIdBytes(), publishes the bytes,
// and every rank (0 included) passes the same bytes to Create().
//
// The collectives run on the stream of a CUDA dense Backend, so they are ordered with the
// backward pass that produced the gradients and the optimizer step that consumes them; nothing
// here blocks the host except Create(). One communicator per (process, device); it is used by one
// thread at a time, like its backend. No NCCL or CUDA types appear in this header. When the
// project is built without NCCL, Available() is false and every call returns UNIMPLEMENTED.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/backend.h"

namespace dlrm::dense::cuda {

struct NcclCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // GetUniqueIdBytes() of rank 0, identical on every rank (128 bytes).
  std::string unique_id;
  // A CUDA backend (CreateCudaBackend): its device and stream carry the collectives. Not owned;
  // must outlive the communicator.
  Backend* backend = nullptr;
  // Create() gives up with DEADLINE_EXCEEDED when not every rank joined within this time.
  absl::Duration init_timeout = absl::Minutes(5);
};

class NcclCommunicator {
 public:
  // True when built with NCCL.
  static bool Available();

  // A fresh NCCL unique id as bytes, called by rank 0 only.
  static absl::StatusOr<std::string> GetUniqueIdBytes();

  // Joins the communicator; blocks until all world_size ranks joined (or the timeout).
  // INVALID_ARGUMENT for a bad rank/world size, a unique id of the wrong size or a non-CUDA
  // backend; UNAVAILABLE when NCCL fails.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const NcclCommunicatorOptions& options);

  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // In-place sum of `count` device floats over all ranks, enqueued on the backend's stream
  // (results visible after backend->Synchronize()). UNAVAILABLE when a peer or NCCL failed.
  absl::Status AllReduceSum(float* data, size_t count);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  struct Impl;
  NcclCommunicator(int rank, int world_size, std::unique_ptr<Impl> impl);

  int rank_;
  int world_size_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlrm::dense::cuda
