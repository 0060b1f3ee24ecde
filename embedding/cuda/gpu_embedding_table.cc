#include "embedding/cuda/gpu_embedding_table.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/device_buffer.h"
#include "embedding/cuda/embedding_kernels.h"
#include "embedding/cuda/half_row_kernels.h"
#include "embedding/cuda/table_poolings.h"

namespace dlrm::embedding::cuda {
namespace {

// The host passes over a call's ids run in pieces of this many on the table's pool.
constexpr int64_t kHostPiece = int64_t{1} << 16;

// fn(begin, end) over [0, n) in pieces, on `pool` when there is one and more than one piece.
template <typename Fn>
void ForPieces(common::ParallelPool* pool, int64_t n, Fn fn) {
  const int64_t pieces = (n + kHostPiece - 1) / kHostPiece;
  if (pool == nullptr || pieces <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  pool->ParallelFor(pieces,
                    [&](int64_t p) { fn(p * kHostPiece, std::min(n, (p + 1) * kHostPiece)); });
}

// The first position in [0, n) where bad(position) holds, or n. Each piece is first tested
// branch-free (a pass the compiler vectorises); only a piece that holds one is searched.
template <typename Bad>
int64_t FirstBad(common::ParallelPool* pool, int64_t n, Bad bad) {
  std::atomic<int64_t> first{n};
  ForPieces(pool, n, [&](int64_t begin, int64_t end) {
    bool any = false;
    for (int64_t i = begin; i < end; ++i) any |= bad(i);
    if (!any) return;
    int64_t j = begin;
    while (!bad(j)) ++j;
    for (int64_t seen = first.load(); j < seen && !first.compare_exchange_weak(seen, j);) {
    }
  });
  return first.load();
}

}  // namespace

struct GpuEmbeddingTable::Scratch {
  DeviceBuffer ids;      // int64 ids, nnz
  DeviceBuffer offsets;  // int32, batch + 1; then, 256-byte aligned, per-table mean flags
  // float, nnz x dim (compact gradients) or n x row_stride (ReadRows, and half rows' WriteRows)
  DeviceBuffer grads;
  DeviceBuffer slots;      // int64, nnz
  DeviceBuffer workspace;  // scatter sort workspace
  // Pinned staging of host inputs; `staged` is recorded after the copies out of it.
  PinnedBuffer pinned;
  cudaEvent_t staged = nullptr;
  std::vector<int32_t> iota;   // offsets 0..n for ReadRows
  std::vector<uint8_t> means;  // per-table mean flags of a call (table_poolings.h)
  ~Scratch() {
    if (staged != nullptr) {
      cudaEventSynchronize(staged);
      cudaEventDestroy(staged);
    }
  }
};

GpuEmbeddingTable::GpuEmbeddingTable(const GpuEmbeddingTableOptions& options)
    : options_(options),
      row_stride_(options.dim + SparseOptimizerStateFloats(options.optimizer.type, options.dim)),
      row_words_(RowWords(options.dtype, options.dim,
                          SparseOptimizerStateFloats(options.optimizer.type, options.dim))),
      scratch_(std::make_unique<Scratch>()) {}

GpuEmbeddingTable::~GpuEmbeddingTable() {
  cudaSetDevice(options_.device);
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  scratch_.reset();
  cudaFree(rows_);
  if (owns_stream_ && stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::StatusOr<std::unique_ptr<GpuEmbeddingTable>> GpuEmbeddingTable::Create(
    const GpuEmbeddingTableOptions& options) {
  if (options.rows <= 0 || options.dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPU table ", options.name,
                                                   ": rows = ", options.rows,
                                                   ", dim = ", options.dim, " (both must be > 0)"));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (options.dtype != RowDtype::kFp32 && options.dtype != RowDtype::kFp16 &&
      options.dtype != RowDtype::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU table ", options.name, ": dtype ", static_cast<int>(options.dtype)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("GPU table ", options.name, ": CUDA device ",
                                                   options.device, " out of range: ", count,
                                                   " visible"));
  }
  std::unique_ptr<GpuEmbeddingTable> table(new GpuEmbeddingTable(options));
  DLRM_RETURN_IF_ERROR(Annotate(table->Init(), absl::StrCat("GPU table ", options.name)));
  return table;
}

absl::Status GpuEmbeddingTable::Init() {
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (options_.stream == nullptr) {
    cudaStream_t stream = nullptr;
    DLRM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_ = stream;
    owns_stream_ = true;
  } else {
    stream_ = options_.stream;
  }
  const size_t bytes = static_cast<size_t>(options_.rows) * row_words_ * sizeof(float);
  if (cudaError_t err = cudaMalloc(&rows_, bytes); err != cudaSuccess) {
    cudaGetLastError();
    rows_ = nullptr;
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.rows, " rows x ", row_words_, " words = ", bytes, " bytes do not fit (",
        free_bytes, " of ", total_bytes, " bytes free): ", cudaGetErrorString(err)));
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  DLRM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rows_, 0, bytes, stream));
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&scratch_->staged, cudaEventDisableTiming));
  return Finish();
}

