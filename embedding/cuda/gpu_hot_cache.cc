#include "embedding/cuda/gpu_hot_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/device_buffer.h"
#include "embedding/cuda/embedding_kernels.h"
#include "embedding/cuda/table_poolings.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding::cuda {
namespace {

// The pooling modes of a step: its table_modes, else its one mode.
absl::Span<const PoolingMode> StepModes(const HotColdStep& step) {
  return step.table_modes.empty() ? absl::MakeConstSpan(&step.mode, 1) : step.table_modes;
}

absl::Status OutOfMemory(int64_t rows, size_t bytes, const char* what, cudaError_t err) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  return absl::ResourceExhaustedError(absl::StrCat(rows, " hot rows: ", bytes, " bytes of ", what,
                                                   " do not fit (", free_bytes, " of ", total_bytes,
                                                   " bytes free): ", cudaGetErrorString(err)));
}

}  // namespace

struct GpuHotCache::State {
  cudaStream_t stream = nullptr;
  float* rows = nullptr;  // rows x row_stride
  // sum_over_workers: the buffer of gradients and counts, and ReduceAndApply's scratch.
  float* reduce = nullptr;     // rows x dim gradients, then rows counts
  int32_t* touched = nullptr;  // rows + 1 flags, then rows + 1 positions
  DeviceBuffer scan_workspace;
  DeviceBuffer packed;           // up to rows x dim summed gradients of touched rows
  DeviceBuffer packed_slots;     // up to rows int64 touched rows
  DeviceBuffer inputs;           // the step's indices | offsets | hot slots | per-table flags
  DeviceBuffer step_rows;        // (num_cold + num_hot) x dim
  DeviceBuffer step_grads;       // (num_cold + num_hot) x dim
  DeviceBuffer workspace;        // scatter sort workspace
  PinnedBuffer staging;          // host inputs on their way to the device
  cudaEvent_t staged = nullptr;  // recorded after the copies out of `staging`
  PinnedBuffer cold_grads;       // cold gradients on their way to the host
  std::vector<uint8_t> seen;     // rows flags, all 0 between calls: repeated-slot check
  std::vector<uint8_t> means;    // the step's per-table mean flags (table_poolings.h)

  // The last Lookup's inputs, as staged on the device.
  bool has_step = false;
  bool hot_grads_ready = false;  // Backward ran and its hot gradients are not applied yet
  int batch = 0;
  int nnz = 0;
  int64_t num_cold = 0;
  int64_t num_hot = 0;
  BagPooling pooling;  // its per-table flags, if any, are in `inputs`
  const int64_t* indices = nullptr;
  const int32_t* offsets = nullptr;
  const int64_t* hot_slots = nullptr;

  ~State() {
    if (staged != nullptr) {
      cudaEventSynchronize(staged);
      cudaEventDestroy(staged);
    }
    cudaFree(rows);
    cudaFree(reduce);
    cudaFree(touched);
  }
};

GpuHotCache::GpuHotCache(const GpuHotCacheOptions& options)
    : options_(options),
      row_stride_(options.dim + SparseOptimizerStateFloats(options.optimizer.type, options.dim)),
      state_(std::make_unique<State>()) {}

GpuHotCache::~GpuHotCache() {
  cudaSetDevice(options_.device);
  if (state_->stream != nullptr) cudaStreamSynchronize(state_->stream);
}

int64_t GpuHotCache::device_bytes() const {
  int64_t bytes = options_.rows * row_stride_ * static_cast<int64_t>(sizeof(float));
  if (state_->reduce != nullptr) {
    bytes += static_cast<int64_t>(ReduceBytes()) +
             (options_.rows + 1) * 2 * static_cast<int64_t>(sizeof(int32_t)) +
             static_cast<int64_t>(state_->scan_workspace.bytes + state_->packed.bytes +
                                  state_->packed_slots.bytes);
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<GpuHotCache>> GpuHotCache::Create(
    const GpuHotCacheOptions& options) {
  if (options.rows < 0 || options.rows >= INT32_MAX || options.dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": rows = ", options.rows,
                                                   ", dim = ", options.dim,
                                                   " (rows must be in [0, 2^31 - 1), dim > 0)"));
  }
  if (options.stream == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": no CUDA stream given"));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": CUDA device ", options.device,
                                                   " out of range: ", count, " visible"));
  }
  std::unique_ptr<GpuHotCache> cache(new GpuHotCache(options));
  DLRM_RETURN_IF_ERROR(Annotate(cache->Init(), options.name));
  return cache;
}

