#include "dense/cuda/pinned_buffer.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/cuda_backend.h"
#include "dense/cuda/cuda_util.h"

namespace dlrm::dense::cuda {
namespace {

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t AsEvent(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

absl::StatusOr<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(size_t bytes) {
  void* data = nullptr;
  if (bytes > 0) {
    cudaError_t err = cudaMallocHost(&data, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat("cannot pin ", bytes,
                                                       " bytes of host "
                                                       "memory: ",
                                                       cudaGetErrorString(err)));
    }
  }
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(data, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

absl::StatusOr<std::unique_ptr<AsyncH2DCopier>> AsyncH2DCopier::Create(Backend* compute,
                                                                       int slots) {
  if (compute == nullptr || CudaStreamOf(*compute) == nullptr) {
    return absl::InvalidArgumentError("AsyncH2DCopier: the backend must be a CUDA backend");
  }
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("AsyncH2DCopier: slots = ", slots, " < 1"));
  }
  std::unique_ptr<AsyncH2DCopier> copier(new AsyncH2DCopier());
  copier->device_ = CudaDeviceOf(*compute);
  copier->compute_stream_ = CudaStreamOf(*compute);
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(copier->device_));
  cudaStream_t stream = nullptr;
  DLRM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  copier->copy_stream_ = stream;
  for (int i = 0; i < slots; ++i) {
    for (auto* events : {&copier->copied_, &copier->released_}) {
      cudaEvent_t event = nullptr;
      DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      events->push_back(event);
    }
  }
  copier->released_recorded_.assign(slots, false);
  return copier;
}

AsyncH2DCopier::~AsyncH2DCopier() {
  cudaSetDevice(device_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(AsStream(copy_stream_));
  for (void* e : copied_) cudaEventDestroy(AsEvent(e));
  for (void* e : released_) cudaEventDestroy(AsEvent(e));
  if (copy_stream_ != nullptr) cudaStreamDestroy(AsStream(copy_stream_));
}

absl::Status AsyncH2DCopier::CheckSlot(int slot) const {
  if (slot < 0 || slot >= slots()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AsyncH2DCopier: slot ", slot, " out of range [0, ", slots(), ")"));
  }
  return absl::OkStatus();
}

absl::Status AsyncH2DCopier::CopyAsync(int slot, const void* pinned_src, void* device_dst,
                                       size_t bytes) {
  DLRM_RETURN_IF_ERROR(CheckSlot(slot));
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (released_recorded_[slot]) {
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(AsStream(copy_stream_), AsEvent(released_[slot]), 0));
  }
  if (bytes > 0) {
    DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_dst, pinned_src, bytes, cudaMemcpyHostToDevice,
                                              AsStream(copy_stream_)));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(copied_[slot]), AsStream(copy_stream_)));
  return absl::OkStatus();
}

absl::Status AsyncH2DCopier::ComputeWaitsForSlot(int slot) {
  DLRM_RETURN_IF_ERROR(CheckSlot(slot));
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // An event never recorded counts as complete: waiting on it is a no-op.
  DLRM_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(AsStream(compute_stream_), AsEvent(copied_[slot]), 0));
  return absl::OkStatus();
}

absl::Status AsyncH2DCopier::ReleaseSlot(int slot) {
  DLRM_RETURN_IF_ERROR(CheckSlot(slot));
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(released_[slot]), AsStream(compute_stream_)));
  released_recorded_[slot] = true;
  return absl::OkStatus();
}

absl::Status AsyncH2DCopier::WaitSlotCopied(int slot) {
  DLRM_RETURN_IF_ERROR(CheckSlot(slot));
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(AsEvent(copied_[slot])));
  return absl::OkStatus();
}

}  // namespace dlrm::dense::cuda
