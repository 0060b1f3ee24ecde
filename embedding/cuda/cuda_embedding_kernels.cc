// CudaEmbeddingKernels: EmbeddingKernels on one GPU (kernels in embedding_kernels.cu).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/cuda/cuda_kernels.h"
#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/embedding_kernels.h"

namespace dlrm::embedding::cuda {
namespace {

class CudaEmbeddingKernels final : public EmbeddingKernels {
 public:
  CudaEmbeddingKernels(int device, cudaStream_t stream, bool owns_stream)
      : device_(device), stream_(stream), owns_stream_(owns_stream) {}

  ~CudaEmbeddingKernels() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFree(workspace_);
    cudaFreeHost(nnz_host_);
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (owns_stream_) {
      DLRM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    DLRM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&nnz_host_, sizeof(int32_t)));
    return absl::OkStatus();
  }

  void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                    const int32_t* offsets, int batch, PoolingMode mode, float* out,
                    int64_t out_stride) override {
    DLRM_CUDA_CHECK(cudaSetDevice(device_));
    LaunchPooledGather(rows, row_stride, dim, indices, offsets, batch, BagPooling::All(mode), out,
                       out_stride, stream_);
    Finish();
  }

  void PooledScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                         const int32_t* offsets, int batch, PoolingMode mode, int64_t num_rows,
                         float* grad_rows) override {
    DLRM_CUDA_CHECK(cudaSetDevice(device_));
    int nnz = 0;
    if (batch > 0) {
      // The sort needs the index count on the host.
      DLRM_CUDA_CHECK(cudaMemcpyAsync(nnz_host_, offsets + batch, sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
      DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      nnz = *nnz_host_;
    }
    const size_t bytes = ScatterGradWorkspaceBytes(nnz, num_rows, dim);
    if (bytes > workspace_bytes_) {
      DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still use it
      DLRM_CUDA_CHECK(cudaFree(workspace_));
      workspace_ = nullptr;
      DLRM_CUDA_CHECK(cudaMalloc(&workspace_, bytes));
      workspace_bytes_ = bytes;
    }
    LaunchPooledScatterGrad(dout, out_stride, dim, indices, offsets, batch, nnz,
                            BagPooling::All(mode), num_rows, grad_rows, workspace_,
                            workspace_bytes_, stream_);
    Finish();
  }

  void ApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows, int64_t row_stride,
                            int dim, const int64_t* slots, const float* grads, int64_t n) override {
    DLRM_CUDA_CHECK(cudaSetDevice(device_));
    LaunchApplySparseOptimizer(options, rows, row_stride, dim, slots, grads, n, stream_);
    Finish();
  }

 private:
  // Synchronous kernels (own stream) wait here; kernels on the caller's stream do not.
  void Finish() {
    if (owns_stream_) DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  const int device_;
  cudaStream_t stream_;
  const bool owns_stream_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int32_t* nnz_host_ = nullptr;  // pinned
};

absl::StatusOr<std::unique_ptr<EmbeddingKernels>> Create(int device_ordinal, cudaStream_t stream,
                                                         bool owns_stream) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (device_ordinal < 0 || device_ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device_ordinal, " out of range: ", count, " visible"));
  }
  auto kernels = std::make_unique<CudaEmbeddingKernels>(device_ordinal, stream, owns_stream);
  DLRM_RETURN_IF_ERROR(kernels->Init());
  return std::unique_ptr<EmbeddingKernels>(std::move(kernels));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingKernels>> CreateCudaKernels(int device_ordinal) {
  return Create(device_ordinal, nullptr, /*owns_stream=*/true);
}

absl::StatusOr<std::unique_ptr<EmbeddingKernels>> CreateCudaKernelsOnStream(int device_ordinal,
                                                                            void* stream) {
  if (stream == nullptr) {
    return absl::InvalidArgumentError("CreateCudaKernelsOnStream: stream is null");
  }
  return Create(device_ordinal, static_cast<cudaStream_t>(stream), /*owns_stream=*/false);
}

}  // namespace dlrm::embedding::cuda