absl::Status GpuHotCache::Init() {
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  State& s = *state_;
  s.stream = static_cast<cudaStream_t>(options_.stream);
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.staged, cudaEventDisableTiming));
  if (options_.rows == 0) return absl::OkStatus();
  const size_t row_bytes = static_cast<size_t>(options_.rows) * row_stride_ * sizeof(float);
  if (cudaError_t err = cudaMalloc(&s.rows, row_bytes); err != cudaSuccess) {
    cudaGetLastError();
    s.rows = nullptr;
    return OutOfMemory(options_.rows, row_bytes, "rows", err);
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.rows, 0, row_bytes, s.stream));
  s.seen.assign(options_.rows, 0);
  if (options_.sum_over_workers) DLRM_RETURN_IF_ERROR(AllocateReduceBuffer());
  return CudaStatus(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
}

absl::Status GpuHotCache::AllocateReduceBuffer() {
  State& s = *state_;
  const int64_t rows = options_.rows;
  const size_t reduce_bytes = ReduceBytes();
  const size_t touched_bytes = static_cast<size_t>(rows + 1) * 2 * sizeof(int32_t);
  cudaError_t err = cudaMalloc(&s.reduce, reduce_bytes);
  if (err == cudaSuccess) err = cudaMalloc(&s.touched, touched_bytes);
  absl::Status status;
  if (err != cudaSuccess) {
    cudaGetLastError();
    status = OutOfMemory(rows, reduce_bytes + touched_bytes, "allreduce buffer", err);
  }
  // Worst case: every row touched by some worker.
  if (status.ok()) {
    status = s.packed.Reserve(static_cast<size_t>(rows) * options_.dim * sizeof(float), s.stream,
                              /*headroom=*/false);
  }
  if (status.ok()) {
    status = s.packed_slots.Reserve(static_cast<size_t>(rows) * sizeof(int64_t), s.stream,
                                    /*headroom=*/false);
  }
  if (status.ok()) {
    status = s.scan_workspace.Reserve(TouchedPositionsWorkspaceBytes(rows), s.stream,
                                      /*headroom=*/false);
  }
  if (status.ok()) {
    status = CudaStatus(cudaMemsetAsync(s.reduce, 0, reduce_bytes, s.stream), "cudaMemsetAsync");
  }
  if (!status.ok()) {  // all or nothing
    cudaStreamSynchronize(s.stream);
    cudaFree(s.reduce);
    cudaFree(s.touched);
    s.reduce = nullptr;
    s.touched = nullptr;
    s.packed.Release();
    s.packed_slots.Release();
    s.scan_workspace.Release();
  }
  return status;
}

