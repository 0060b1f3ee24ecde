// Collectives between GPU workers.
//
// DeviceAllReducer extends the Collectives contract (worker/collective.h) with a sum over
// DEVICE memory ordered on the dense backend's stream, so a trainer with a CUDA backend sums its
// dense gradients where they are, without staging them to the host. Its host-memory
// AllReduceSum (hot-row gradients, barriers) stages through the device and returns with the
// result in host memory, so it also serves as a barrier.
//
// NcclAllReducer implements it with NCCL (dense/cuda/nccl_comm.h). The ranks agree on the NCCL
// unique id through a rendezvous given as two functions (the worker passes the coordinator's
// KvSet / blocking KvGet): rank 0 creates the id and publishes it (hex-encoded) under `key`, the
// others fetch it. Create blocks until every rank joined or init_timeout. Without CUDA or NCCL,
// Create answers UNIMPLEMENTED. Not thread-safe: the compute thread calls it, like the backend.
//
// A peer that dies in the middle of a collective is noticed by NCCL's own error checks (the call
// fails UNAVAILABLE) but NCCL has no per-call deadline: the coordinator's lease expiry is what
// stops such a job.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/backend.h"
#include "worker/collective.h"

namespace dlrm::worker {

class DeviceAllReducer : public Collectives {
 public:
  // In place on device memory of the backend: data[i] = sum over ranks of data[i], enqueued on
  // the backend's stream (visible after Backend::Synchronize or any later call on the stream).
  virtual absl::Status AllReduceSumDevice(float* device_data, size_t count) = 0;
};

struct NcclAllReducerOptions {
  dense::Backend* backend = nullptr;  // a CUDA backend; not owned, must outlive the reducer
  int rank = 0;
  int world_size = 1;
  std::string key;  // rendezvous key of the unique id, unique per job run
  // Rank 0 only: publishes `value` under `key`.
  std::function<absl::Status(const std::string& key, const std::string& value)> publish;
  // Ranks > 0: waits for `key` and returns its value.
  std::function<absl::StatusOr<std::string>(const std::string& key)> fetch;
  absl::Duration init_timeout = absl::Minutes(2);
};

class NcclAllReducer : public DeviceAllReducer {
 public:
  // True when this build has CUDA and NCCL.
  static bool Available();
  static absl::StatusOr<std::unique_ptr<NcclAllReducer>> Create(
      const NcclAllReducerOptions& options);
};

}  // namespace dlrm::worker