absl::Status GpuEmbeddingTable::Finish() {
  if (!owns_stream_) return absl::OkStatus();
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                    "cudaStreamSynchronize");
}

absl::Status GpuEmbeddingTable::Synchronize() {
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                    "cudaStreamSynchronize");
}

absl::Status GpuEmbeddingTable::CheckIds(const int64_t* ids, int64_t n) const {
  // As unsigned, a negative id is >= rows too.
  const uint64_t rows = static_cast<uint64_t>(options_.rows);
  const int64_t j =
      FirstBad(options_.pool, n, [&](int64_t i) { return static_cast<uint64_t>(ids[i]) >= rows; });
  if (j == n) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("table ", options_.name, ": id ", ids[j], ids[j] < 0 ? " < 0" : " >= rows ",
                   ids[j] < 0 ? "" : absl::StrCat(options_.rows), " (position ", j, ")"));
}

absl::StatusOr<int> GpuEmbeddingTable::CheckBatch(const int64_t* ids, const int32_t* offsets,
                                                  int batch,
                                                  absl::Span<const PoolingMode> table_modes,
                                                  int64_t out_stride) const {
  DLRM_RETURN_IF_ERROR(CheckBags(offsets, batch));
  DLRM_RETURN_IF_ERROR(CheckTableModes(table_modes, batch, "table ", options_.name));
  const int nnz = offsets[batch];
  DLRM_RETURN_IF_ERROR(CheckIds(ids, nnz));
  if (out_stride < options_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": out_stride ",
                                                   out_stride, " < dim ", options_.dim));
  }
  return nnz;
}

absl::Status GpuEmbeddingTable::CheckBags(const int32_t* offsets, int batch) const {
  if (batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": batch ", batch));
  }
  if (offsets == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": no offsets"));
  }
  if (offsets[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", options_.name, ": offsets[0] = ", offsets[0], ", expected 0"));
  }
  const int64_t b =
      FirstBad(options_.pool, batch, [&](int64_t i) { return offsets[i + 1] < offsets[i]; });
  if (b == batch) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": offsets[", b + 1,
                                                 "] = ", offsets[b + 1], " < offsets[", b,
                                                 "] = ", offsets[b]));
}

absl::Status GpuEmbeddingTable::StageInputs(const int64_t* ids, int64_t n, const int32_t* offsets,
                                            int batch, absl::Span<const uint8_t> means) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const size_t id_bytes = static_cast<size_t>(n) * sizeof(int64_t);
  const size_t offset_bytes = offsets == nullptr ? 0 : (static_cast<size_t>(batch) + 1) * 4;
  // The flags follow the offsets in the same copy: [offsets | padding | flags].
  const size_t flag_bytes = offsets == nullptr ? 0 : means.size();
  const size_t offsets_copy = flag_bytes > 0 ? AlignUp(offset_bytes) + flag_bytes : offset_bytes;
  const size_t needed = AlignUp(id_bytes) + AlignUp(offsets_copy);
  Scratch& s = *scratch_;
  last_lookup_.valid = false;  // the device copies of its ids and offsets are overwritten
  // The previous call's copies out of the staging buffer must be done before it is rewritten.
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.staged));
  DLRM_RETURN_IF_ERROR(s.pinned.Reserve(needed));
  DLRM_RETURN_IF_ERROR(s.ids.Reserve(std::max<size_t>(id_bytes, 8), stream));
  char* host = s.pinned.data();
  if (id_bytes > 0) {
    ForPieces(options_.pool, n, [&](int64_t begin, int64_t end) {
      std::memcpy(host + begin * sizeof(int64_t), ids + begin, (end - begin) * sizeof(int64_t));
    });
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(s.ids.ptr, host, id_bytes, cudaMemcpyHostToDevice, stream));
  }
  if (offset_bytes > 0) {
    DLRM_RETURN_IF_ERROR(s.offsets.Reserve(offsets_copy, stream));
    char* host_offsets = host + AlignUp(id_bytes);
    std::memcpy(host_offsets, offsets, offset_bytes);
    if (flag_bytes > 0) std::memcpy(host_offsets + AlignUp(offset_bytes), means.data(), flag_bytes);
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(s.offsets.ptr, host_offsets, offsets_copy, cudaMemcpyHostToDevice, stream));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.staged, stream));
  return absl::OkStatus();
}