absl::Status GpuHotCache::Synchronize() {
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  return CudaStatus(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

absl::Status GpuHotCache::WriteRows(int64_t first, int64_t count, const float* host_rows) {
  if (first < 0 || count < 0 || first + count > options_.rows) {
    return absl::InvalidArgumentError(absl::StrCat(options_.name, ": rows [", first, ", ",
                                                   first + count, ") outside [0, ", options_.rows,
                                                   ")"));
  }
  if (count == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  // Pageable source: the copy has taken the data when the call returns.
  DLRM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(state_->rows + first * row_stride_, host_rows,
                      static_cast<size_t>(count) * row_stride_ * sizeof(float),
                      cudaMemcpyHostToDevice, state_->stream));
  return absl::OkStatus();
}

absl::Status GpuHotCache::ReadRows(int64_t first, int64_t count, float* host_rows) {
  if (first < 0 || count < 0 || first + count > options_.rows) {
    return absl::InvalidArgumentError(absl::StrCat(options_.name, ": rows [", first, ", ",
                                                   first + count, ") outside [0, ", options_.rows,
                                                   ")"));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (count > 0) {
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_rows, state_->rows + first * row_stride_,
                        static_cast<size_t>(count) * row_stride_ * sizeof(float),
                        cudaMemcpyDeviceToHost, state_->stream));
  }
  return CudaStatus(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

absl::Status GpuHotCache::Check(const HotColdStep& step) {
  const std::string& name = options_.name;
  if (step.batch < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": batch ", step.batch));
  if (step.num_cold < 0 || step.num_hot < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", step.num_cold, " cold rows, ", step.num_hot, " hot rows"));
  }
  if (step.num_hot > options_.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", step.num_hot, " hot rows in a step, more than the ", options_.rows, " held"));
  }
  if ((step.num_hot > 0 && step.hot_slots == nullptr) || step.offsets == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": missing step input"));
  }
  size_t cold_floats = 0;
  for (absl::Span<const float> part : step.cold_parts) cold_floats += part.size();
  if (cold_floats != static_cast<size_t>(step.num_cold) * options_.dim) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", cold_floats,
                                                   " floats of cold rows for ", step.num_cold,
                                                   " rows of dim ", options_.dim));
  }
  if (step.offsets[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": offsets[0] = ", step.offsets[0], ", expected 0"));
  }
  for (int b = 0; b < step.batch; ++b) {
    if (step.offsets[b + 1] < step.offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": offsets[", b + 1,
                                                     "] = ", step.offsets[b + 1], " < offsets[", b,
                                                     "] = ", step.offsets[b]));
    }
  }
  DLRM_RETURN_IF_ERROR(CheckTableModes(StepModes(step), step.batch, "", name));
  const int64_t step_rows = step.num_cold + step.num_hot;
  const int32_t nnz = step.offsets[step.batch];
  if (nnz > 0 && step.indices == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": missing indices"));
  }
  for (int32_t j = 0; j < nnz; ++j) {
    if (step.indices[j] < 0 || step.indices[j] >= step_rows) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": index ", step.indices[j],
                                                     " at position ", j, " outside the step's ",
                                                     step_rows, " rows"));
    }
  }
  std::vector<uint8_t>& seen = state_->seen;
  absl::Status status;
  int64_t h = 0;
  for (; h < step.num_hot; ++h) {
    const int64_t slot = step.hot_slots[h];
    if (slot < 0 || slot >= options_.rows) {
      status = absl::InvalidArgumentError(
          absl::StrCat(name, ": hot slot ", slot, " outside [0, ", options_.rows, ")"));
      break;
    }
    if (seen[slot] != 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat(name, ": hot slot ", slot, " appears twice in one step"));
      break;
    }
    seen[slot] = 1;
  }
  for (int64_t i = 0; i < h; ++i) seen[step.hot_slots[i]] = 0;
  return status;
}

