// CudaBackend: the Backend on one GPU. Kernels live in dense_kernels.cu and
// interaction_kernels.cu; this file holds the stream, cuBLAS and memory management.
#include "dense/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/cublas_loader.h"
#include "dense/cuda/cuda_util.h"
#include "dense/cuda/dense_kernels.h"

namespace dlrm::dense::cuda {
namespace {

// cuBLAS gets an explicit workspace so that it never allocates while a CUDA graph is captured.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

cublasComputeType_t ComputeTypeFor(MathMode mode) {
  switch (mode) {
    case MathMode::kFp32:
      return CUBLAS_COMPUTE_32F;
    case MathMode::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MathMode::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
  }
  return CUBLAS_COMPUTE_32F;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, MathMode math_mode) : device_(device), math_mode_(math_mode) {}

  ~CudaBackend() override {
    // Best effort: errors here cannot be reported and must not abort a shutdown.
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cublas_ != nullptr) api_->destroy(cublas_);
    cudaFree(cublas_workspace_);
    cudaFree(scratch_);
    cudaFree(loss_device_);
    cudaFreeHost(loss_host_);
    if (loss_ready_ != nullptr) cudaEventDestroy(loss_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    DLRM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DLRM_ASSIGN_OR_RETURN(api_, Cublas());
    if (cublasStatus_t st = api_->create(&cublas_); st != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      return absl::InternalError(absl::StrCat("cublasCreate: ", CublasStatusText(st)));
    }
    DLRM_CUDA_RETURN_IF_ERROR(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
    if (api_->set_stream(cublas_, stream_) != CUBLAS_STATUS_SUCCESS ||
        api_->set_workspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes) !=
            CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cublasSetStream/cublasSetWorkspace failed");
    }
    DLRM_CUDA_RETURN_IF_ERROR(cudaMalloc(&loss_device_, sizeof(double)));
    DLRM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&loss_host_, sizeof(double)));
    DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&loss_ready_, cudaEventDisableTiming));
    return absl::OkStatus();
  }

  Device device() const override { return Device::kCuda; }
  std::string name() const override {
    return absl::StrCat("cuda:", device_, " (", MathModeName(math_mode_), ")");
  }
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return device_; }

  float* Allocate(size_t count) override {
    if (count == 0) return nullptr;
    Activate();
    void* ptr = nullptr;
    DLRM_CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(float)));
    return static_cast<float*>(ptr);
  }

  void Deallocate(float* ptr) override {
    if (ptr == nullptr) return;
    Activate();
    DLRM_CUDA_CHECK(cudaFree(ptr));
  }

  void CopyFromHost(const float* host_src, float* dst, size_t count) override {
    if (count == 0) return;
    Activate();
    DLRM_CUDA_CHECK(
        cudaMemcpyAsync(dst, host_src, count * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }

  void CopyToHost(const float* src, float* host_dst, size_t count) override {
    if (count == 0) return;
    Activate();
    DLRM_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, src, count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Copy(const float* src, float* dst, size_t count) override {
    if (count == 0) return;
    Activate();
    DLRM_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }

  void Fill(float* dst, size_t count, float value) override {
    if (count == 0) return;
    Activate();
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if (bits == 0) {
      DLRM_CUDA_CHECK(cudaMemsetAsync(dst, 0, count * sizeof(float), stream_));
    } else {
      LaunchFill(dst, count, value, stream_);
    }
  }

  void Synchronize() override {
    Activate();
    DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and
  // pass the row-major leading dimensions unchanged.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    DLRM_CHECK(m >= 0 && n >= 0 && k >= 0)
        << "Gemm: negative shape m=" << m << " n=" << n << " k=" << k;
    if (m == 0 || n == 0) return;
    Activate();
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    DLRM_CUBLAS_CHECK(api_->gemm_ex(
        cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
        &alpha, b, CUDA_R_32F, ldb > 0 ? ldb : 1, a, CUDA_R_32F, lda > 0 ? lda : 1, &beta, c,
        CUDA_R_32F, n, ComputeTypeFor(math_mode_), CUBLAS_GEMM_DEFAULT));
  }

  void BiasActivation(float* y, const float* bias, int rows, int cols, bool relu) override {
    Activate();
    LaunchBiasActivation(y, bias, rows, cols, relu, stream_);
  }

  void ReluBackward(const float* y, float* dy, size_t count) override {
    Activate();
    LaunchReluBackward(y, dy, count, stream_);
  }

  void ColumnSum(const float* dy, int rows, int cols, float* db) override {
    Activate();
    EnsureScratch(ColumnSumScratchFloats(rows, cols));
    LaunchColumnSum(dy, rows, cols, db, scratch_, stream_);
  }

  void Copy2D(const float* src, int src_stride, float* dst, int dst_stride, int rows,
              int cols) override {
    if (rows <= 0 || cols <= 0) return;
    Activate();
    DLRM_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                                      static_cast<size_t>(src_stride) * sizeof(float),
                                      static_cast<size_t>(cols) * sizeof(float), rows,
                                      cudaMemcpyDeviceToDevice, stream_));
  }

  void Axpy(float alpha, const float* x, float* y, size_t count) override {
    Activate();
    LaunchAxpy(alpha, x, y, count, stream_);
  }

  void CrossCombine(const float* x0, const float* h, const float* xl, float* out,
                    size_t count) override {
    Activate();
    LaunchCrossCombine(x0, h, xl, out, count, stream_);
  }

  void CrossCombineBackward(const float* x0, const float* h, const float* g, float* dh, float* dx0,
                            size_t count) override {
    Activate();
    LaunchCrossCombineBackward(x0, h, g, dh, dx0, count, stream_);
  }

  void InteractionForward(const float* bottom, const float* emb, int batch, int num_tables, int dim,
                          float* out) override {
    Activate();
    LaunchInteractionForward(bottom, emb, batch, num_tables, dim, out, stream_);
  }

  void InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                           int num_tables, int dim, float* dbottom, float* demb) override {
    Activate();
    LaunchInteractionBackward(bottom, emb, dout, batch, num_tables, dim, dbottom, demb, stream_);
  }

  double SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                   float* probs, float* dlogits) override {
    StartSigmoidBinaryCrossEntropy(logits, labels, batch, probs, dlogits);
    return TakeLoss();
  }

  // The loss lands in pinned memory behind an event: TakeLoss waits for it, not for the work
  // queued after it (the backward, the optimizers, the next step's lookup).
  void StartSigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                      float* probs, float* dlogits) override {
    Activate();
    LaunchSigmoidBce(logits, labels, batch, probs, dlogits, loss_device_, stream_);
    DLRM_CUDA_CHECK(
        cudaMemcpyAsync(loss_host_, loss_device_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    DLRM_CUDA_CHECK(cudaEventRecord(loss_ready_, stream_));
  }

  double TakeLoss() override {
    DLRM_CUDA_CHECK(cudaEventSynchronize(loss_ready_));
    return *loss_host_;
  }

  void OptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                     const float* grads, float* state, size_t count) override {
    Activate();
    LaunchOptimizerStep(options, step, params, grads, state, count, stream_);
  }

 private:
  // The calling thread may have another device current (one backend per GPU in one process).
  void Activate() { DLRM_CUDA_CHECK(cudaSetDevice(device_)); }

  void EnsureScratch(size_t floats) {
    if (floats <= scratch_floats_) return;
    // The old scratch may still be read by queued kernels.
    DLRM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    DLRM_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    DLRM_CUDA_CHECK(cudaMalloc(&scratch_, floats * sizeof(float)));
    scratch_floats_ = floats;
  }

  const int device_;
  const MathMode math_mode_;
  cudaStream_t stream_ = nullptr;
  const CublasApi* api_ = nullptr;  // set by Init() before cublas_
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  double* loss_device_ = nullptr;
  double* loss_host_ = nullptr;       // pinned
  cudaEvent_t loss_ready_ = nullptr;  // recorded after the copy to loss_host_
};

}  // namespace

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error: "no driver" is an answer here, not a failure
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(MathMode math_mode, int device_ordinal) {
  const int count = DeviceCount();
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (device_ordinal < 0 || device_ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device_ordinal, " out of range: ", count, " visible"));
  }
  auto backend = std::make_unique<CudaBackend>(device_ordinal, math_mode);
  DLRM_RETURN_IF_ERROR(Annotate(backend->Init(), absl::StrCat("cuda:", device_ordinal)));
  return std::unique_ptr<Backend>(std::move(backend));
}

void* CudaStreamOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda == nullptr ? nullptr : static_cast<void*>(cuda->stream());
}

int CudaDeviceOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda == nullptr ? -1 : cuda->ordinal();
}

absl::Status ScaleOnDevice(Backend& backend, float* data, size_t count, float alpha) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return absl::InvalidArgumentError("ScaleOnDevice: not a CUDA backend");
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda->ordinal()));
  LaunchScale(data, count, alpha, cuda->stream());
  return absl::OkStatus();
}

absl::StatusOr<DeviceMemoryInfo> DeviceMemoryOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return absl::InvalidArgumentError("DeviceMemoryOf: not a CUDA backend");
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda->ordinal()));
  DeviceMemoryInfo info;
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

}  // namespace dlrm::dense::cuda
