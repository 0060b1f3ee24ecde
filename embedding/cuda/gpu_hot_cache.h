// A GPU worker's hot rows in device memory, and the device side of a step whose other (cold) rows
// come from the host: the parameter servers or the in-process store.
//
// The hot rows of every table are stored as one table-batched GpuEmbeddingTable: slot s is
// stored row s, and the caller maps (table, id) to a slot (worker/hot_rows.h). A step works on the
// concatenation of its distinct rows
//
//     [cold rows (num_cold x dim, host memory) | hot rows (num_hot distinct slots)]
//
// Lookup uploads the cold rows and the bags once (one pinned staging buffer, two copies), gathers
// the hot rows next to them on the device and pools bags of indices into that concatenation, so
// that a batch's T x batch bags are one gather (worker/fused_bags.h lays them out). Backward
// aggregates the gradient of every row of the concatenation (sort-based, deterministic: the same
// kernel as GpuEmbeddingTable), returns the cold rows' gradients to the host, for the parameter
// servers, and keeps the hot rows' on the device. There one worker applies them with ApplyHot.
// Several workers add them into a [rows x dim | rows] buffer of gradients and touch counts with
// AccumulateHot, then ReduceAndApply sums the counts over the workers, packs the gradients of the
// rows any worker touched, sums those, and applies them: every replica takes the same step on
// the same rows, no other row changes, and the traffic is the counts plus the touched rows (as
// the host cache's mask-then-packed exchange), not the whole hot set.
//
// The hot rows stay fp32 whatever the tables' dtype (tables.dtype): they are a replica of rows
// whose own copy lives elsewhere (the parameter servers, in the tables' dtype), and the hot set is
// small. Half rows on the device are GpuEmbeddingTable's (options.dtype), for whole tables.
//
// Every call enqueues on options.stream (the dense backend's stream, dense::cuda::CudaStreamOf),
// after the model's work; host inputs may be reused when a call returns. Backward and ReadRows
// wait for their results. Not thread-safe: the trainer's compute thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/kernels.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding::cuda {

struct GpuHotCacheOptions {
  std::string name = "hot rows";  // used in error messages
  int64_t rows = 0;               // hot rows; 0 is allowed (every row of a step is cold)
  int dim = 0;
  SparseOptimizerOptions optimizer;
  int device = 0;
  void* stream = nullptr;  // cudaStream_t to enqueue on (not owned); required
  // Several workers sum the hot rows' gradients (AccumulateHot, ReduceAndApply): their buffers,
  // about rows x (2 dim + 5) floats, are allocated by Create, so that no allocation can fail
  // between two collectives (the other workers would wait in them forever).
  bool sum_over_workers = false;
};

// The host inputs of one step.
struct HotColdStep {
  // The cold rows' weights, num_cold x dim floats in all: the concatenation of the parts (e.g.
  // one per table, straight from the fetched rows: no host copy before the staging one).
  absl::Span<const absl::Span<const float>> cold_parts;
  int64_t num_cold = 0;
  const int64_t* hot_slots = nullptr;  // num_hot DISTINCT slots in [0, rows)
  int64_t num_hot = 0;
  // Bags over the concatenation: offsets has batch + 1 entries (offsets[0] == 0,
  // non-decreasing), indices offsets[batch] entries in [0, num_cold + num_hot).
  const int64_t* indices = nullptr;
  const int32_t* offsets = nullptr;
  int batch = 0;
  PoolingMode mode = PoolingMode::kSum;  // every bag's, unless table_modes is given
  // A pooling per table instead, for the bags of T = table_modes.size() tables laid out
  // sample-major (worker/fused_bags.h FuseHotColdBags): bag b is pooled by table_modes[b % T]
  // and batch must be a multiple of T. Tables that all pool alike cost what `mode` does.
  absl::Span<const PoolingMode> table_modes;
};