absl::Status GpuHotCache::Lookup(const HotColdStep& step, float* device_out, int64_t out_stride) {
  State& s = *state_;
  s.has_step = false;
  s.hot_grads_ready = false;
  DLRM_RETURN_IF_ERROR(Check(step));
  if (out_stride < options_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.name, ": out_stride ", out_stride, " < dim ", options_.dim));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  const int dim = options_.dim;
  const int nnz = step.offsets[step.batch];
  const size_t cold_bytes = static_cast<size_t>(step.num_cold) * dim * sizeof(float);
  const size_t index_bytes = static_cast<size_t>(nnz) * sizeof(int64_t);
  const size_t offset_bytes = (static_cast<size_t>(step.batch) + 1) * sizeof(int32_t);
  const size_t slot_bytes = static_cast<size_t>(step.num_hot) * sizeof(int64_t);
  const absl::Span<const PoolingMode> modes = StepModes(step);
  TableMeanFlags(modes, &s.means);  // empty when every table pools alike
  const size_t flag_bytes = s.means.size();
  // Device layout of the inputs: indices | offsets | hot slots | flags, each 256-byte aligned.
  const size_t offsets_at = AlignUp(index_bytes);
  const size_t slots_at = offsets_at + AlignUp(offset_bytes);
  const size_t flags_at = slots_at + AlignUp(slot_bytes);
  const size_t input_bytes = flags_at + AlignUp(flag_bytes);
  const size_t rows_bytes = static_cast<size_t>(step.num_cold + step.num_hot) * dim * sizeof(float);
  DLRM_RETURN_IF_ERROR(s.inputs.Reserve(input_bytes, s.stream));
  DLRM_RETURN_IF_ERROR(s.step_rows.Reserve(std::max<size_t>(rows_bytes, 16), s.stream));

  // Staging: cold rows, then the inputs in their device layout. The previous step's copies out of
  // it must be done before it is rewritten.
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.staged));
  const size_t inputs_at = AlignUp(cold_bytes);
  DLRM_RETURN_IF_ERROR(s.staging.Reserve(inputs_at + input_bytes));
  char* host = s.staging.data();
  for (absl::Span<const float> part : step.cold_parts) {
    if (part.empty()) continue;
    std::memcpy(host, part.data(), part.size() * sizeof(float));
    host += part.size() * sizeof(float);
  }
  host = s.staging.data();
  if (index_bytes > 0) std::memcpy(host + inputs_at, step.indices, index_bytes);
  std::memcpy(host + inputs_at + offsets_at, step.offsets, offset_bytes);
  if (slot_bytes > 0) std::memcpy(host + inputs_at + slots_at, step.hot_slots, slot_bytes);
  if (flag_bytes > 0) std::memcpy(host + inputs_at + flags_at, s.means.data(), flag_bytes);
  if (cold_bytes > 0) {
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(s.step_rows.ptr, host, cold_bytes, cudaMemcpyHostToDevice, s.stream));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.inputs.ptr, host + inputs_at, input_bytes,
                                            cudaMemcpyHostToDevice, s.stream));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.staged, s.stream));

  char* inputs = s.inputs.as<char>();
  s.indices = reinterpret_cast<const int64_t*>(inputs);
  s.offsets = reinterpret_cast<const int32_t*>(inputs + offsets_at);
  s.hot_slots = reinterpret_cast<const int64_t*>(inputs + slots_at);
  s.batch = step.batch;
  s.nnz = nnz;
  s.num_cold = step.num_cold;
  s.num_hot = step.num_hot;
  s.pooling = flag_bytes > 0
                  ? BagPooling::PerTable(reinterpret_cast<const uint8_t*>(inputs + flags_at),
                                         static_cast<int>(flag_bytes))
                  : BagPooling::All(modes.front());
  float* rows = s.step_rows.as<float>();
  // The hot rows' weights next to the cold rows, then one gather for every bag.
  LaunchGatherRows(s.rows, row_stride_, dim, s.hot_slots, s.num_hot, rows + s.num_cold * dim, dim,
                   s.stream);
  if (step.batch > 0) {
    LaunchPooledGather(rows, dim, dim, s.indices, s.offsets, step.batch, s.pooling, device_out,
                       out_stride, s.stream);
  }
  s.has_step = true;
  return absl::OkStatus();
}

absl::Status GpuHotCache::Backward(const float* device_dout, int64_t out_stride,
                                   absl::Span<const absl::Span<float>> cold_grad_parts) {
  State& s = *state_;
  if (!s.has_step) {
    return absl::FailedPreconditionError(absl::StrCat(options_.name, ": Backward without Lookup"));
  }
  if (out_stride < options_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.name, ": out_stride ", out_stride, " < dim ", options_.dim));
  }
  const int dim = options_.dim;
  const int64_t step_rows = s.num_cold + s.num_hot;
  const size_t cold_bytes = static_cast<size_t>(s.num_cold) * dim * sizeof(float);
  size_t part_floats = 0;
  for (absl::Span<float> part : cold_grad_parts) part_floats += part.size();
  if (part_floats * sizeof(float) != cold_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(options_.name, ": ", part_floats,
                                                   " floats for the gradients of ", s.num_cold,
                                                   " cold rows of dim ", dim));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  DLRM_RETURN_IF_ERROR(s.step_grads.Reserve(
      std::max<size_t>(static_cast<size_t>(step_rows) * dim * sizeof(float), 16), s.stream));
  if (step_rows > 0) {
    const size_t workspace_bytes = ScatterGradWorkspaceBytes(s.nnz, step_rows, dim);
    DLRM_RETURN_IF_ERROR(s.workspace.Reserve(std::max<size_t>(workspace_bytes, 16), s.stream));
    LaunchPooledScatterGrad(device_dout, out_stride, dim, s.indices, s.offsets, s.batch, s.nnz,
                            s.pooling, step_rows, s.step_grads.as<float>(), s.workspace.ptr,
                            s.workspace.bytes, s.stream);
  }
  if (cold_bytes > 0) {
    // No copy into `cold_grads` is in flight: every Backward waits for its own below.
    DLRM_RETURN_IF_ERROR(s.cold_grads.Reserve(cold_bytes));
    DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.cold_grads.ptr, s.step_grads.ptr, cold_bytes,
                                              cudaMemcpyDeviceToHost, s.stream));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  const char* from = s.cold_grads.data();
  for (absl::Span<float> part : cold_grad_parts) {
    if (part.empty()) continue;
    std::memcpy(part.data(), from, part.size() * sizeof(float));
    from += part.size() * sizeof(float);
  }
  s.hot_grads_ready = true;
  return absl::OkStatus();
}

