#include "embedding/cuda/gather_bench_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/embedding_kernels.h"

namespace dlrm::embedding::cuda {
namespace {

// Owns every device allocation and the stream/events of one benchmark run.
struct Resources {
  std::vector<void*> buffers;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Resources() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (void* p : buffers) cudaFree(p);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  template <typename T>
  absl::StatusOr<T*> Alloc(size_t count) {
    void* p = nullptr;
    DLRM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    buffers.push_back(p);
    return static_cast<T*>(p);
  }
};

// Median time in microseconds of `iterations` runs of `work` on `r.stream`, after one warm-up.
absl::StatusOr<double> TimeMedianUs(Resources& r, int iterations,
                                    const std::function<void()>& work) {
  work();
  DLRM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(r.stream));
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.start, r.stream));
    work();
    DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.stop, r.stream));
    DLRM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(r.stop));
    float ms = 0;
    DLRM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, r.start, r.stop));
    times.push_back(ms * 1000.0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

absl::StatusOr<GatherBenchResult> RunGatherBench(const GatherBenchOptions& o) {
  if (o.rows <= 0 || o.dim <= 0 || o.row_stride < o.dim || o.batch <= 0 || o.ids_per_bag <= 0 ||
      o.iterations <= 0 || o.copy_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather bench: rows=", o.rows, " dim=", o.dim, " row_stride=", o.row_stride,
        " batch=", o.batch, " ids_per_bag=", o.ids_per_bag, " iterations=", o.iterations));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  Resources r;
  DLRM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.start));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.stop));

  const int nnz = o.batch * o.ids_per_bag;
  std::vector<int64_t> ids(nnz);
  std::mt19937_64 rng(o.seed);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.rows));
  std::vector<int32_t> offsets(o.batch + 1);
  for (int b = 0; b <= o.batch; ++b) offsets[b] = b * o.ids_per_bag;
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  const int64_t distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();

  DLRM_ASSIGN_OR_RETURN(float* table, r.Alloc<float>(static_cast<size_t>(o.rows) * o.row_stride));
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      table, 0, static_cast<size_t>(o.rows) * o.row_stride * sizeof(float), r.stream));
  DLRM_ASSIGN_OR_RETURN(int64_t * d_ids, r.Alloc<int64_t>(nnz));
  DLRM_ASSIGN_OR_RETURN(int32_t * d_offsets, r.Alloc<int32_t>(o.batch + 1));
  DLRM_ASSIGN_OR_RETURN(float* out, r.Alloc<float>(static_cast<size_t>(o.batch) * o.dim));
  DLRM_ASSIGN_OR_RETURN(float* grads, r.Alloc<float>(static_cast<size_t>(nnz) * o.dim));
  DLRM_ASSIGN_OR_RETURN(int64_t * slots, r.Alloc<int64_t>(nnz));
  const size_t workspace_bytes = ScatterGradWorkspaceBytes(nnz, o.rows, o.dim);
  DLRM_ASSIGN_OR_RETURN(char* workspace, r.Alloc<char>(workspace_bytes));
  DLRM_ASSIGN_OR_RETURN(char* copy_src, r.Alloc<char>(o.copy_bytes));
  DLRM_ASSIGN_OR_RETURN(char* copy_dst, r.Alloc<char>(o.copy_bytes));
  DLRM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_ids, ids.data(), nnz * sizeof(int64_t), cudaMemcpyHostToDevice, r.stream));
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_offsets, offsets.data(),
                                            offsets.size() * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, r.stream));
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(copy_src, 1, o.copy_bytes, r.stream));

  GatherBenchResult result;
  result.distinct_ids = distinct;
  DLRM_ASSIGN_OR_RETURN(double copy_us, TimeMedianUs(r, o.iterations, [&] {
                          DLRM_CUDA_CHECK(cudaMemcpyAsync(copy_dst, copy_src, o.copy_bytes,
                                                          cudaMemcpyDeviceToDevice, r.stream));
                        }));
  DLRM_ASSIGN_OR_RETURN(result.gather_us, TimeMedianUs(r, o.iterations, [&] {
                          LaunchPooledGather(table, o.row_stride, o.dim, d_ids, d_offsets, o.batch,
                                             BagPooling::All(PoolingMode::kSum), out, o.dim,
                                             r.stream);
                        }));
  DLRM_ASSIGN_OR_RETURN(result.scatter_us, TimeMedianUs(r, o.iterations, [&] {
                          LaunchPooledScatterGradCompact(
                              out, o.dim, o.dim, d_ids, d_offsets, o.batch, nnz,
                              BagPooling::All(PoolingMode::kSum), o.rows, grads, slots, workspace,
                              workspace_bytes, r.stream);
                        }));
  const double row_bytes = o.dim * sizeof(float);
  // GB/s = bytes / (us * 1e3).
  result.copy_gbps = 2.0 * o.copy_bytes / (copy_us * 1e3);
  result.gather_gbps =
      (nnz * row_bytes + o.batch * row_bytes + nnz * sizeof(int64_t)) / (result.gather_us * 1e3);
  result.scatter_gbps = (nnz * row_bytes + distinct * row_bytes) / (result.scatter_us * 1e3);
  result.gather_ratio = result.gather_gbps / result.copy_gbps;
  result.scatter_ratio = result.scatter_gbps / result.copy_gbps;
  return result;
}

}  // namespace dlrm::embedding::cuda