BagPooling GpuEmbeddingTable::StagedPooling(absl::Span<const PoolingMode> modes, int batch,
                                            absl::Span<const uint8_t> means) {
  if (means.empty()) return BagPooling::All(modes.front());
  const size_t flags_at = AlignUp((static_cast<size_t>(batch) + 1) * sizeof(int32_t));
  return BagPooling::PerTable(scratch_->offsets.as<uint8_t>() + flags_at,
                              static_cast<int>(means.size()));
}

absl::Status GpuEmbeddingTable::Initialize(
    const std::function<void(int64_t first_id, int64_t count, float* out)>& fill) {
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const size_t row_bytes = static_cast<size_t>(row_stride_) * sizeof(float);
  const int64_t chunk_rows = std::min<int64_t>(
      options_.rows, std::max<int64_t>(1, options_.upload_chunk_bytes / row_bytes));
  // Two pinned buffers: the host fills one while the other uploads. Half rows upload into one
  // device buffer and are rounded from it into the table (stream order keeps the next upload
  // behind the rounding).
  void* pinned[2] = {nullptr, nullptr};
  cudaEvent_t uploaded[2] = {nullptr, nullptr};
  DeviceBuffer widened;
  absl::Status status;
  if (half()) status = widened.Reserve(chunk_rows * row_bytes, stream, /*headroom=*/false);
  for (int i = 0; i < 2 && status.ok(); ++i) {
    status = CudaStatus(cudaMallocHost(&pinned[i], chunk_rows * row_bytes), "cudaMallocHost");
    if (status.ok()) {
      status = CudaStatus(cudaEventCreateWithFlags(&uploaded[i], cudaEventDisableTiming),
                          "cudaEventCreate");
    }
  }
  for (int64_t first = 0, k = 0; status.ok() && first < options_.rows; first += chunk_rows, ++k) {
    const int i = static_cast<int>(k % 2);
    const int64_t count = std::min(chunk_rows, options_.rows - first);
    if (k >= 2) status = CudaStatus(cudaEventSynchronize(uploaded[i]), "cudaEventSynchronize");
    if (!status.ok()) break;
    fill(first, count, static_cast<float*>(pinned[i]));
    void* target = half() ? widened.ptr : rows_ + first * row_stride_;
    status = CudaStatus(
        cudaMemcpyAsync(target, pinned[i], count * row_bytes, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync");
    if (status.ok()) status = CudaStatus(cudaEventRecord(uploaded[i], stream), "cudaEventRecord");
    if (status.ok() && half()) PackRows(widened.as<float>(), first, count);
  }
  // Wait before freeing the pinned buffers, whatever happened.
  absl::Status sync = CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  for (int i = 0; i < 2; ++i) {
    if (uploaded[i] != nullptr) cudaEventDestroy(uploaded[i]);
    cudaFreeHost(pinned[i]);
  }
  DLRM_RETURN_IF_ERROR(Annotate(status, absl::StrCat("table ", options_.name, ": Initialize")));
  return sync;
}

absl::Status GpuEmbeddingTable::WriteRows(int64_t first_row, int64_t count,
                                          const float* host_rows) {
  if (first_row < 0 || count < 0 || first_row + count > options_.rows) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": rows [", first_row,
                                                   ", ", first_row + count, ") outside [0, ",
                                                   options_.rows, ")"));
  }
  if (count == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const size_t row_bytes = static_cast<size_t>(row_stride_) * sizeof(float);
  if (!half()) {
    // Pageable source: the copy has taken the data when the call returns.
    DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rows_ + first_row * row_stride_, host_rows,
                                              static_cast<size_t>(count) * row_bytes,
                                              cudaMemcpyHostToDevice, stream));
    return Finish();
  }
  // Half rows: widened rows go to device scratch, piece by piece, and are rounded from there.
  const int64_t piece_rows =
      std::min<int64_t>(count, std::max<int64_t>(1, options_.upload_chunk_bytes / row_bytes));
  DeviceBuffer& widened = scratch_->grads;
  DLRM_RETURN_IF_ERROR(widened.Reserve(piece_rows * row_bytes, stream));
  for (int64_t done = 0; done < count; done += piece_rows) {
    const int64_t n = std::min(piece_rows, count - done);
    DLRM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(widened.ptr, host_rows + done * row_stride_,
                                              n * row_bytes, cudaMemcpyHostToDevice, stream));
    PackRows(widened.as<float>(), first_row + done, n);
  }
  return Finish();
}