absl::Status GpuHotCache::ApplyHot() {
  State& s = *state_;
  if (!s.hot_grads_ready) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.name, ": no hot gradients to apply (Backward first, once)"));
  }
  s.hot_grads_ready = false;
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  LaunchApplySparseOptimizer(
      WithLearningRate(options_.optimizer, learning_rate_), s.rows, row_stride_, options_.dim,
      s.hot_slots, s.step_grads.as<float>() + s.num_cold * options_.dim, s.num_hot, s.stream);
  return absl::OkStatus();
}

absl::Status GpuHotCache::AccumulateHot(float scale) {
  State& s = *state_;
  if (!s.hot_grads_ready) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.name, ": no hot gradients to accumulate (Backward first, once)"));
  }
  s.hot_grads_ready = false;
  DLRM_RETURN_IF_ERROR(CheckSumOverWorkers());
  if (options_.rows == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  const int dim = options_.dim;
  LaunchScatterRowsToDense(s.step_grads.as<float>() + s.num_cold * dim, s.hot_slots, s.num_hot, dim,
                           scale, s.reduce, s.reduce + options_.rows * dim, s.stream);
  return absl::OkStatus();
}

absl::Status GpuHotCache::CheckSumOverWorkers() const {
  if (!options_.sum_over_workers) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.name, ": created without sum_over_workers"));
  }
  return absl::OkStatus();
}

absl::Status GpuHotCache::ReduceAndApply(const AllReduceFn& allreduce) {
  DLRM_RETURN_IF_ERROR(CheckSumOverWorkers());
  // Every worker holds the same number of rows: all return here, or none does.
  if (options_.rows == 0) return absl::OkStatus();
  State& s = *state_;
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  const int dim = options_.dim;
  const int64_t rows = options_.rows;
  float* counts = s.reduce + rows * dim;
  DLRM_RETURN_IF_ERROR(Annotate(allreduce(counts, static_cast<size_t>(rows)),
                                "allreduce of the hot rows' touch counts"));
  int32_t* flags = s.touched;
  int32_t* positions = s.touched + rows + 1;
  LaunchTouchedPositions(counts, rows, flags, positions, s.scan_workspace.ptr,
                         s.scan_workspace.bytes, s.stream);
  int32_t touched = 0;  // positions[rows]: the number of touched rows
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&touched, positions + rows, sizeof(int32_t),
                                            cudaMemcpyDeviceToHost, s.stream));
  DLRM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  if (touched > 0) {
    // The buffers hold every row (AllocateReduceBuffer): nothing can fail between the sums.
    LaunchPackTouched(s.reduce, flags, positions, rows, dim, s.packed.as<float>(),
                      s.packed_slots.as<int64_t>(), s.stream);
    DLRM_RETURN_IF_ERROR(
        Annotate(allreduce(s.packed.as<float>(), static_cast<size_t>(touched) * dim),
                 "allreduce of the touched hot rows' gradients"));
    LaunchApplySparseOptimizer(WithLearningRate(options_.optimizer, learning_rate_), s.rows,
                               row_stride_, dim, s.packed_slots.as<int64_t>(), s.packed.as<float>(),
                               touched, s.stream);
  }
  return CudaStatus(cudaMemsetAsync(s.reduce, 0, ReduceBytes(), s.stream), "cudaMemsetAsync");
}

}  // namespace dlrm::embedding::cuda