class GpuHotCache {
 public:
  // Allocates `rows` stored rows (zero-filled), and the buffers of sum_over_workers.
  // INVALID_ARGUMENT for a bad shape (rows >= 2^31 - 1 included), device or a missing stream,
  // FAILED_PRECONDITION without a device, RESOURCE_EXHAUSTED when it does not fit.
  static absl::StatusOr<std::unique_ptr<GpuHotCache>> Create(const GpuHotCacheOptions& options);
  ~GpuHotCache();
  GpuHotCache(const GpuHotCache&) = delete;
  GpuHotCache& operator=(const GpuHotCache&) = delete;

  int64_t rows() const { return options_.rows; }
  int dim() const { return options_.dim; }
  // Floats per stored row: dim + SparseOptimizerStateFloats(optimizer, dim).
  int64_t row_stride() const { return row_stride_; }
  // Device bytes held: stored rows, plus the buffers of sum_over_workers (not the per-step
  // scratch, which grows with the largest step).
  int64_t device_bytes() const;

  // Stored rows [weights | state] of slots [first, first + count) from / to host memory
  // (count x row_stride floats). ReadRows waits for the copy and for every step before it.
  absl::Status WriteRows(int64_t first, int64_t count, const float* host_rows);
  absl::Status ReadRows(int64_t first, int64_t count, float* host_rows);

  // device_out[b * out_stride + 0..dim) = pool of bag b over the step's rows. INVALID_ARGUMENT
  // naming the value for malformed bags, an index or slot out of range, a repeated slot, or
  // table_modes that do not divide the bags.
  absl::Status Lookup(const HotColdStep& step, float* device_out, int64_t out_stride);
  // Backward of the last Lookup (device_dout in its output layout): the cold rows' summed
  // gradients (num_cold x dim floats) go to host memory, split over `cold_grad_parts` as the cold
  // rows were over the step's parts; the hot rows' stay on the device for ApplyHot or
  // AccumulateHot. Waits for the gradients. FAILED_PRECONDITION without a Lookup,
  // INVALID_ARGUMENT when the parts do not hold num_cold x dim floats.
  absl::Status Backward(const float* device_dout, int64_t out_stride,
                        absl::Span<const absl::Span<float>> cold_grad_parts);
  // One optimizer step on each hot row of the last Backward, with its gradient.
  absl::Status ApplyHot();
  // The learning rate of the updates that follow (ApplyHot, ReduceAndApply; a job's schedule,
  // common/lr_schedule.h); kTableLearningRate: options.optimizer's own.
  void set_learning_rate(float learning_rate) { learning_rate_ = learning_rate; }

  // Adds scale x the last Backward's hot gradients into the buffer and counts each hot row once.
  // FAILED_PRECONDITION unless created with sum_over_workers.
  absl::Status AccumulateHot(float scale);
  // A sum over the workers, in place on `count` floats of device memory ordered on the stream
  // (e.g. NCCL's allreduce); every worker must make the same calls with the same counts.
  using AllReduceFn = std::function<absl::Status(float* device_data, size_t count)>;
  // Sums the buffer over the workers and applies it: `allreduce` first gets the rows' touch
  // counts (rows floats), then, when any worker touched a row, the touched rows' gradients packed
  // in increasing row order (touched x dim floats). One optimizer step on each touched row with
  // its summed gradient; then clears the buffer. Waits for the counts (to size the second call).
  // FAILED_PRECONDITION unless created with sum_over_workers.
  absl::Status ReduceAndApply(const AllReduceFn& allreduce);

  // Waits for every call issued so far.
  absl::Status Synchronize();

 private:
  explicit GpuHotCache(const GpuHotCacheOptions& options);
  absl::Status Init();
  absl::Status AllocateReduceBuffer();  // all or nothing
  absl::Status CheckSumOverWorkers() const;
  // Bytes of the buffer: rows x dim gradients, then rows counts.
  size_t ReduceBytes() const {
    return static_cast<size_t>(options_.rows) * (options_.dim + 1) * sizeof(float);
  }
  absl::Status Check(const HotColdStep& step);  // uses state_->seen
  struct State;

  const GpuHotCacheOptions options_;
  float learning_rate_ = kTableLearningRate;
  const int64_t row_stride_;
  std::unique_ptr<State> state_;
};

}  // namespace dlrm::embedding::cuda