absl::Status GpuEmbeddingTable::ReadRows(const int64_t* ids, int64_t n, float* host_out) {
  last_lookup_.valid = false;
  DLRM_RETURN_IF_ERROR(CheckIds(ids, n));
  if (n == 0) return absl::OkStatus();
  if (n > INT32_MAX - 1) {
    return absl::InvalidArgumentError(absl::StrCat("ReadRows: ", n, " ids in one call"));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  Scratch& s = *scratch_;
  const size_t out_bytes = static_cast<size_t>(n) * row_stride_ * sizeof(float);
  if (half()) {
    DLRM_RETURN_IF_ERROR(StageInputs(ids, n, nullptr, 0));
    DLRM_RETURN_IF_ERROR(s.grads.Reserve(out_bytes, stream));
    LaunchUnpackHalfRows(HalfView(), s.ids.as<int64_t>(), n, s.grads.as<float>(), stream);
    DLRM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_out, s.grads.ptr, out_bytes, cudaMemcpyDeviceToHost, stream));
    return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  // A gather of bags of one id with dim = row_stride copies whole stored rows.
  s.iota.resize(n + 1);
  for (int64_t i = 0; i <= n; ++i) s.iota[i] = static_cast<int32_t>(i);
  DLRM_RETURN_IF_ERROR(StageInputs(ids, n, s.iota.data(), static_cast<int>(n)));
  DLRM_RETURN_IF_ERROR(s.grads.Reserve(out_bytes, stream));
  LaunchPooledGather(rows_, row_stride_, static_cast<int>(row_stride_), s.ids.as<int64_t>(),
                     s.offsets.as<int32_t>(), static_cast<int>(n),
                     BagPooling::All(PoolingMode::kSum), s.grads.as<float>(), row_stride_, stream);
  DLRM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_out, s.grads.ptr, out_bytes, cudaMemcpyDeviceToHost, stream));
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

absl::Status GpuEmbeddingTable::Lookup(const int64_t* ids, const int32_t* offsets, int batch,
                                       absl::Span<const PoolingMode> table_modes, float* device_out,
                                       int64_t out_stride) {
  last_lookup_.valid = false;
  DLRM_ASSIGN_OR_RETURN(const int nnz, CheckBatch(ids, offsets, batch, table_modes, out_stride));
  if (batch == 0) {
    last_lookup_ = {.valid = true, .batch = 0, .nnz = 0, .pooling = {}};  // nothing to apply
    return absl::OkStatus();
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  std::vector<uint8_t>& means = scratch_->means;
  TableMeanFlags(table_modes, &means);
  DLRM_RETURN_IF_ERROR(StageInputs(ids, nnz, offsets, batch, means));
  const BagPooling pooling = StagedPooling(table_modes, batch, means);
  if (half()) {
    LaunchHalfPooledGather(HalfView(), scratch_->ids.as<int64_t>(), scratch_->offsets.as<int32_t>(),
                           batch, pooling, device_out, out_stride,
                           static_cast<cudaStream_t>(stream_));
  } else {
    LaunchPooledGather(rows_, row_stride_, options_.dim, scratch_->ids.as<int64_t>(),
                       scratch_->offsets.as<int32_t>(), batch, pooling, device_out, out_stride,
                       static_cast<cudaStream_t>(stream_));
  }
  last_lookup_ = {.valid = true, .batch = batch, .nnz = nnz, .pooling = pooling};
  return Finish();
}

absl::Status GpuEmbeddingTable::ApplyGradients(const int64_t* ids, const int32_t* offsets,
                                               int batch, absl::Span<const PoolingMode> table_modes,
                                               const float* device_dout, int64_t out_stride) {
  last_lookup_.valid = false;
  DLRM_ASSIGN_OR_RETURN(const int nnz, CheckBatch(ids, offsets, batch, table_modes, out_stride));
  if (nnz == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  std::vector<uint8_t>& means = scratch_->means;
  TableMeanFlags(table_modes, &means);
  DLRM_RETURN_IF_ERROR(StageInputs(ids, nnz, offsets, batch, means));
  return ApplyStaged(batch, nnz, StagedPooling(table_modes, batch, means), device_dout, out_stride);
}

absl::Status GpuEmbeddingTable::ApplyGradientsOfLastLookup(const float* device_dout,
                                                           int64_t out_stride) {
  if (!last_lookup_.valid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", options_.name, ": no Lookup to apply gradients to (or its bags were replaced)"));
  }
  if (out_stride < options_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": out_stride ",
                                                   out_stride, " < dim ", options_.dim));
  }
  const StagedLookup last = last_lookup_;
  last_lookup_.valid = false;  // one backward per lookup
  if (last.nnz == 0) return absl::OkStatus();
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  return ApplyStaged(last.batch, last.nnz, last.pooling, device_dout, out_stride);
}

