#include "dense/cuda/nccl_comm.h"

#include <cuda_runtime.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/cuda_backend.h"
#include "dense/cuda/cuda_util.h"

#if DLRM_WITH_NCCL
#include <nccl.h>
#endif

namespace dlrm::dense::cuda {

#if DLRM_WITH_NCCL

namespace {

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", ncclGetErrorString(result), " (", ncclGetLastError(nullptr), ")"));
}

// A non-blocking communicator answers ncclInProgress until its last call finished.
absl::Status WaitForComm(ncclComm_t comm, absl::Time deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    DLRM_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &state), what));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": not every rank joined in time"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
};

bool NcclCommunicator::Available() { return true; }

absl::StatusOr<std::string> NcclCommunicator::GetUniqueIdBytes() {
  ncclUniqueId id;
  DLRM_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclCommunicatorOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL: rank ", options.rank, " out of range for world size ", options.world_size));
  }
  ncclUniqueId id;
  if (options.unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: unique id has ", options.unique_id.size(),
                                                   " bytes, expected ", sizeof(id.internal)));
  }
  if (options.backend == nullptr || CudaStreamOf(*options.backend) == nullptr) {
    return absl::InvalidArgumentError("NCCL: the backend must be a CUDA backend");
  }
  std::memcpy(id.internal, options.unique_id.data(), sizeof(id.internal));
  auto impl = std::make_unique<Impl>();
  impl->device = CudaDeviceOf(*options.backend);
  impl->stream = static_cast<cudaStream_t>(CudaStreamOf(*options.backend));
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl->device));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer becomes a timeout, not a hang
  const absl::Time deadline = absl::Now() + options.init_timeout;
  ncclResult_t result =
      ncclCommInitRankConfig(&impl->comm, options.world_size, id, options.rank, &config);
  absl::Status status = (result == ncclSuccess || result == ncclInProgress)
                            ? WaitForComm(impl->comm, deadline, "ncclCommInitRankConfig")
                            : NcclStatus(result, "ncclCommInitRankConfig");
  if (!status.ok()) {
    if (impl->comm != nullptr) ncclCommAbort(impl->comm);
    return Annotate(status, absl::StrCat("rank ", options.rank, "/", options.world_size));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(options.rank, options.world_size, std::move(impl)));
}

NcclCommunicator::NcclCommunicator(int rank, int world_size, std::unique_ptr<Impl> impl)
    : rank_(rank), world_size_(world_size), impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ == nullptr || impl_->comm == nullptr) return;
  cudaSetDevice(impl_->device);
  // Finalize flushes queued collectives; if a peer is gone it would wait forever, so give up
  // after a while and abort instead.
  ncclResult_t result = ncclCommFinalize(impl_->comm);
  if (result == ncclSuccess || result == ncclInProgress) {
    if (!WaitForComm(impl_->comm, absl::Now() + absl::Seconds(30), "ncclCommFinalize").ok()) {
      ncclCommAbort(impl_->comm);
      return;
    }
  }
  ncclCommDestroy(impl_->comm);
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t count) {
  if (count == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->device));
  ncclResult_t state = ncclSuccess;
  DLRM_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(impl_->comm, &state), "NCCL"));
  if (state != ncclSuccess && state != ncclInProgress) return NcclStatus(state, "NCCL (earlier)");
  ncclResult_t result =
      ncclAllReduce(data, data, count, ncclFloat32, ncclSum, impl_->comm, impl_->stream);
  if (result == ncclInProgress) {
    return WaitForComm(impl_->comm, absl::Now() + absl::Minutes(5), "ncclAllReduce");
  }
  return NcclStatus(result, "ncclAllReduce");
}

#else  // !DLRM_WITH_NCCL

struct NcclCommunicator::Impl {};

bool NcclCommunicator::Available() { return false; }

absl::StatusOr<std::string> NcclCommunicator::GetUniqueIdBytes() {
  return absl::UnimplementedError("built without NCCL");
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const NcclCommunicatorOptions&) {
  return absl::UnimplementedError("built without NCCL");
}

NcclCommunicator::NcclCommunicator(int rank, int world_size, std::unique_ptr<Impl> impl)
    : rank_(rank), world_size_(world_size), impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;

absl::Status NcclCommunicator::AllReduceSum(float*, size_t) {
  return absl::UnimplementedError("built without NCCL");
}

#endif  // DLRM_WITH_NCCL

}  // namespace dlrm::dense::cuda
