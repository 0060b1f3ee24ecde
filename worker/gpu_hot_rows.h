// GpuHotRows: the embedding side of a training step on a GPU worker whose tables live on the
// parameter servers (or in the in-process store) rather than in GPU memory.
//
// The worker's hot rows (the HotRowCache's set, worker/hot_rows.h) are held in GPU memory with
// their optimizer state (embedding/cuda/gpu_hot_cache.h). Each step uploads the batch's distinct
// cold rows, as fetched from the store, once; pooling, the embedding backward and the hot rows'
// optimizer step run on the device; only the cold rows' gradients come back to the host, for the
// push. With several workers the hot rows' gradients are summed over them in device memory
// (NCCL: DeviceAllReducer) or, without one, staged through the host allreducer, so the replicas
// stay identical, as with the host cache.
//
// The HotRowCache still maps ids to slots (the prepare stage uses it concurrently), but while
// training its row values are stale: Download brings the device rows back, e.g. before the hot
// set changes, and Upload installs a cache's rows after it changed. Not thread-safe: the
// trainer's compute thread owns it. In a build without CUDA, Create answers UNIMPLEMENTED.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/parallel.h"
#include "dense/backend.h"
#include "embedding/kernels.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"
#include "worker/batch.h"
#include "worker/collective.h"
#include "worker/gpu_allreducer.h"
#include "worker/hot_rows.h"

namespace dlrm::worker {

struct SparseWork;  // worker/trainer.h

struct GpuHotRowsOptions {
  std::vector<embedding::TableConfig> tables;  // every table has the same dim
  embedding::SparseOptimizerOptions optimizer;
  // Each table's pooling (JobSpec::TablePooling), one per table; empty: every table sums.
  std::vector<embedding::PoolingMode> poolings;
  // A CUDA backend (dense::cuda::CreateCudaBackend); not owned, must outlive this.
  dense::Backend* backend = nullptr;
  // Sum the hot rows' gradients over the workers: the device reducer when set, else the host
  // one; neither for a single worker. Not owned.
  DeviceAllReducer* device_reducer = nullptr;
  Collectives* host_reducer = nullptr;
  // Shares a step's host work (checking and laying out the bags); null = the calling thread.
  // Not owned; must outlive this.
  common::ParallelPool* pool = nullptr;
};

class GpuHotRows {
 public:
  // True in builds with CUDA (whether or not a device is present).
  static bool Available();
  // Starts with no hot rows (every row is cold). INVALID_ARGUMENT for a non-CUDA backend, tables
  // of different dims or poolings for another number of tables, UNIMPLEMENTED without CUDA.
  static absl::StatusOr<std::unique_ptr<GpuHotRows>> Create(const GpuHotRowsOptions& options);
  virtual ~GpuHotRows() = default;

  // Replaces the device rows with `cache`'s set and values (weights and optimizer state).
  // REQUIRES: no step in flight. RESOURCE_EXHAUSTED when the set does not fit; after any error no
  // set is installed (steps with hot rows then fail).
  virtual absl::Status Upload(const HotRowCache& cache) = 0;
  // Drops the device rows (every row is cold until the next Upload).
  virtual void Clear() = 0;
  // Writes the device rows' values into `cache`, which holds the set of the last Upload.
  virtual absl::Status Download(HotRowCache* cache) = 0;

  // Pools the batch's rows (work's cold rows and hot slots, Trainer::PrepareSparse/FetchRows)
  // into device_emb, laid out [batch x T x dim] (DlrmDenseModel's emb input), each table by its
  // pooling.
  virtual absl::Status Lookup(const Batch& batch, const SparseWork& work, float* device_emb) = 0;
  // Backward of the last Lookup (device_demb in its layout): fills work->grads with the cold ids
  // and their summed gradients times cold_scale, then applies the hot rows' gradients (summed
  // over the workers and divided by their number when there are several) at work->learning_rate.
  virtual absl::Status Backward(SparseWork* work, const float* device_demb, float cold_scale) = 0;
  virtual int64_t hot_rows() const = 0;
  virtual int64_t device_bytes() const = 0;
};

}  // namespace dlrm::worker