absl::Status GpuEmbeddingTable::ApplyStaged(int batch, int nnz, const BagPooling& pooling,
                                            const float* device_dout, int64_t out_stride) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  Scratch& s = *scratch_;
  DLRM_RETURN_IF_ERROR(
      s.grads.Reserve(static_cast<size_t>(nnz) * options_.dim * sizeof(float), stream));
  DLRM_RETURN_IF_ERROR(s.slots.Reserve(static_cast<size_t>(nnz) * sizeof(int64_t), stream));
  const size_t workspace_bytes = ScatterGradWorkspaceBytes(nnz, options_.rows, options_.dim);
  DLRM_RETURN_IF_ERROR(s.workspace.Reserve(workspace_bytes, stream));
  LaunchPooledScatterGradCompact(device_dout, out_stride, options_.dim, s.ids.as<int64_t>(),
                                 s.offsets.as<int32_t>(), batch, nnz, pooling, options_.rows,
                                 s.grads.as<float>(), s.slots.as<int64_t>(), s.workspace.ptr,
                                 s.workspace.bytes, stream);
  LaunchOptimizer(s.slots.as<int64_t>(), s.grads.as<float>(), nnz);
  return Finish();
}

absl::Status GpuEmbeddingTable::ApplyRowGradients(const int64_t* ids, int64_t n,
                                                  const float* device_grads) {
  last_lookup_.valid = false;
  DLRM_RETURN_IF_ERROR(CheckIds(ids, n));
  if (n == 0) return absl::OkStatus();
  std::vector<int64_t> sorted(ids, ids + n);
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", options_.name, ": id ", *dup,
                                                   " appears twice in ApplyRowGradients"));
  }
  DLRM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  DLRM_RETURN_IF_ERROR(StageInputs(ids, n, nullptr, 0));
  LaunchOptimizer(scratch_->ids.as<int64_t>(), device_grads, n);
  return Finish();
}

HalfRows GpuEmbeddingTable::HalfView() {
  HalfRows t;
  t.rows = rows_;
  t.row_words = row_words_;
  t.dim = options_.dim;
  t.state_floats = static_cast<int>(row_stride_) - options_.dim;
  t.dtype = options_.dtype;
  return t;
}

void GpuEmbeddingTable::LaunchOptimizer(const int64_t* slots, const float* grads, int64_t n) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const SparseOptimizerOptions optimizer = WithLearningRate(options_.optimizer, learning_rate_);
  if (!half()) {
    LaunchApplySparseOptimizer(optimizer, rows_, row_stride_, options_.dim, slots, grads, n,
                               stream);
    return;
  }
  const StochasticRounding rounding{.seed = options_.rounding_seed, .call = optimizer_calls_++};
  LaunchApplySparseOptimizerHalf(optimizer, HalfView(), slots, grads, n, rounding, stream);
}

void GpuEmbeddingTable::PackRows(const float* rows, int64_t first, int64_t count) {
  LaunchPackHalfRows(HalfView(), rows, first, count, static_cast<cudaStream_t>(stream_));
}

}  // namespace dlrm::embedding::cuda
