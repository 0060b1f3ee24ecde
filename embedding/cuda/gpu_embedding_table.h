// A device-resident embedding table: rows x [weights (dim) | optimizer state] in GPU memory, for a
// worker's hot rows (ids are then the hot-set slots) or a whole table that fits.
// Lookups and gradient application take host ids (validated here, so a bad id is an
// INVALID_ARGUMENT naming it, never a device fault) and device activations/gradients.
//
// Stored dtype (options.dtype, embedding/row_dtype.h): with kFp32 a stored row is row_stride()
// floats. With kFp16 / kBf16 the weights take 2 bytes each (padded to 4 bytes) and the optimizer
// state stays fp32: a stored row is stored_row_words() 4-byte words laid out as
// embedding::RowCodec's, e.g. 33 words instead of 65 for dim 64 with row-wise Adagrad. Every host
// interface stays fp32 whatever the dtype: Initialize, WriteRows and ReadRows move widened rows
// of row_stride() floats, and Lookup pools widened weights in fp32 into fp32 outputs. Half rows
// round as the parameter servers' do: Initialize and WriteRows to nearest even;
// ApplyGradients and ApplyRowGradients update a widened copy in fp32 and store it rounded
// stochastically (up with probability equal to the distance from the lower neighbour), so
// updates below half a unit in the last place still move a row on average. The random bits of
// weight k of stored row r in the c-th call that updates rows (ApplyGradients,
// ApplyGradientsOfLastLookup or ApplyRowGradients with at least one id; c counts from 0 at
// Create) are a hash of (options.rounding_seed, c, r, k): for a given seed and sequence of calls
// the rows are the same bits on every run, whatever the thread scheduling.
//
// Ordering: with options.stream == nullptr the table owns a stream and every call has finished
// when it returns. With a caller's stream (e.g. the dense backend's, dense::cuda::CudaStreamOf) the
// calls only enqueue work on it; host inputs are staged through pinned memory, so the caller may
// reuse its id arrays as soon as a call returns.
//
// ApplyGradients aggregates duplicate ids on the device (sort + segmented sum, deterministic) and
// applies the optimizer once per distinct row, never touching rows outside the batch (lazy).
// Not thread-safe: one thread at a time (the trainer that owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/parallel.h"
#include "embedding/cuda/bag_pooling.h"
#include "embedding/kernels.h"
#include "embedding/row_dtype.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding::cuda {

struct HalfRows;  // half_row_kernels.h (private)

struct GpuEmbeddingTableOptions {
  std::string name;  // used in error messages, e.g. "C3" or "hot"
  int64_t rows = 0;
  int dim = 0;
  SparseOptimizerOptions optimizer;
  int device = 0;
  void* stream = nullptr;  // cudaStream_t to enqueue on (not owned); nullptr: own stream
  // Size of each of the two pinned buffers that stream rows to the device in Initialize() (and,
  // for half rows, of the device buffer they are rounded from, and of WriteRows' pieces).
  size_t upload_chunk_bytes = size_t{64} << 20;
  // How the weights are stored (see the file comment); the optimizer state is always fp32.
  RowDtype dtype = RowDtype::kFp32;
  // Half rows: the seed of stochastic rounding's random bits. Ignored for fp32.
  uint64_t rounding_seed = 0;
  // Not owned; when set, the host passes over a call's ids and offsets (the range checks and the
  // copy to pinned memory: at a million ids or more a step, longer than the GPU's own work) run
  // on it.
  common::ParallelPool* pool = nullptr;
};

class GpuEmbeddingTable {
 public:
  // Allocates the table (zero-filled). INVALID_ARGUMENT for a bad shape or device,
  // FAILED_PRECONDITION without a device, RESOURCE_EXHAUSTED when it does not fit.
  static absl::StatusOr<std::unique_ptr<GpuEmbeddingTable>> Create(
      const GpuEmbeddingTableOptions& options);
  ~GpuEmbeddingTable();
  GpuEmbeddingTable(const GpuEmbeddingTable&) = delete;
  GpuEmbeddingTable& operator=(const GpuEmbeddingTable&) = delete;

  int64_t rows() const { return options_.rows; }
  int dim() const { return options_.dim; }
  RowDtype dtype() const { return options_.dtype; }
  // Floats per widened row, as the host interfaces take and give them:
  // dim + SparseOptimizerStateFloats(optimizer, dim).
  int64_t row_stride() const { return row_stride_; }
  // 4-byte words per stored row on the device: row_stride() for fp32,
  // RowWords(dtype, dim, state floats) for half rows.
  int64_t stored_row_words() const { return row_words_; }
  // Bytes of the stored rows on the device (not counting per-call scratch).
  int64_t device_bytes() const { return options_.rows * row_words_ * 4; }
  // rows() x stored_row_words() words of device memory (floats for fp32).
  void* device_rows() { return rows_; }

  // Fills every stored row. `fill(first_id, count, out)` writes rows [first_id, first_id + count)
  // (count * row_stride() floats, e.g. with InitRowWithState) into a pinned buffer; it is called
  // chunk by chunk on this thread while the previous chunk uploads. Waits for the upload.
  absl::Status Initialize(
      const std::function<void(int64_t first_id, int64_t count, float* out)>& fill);
  // Uploads stored rows [first_row, first_row + count) from host memory (count x row_stride
  // widened floats; half weights are rounded to nearest even).
  absl::Status WriteRows(int64_t first_row, int64_t count, const float* host_rows);
  // Copies the stored rows of `ids` to host_out (n x row_stride, weights widened). Waits for the
  // copy.
  absl::Status ReadRows(const int64_t* ids, int64_t n, float* host_out);

  // device_out[b * out_stride + 0..dim) = pool of rows ids[offsets[b] .. offsets[b+1]).
  // `ids` and `offsets` (batch + 1 entries, offsets[0] == 0, non-decreasing) are host memory.
  absl::Status Lookup(const int64_t* ids, const int32_t* offsets, int batch, PoolingMode mode,
                      float* device_out, int64_t out_stride) {
    return Lookup(ids, offsets, batch, absl::MakeConstSpan(&mode, 1), device_out, out_stride);
  }
  // The same with a pooling per table, for the bags of T = table_modes.size() tables laid out
  // sample-major (worker/fused_bags.h): bag b is pooled by table_modes[b % T], and batch (the
  // number of bags) must be a multiple of T (INVALID_ARGUMENT otherwise). Tables that all pool
  // alike cost what one mode does; a mix stages T bytes of flags with the offsets.
  absl::Status Lookup(const int64_t* ids, const int32_t* offsets, int batch,
                      absl::Span<const PoolingMode> table_modes, float* device_out,
                      int64_t out_stride);

  // Backward of Lookup followed by one optimizer step: device_dout has the layout of device_out.
  absl::Status ApplyGradients(const int64_t* ids, const int32_t* offsets, int batch,
                              PoolingMode mode, const float* device_dout, int64_t out_stride) {
    return ApplyGradients(ids, offsets, batch, absl::MakeConstSpan(&mode, 1), device_dout,
                          out_stride);
  }
  // With a pooling per table, as Lookup's.
  absl::Status ApplyGradients(const int64_t* ids, const int32_t* offsets, int batch,
                              absl::Span<const PoolingMode> table_modes, const float* device_dout,
                              int64_t out_stride);

  // The same for the bags of the last Lookup, whose ids and offsets are still on the device: no
  // host work and no copy. FAILED_PRECONDITION when there was no Lookup since the last call of
  // ReadRows, ApplyGradients, ApplyRowGradients or this one.
  absl::Status ApplyGradientsOfLastLookup(const float* device_dout, int64_t out_stride);

  // One optimizer step on distinct rows `ids` (host, n of them) with already aggregated gradients
  // (device, n x dim), e.g. after an allreduce of hot-row gradients.
  absl::Status ApplyRowGradients(const int64_t* ids, int64_t n, const float* device_grads);

  // The learning rate of the updates that follow (a job's schedule, common/lr_schedule.h);
  // kTableLearningRate: options.optimizer's own.
  void set_learning_rate(float learning_rate) { learning_rate_ = learning_rate; }

  // Waits for every call issued so far.
  absl::Status Synchronize();

 private:
  explicit GpuEmbeddingTable(const GpuEmbeddingTableOptions& options);
  absl::Status Init();
  absl::Status CheckIds(const int64_t* ids, int64_t n) const;
  absl::Status CheckBags(const int32_t* offsets, int batch) const;
  // CheckBags, CheckTableModes, CheckIds and out_stride >= dim for a Lookup or ApplyGradients;
  // returns the batch's id count (offsets[batch]).
  absl::StatusOr<int> CheckBatch(const int64_t* ids, const int32_t* offsets, int batch,
                                 absl::Span<const PoolingMode> table_modes,
                                 int64_t out_stride) const;
  // Copies ids (and offsets when not null, followed by the per-table flags `means` when not
  // empty) to device scratch through pinned staging.
  absl::Status StageInputs(const int64_t* ids, int64_t n, const int32_t* offsets, int batch,
                           absl::Span<const uint8_t> means = {});
  // The pooling of the bags just staged with StageInputs(..., batch, means): by modes[0] when
  // `means` is empty, else by the staged flags.
  BagPooling StagedPooling(absl::Span<const PoolingMode> modes, int batch,
                           absl::Span<const uint8_t> means);
  absl::Status Finish();  // synchronises when the table owns its stream
  // Backward and optimizer step on the staged ids and offsets (and flags).
  absl::Status ApplyStaged(int batch, int nnz, const BagPooling& pooling, const float* device_dout,
                           int64_t out_stride);
  bool half() const { return options_.dtype != RowDtype::kFp32; }
  // One optimizer step on rows `slots` (device, n; negative ones skipped) with gradients `grads`
  // (device, n x dim), by the stored dtype's kernel.
  void LaunchOptimizer(const int64_t* slots, const float* grads, int64_t n);
  // Stores `count` widened rows from device memory `rows` at stored row `first` (half rows).
  void PackRows(const float* rows, int64_t first, int64_t count);
  // The device rows as the half-row kernels take them (half_row_kernels.h).
  HalfRows HalfView();
  struct Scratch;
  // The bags the last Lookup staged, while the scratch still holds them (their per-table flags
  // included: `pooling` may point into it).
  struct StagedLookup {
    bool valid = false;
    int batch = 0;
    int nnz = 0;
    BagPooling pooling;
  };
  StagedLookup last_lookup_;

  const GpuEmbeddingTableOptions options_;
  float learning_rate_ = kTableLearningRate;
  const int64_t row_stride_;
  const int64_t row_words_;
  float* rows_ = nullptr;         // rows x row_words_ 4-byte words
  uint64_t optimizer_calls_ = 0;  // half rows: the call counter of stochastic rounding
  void* stream_ = nullptr;        // cudaStream_t
  bool owns_stream_ = false;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace dlrm::embedding::cuda
