// Trainer: DLRM training steps over an EmbeddingStore and a dense Backend. The same code runs in
// `dlrm train` (in-process store), in a distributed worker (gRPC parameter-server client plus an
// allreducer for the dense gradients) and in the pipelined worker, which runs the step's stages
// on their own threads:
//
//   PrepareSparse  dedup the batch's ids per table (TableRows requests + inverse indices)
//   FetchRows      EmbeddingStore::Lookup of the unique ids
//   Compute        pool, forward, loss, backward, allreduce dense grads, apply the dense
//                  optimizer, aggregate embedding gradients per unique id
//   PushGradients  EmbeddingStore::Push of the aggregated gradients
//
// Step() runs the four in order. Stage functions other than Compute touch only the
// SparseWork passed to them, so different batches' stages may run concurrently; Compute is
// called by one thread at a time, in step order.
//
// A single CPU worker over an in-process store (LocalEmbeddingStore, `dlrm train`) with nothing
// hot skips the copies: FetchRows only checks the ids, Compute pools straight from the store's
// tables and applies the sparse optimizer to them with the gradients summed per distinct id
// (embedding::PooledSparseUpdate), and PushGradients has nothing to send. The model is the same,
// bit for bit, as with the copies (which a caller that looks rows up itself, like the pipeline,
// still gets).
//
// With a CUDA backend the batch's dense features and labels are staged through pinned memory on
// a copy stream (GpuInputStager), and, when options.gpu_table_budget_bytes allows it (single
// worker only), every table lives in GPU memory (GpuEmbeddings): Compute pools straight into the
// backend's embedding input and applies the sparse optimizer on the device, PrepareSparse,
// FetchRows and PushGradients have nothing to do, and the store is neither read nor updated
// while training (CopyEmbeddingsToStore writes the tables back). Otherwise (the parameter
// servers, or tables too big for the device) the hot rows live in GPU memory (GpuHotRows): Compute
// uploads the batch's distinct cold rows, pools and aggregates gradients on the device and brings
// back only the cold rows' gradients for the push. A DeviceAllReducer (NCCL) sums the dense and
// hot-row gradients in device memory; otherwise they are staged to the host for `allreducer`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/parallel.h"
#include "dense/backend.h"
#include "dense/dlrm_model.h"
#include "embedding/cpu_kernels.h"
#include "embedding/dedup.h"
#include "embedding/embedding_store.h"
#include "embedding/kernels.h"
#include "embedding/local_store.h"
#include "server/ps_load_request.h"
#include "worker/batch.h"
#include "worker/collective.h"
#include "worker/dense_sync.h"
#include "worker/gpu_allreducer.h"
#include "worker/gpu_embeddings.h"
#include "worker/gpu_hot_rows.h"
#include "worker/gpu_input.h"
#include "worker/hot_rows.h"
#include "worker/hot_sync.h"
#include "worker/input/batch_reader.h"
#include "worker/powersgd.h"

namespace dlrm::worker {

// The sparse side of one batch as it moves through the stages.
// Per table, the batch's unique ids are split into cold ids (rows[t].ids, fetched from the store)
// and hot ids (hot_slots[t], read from the worker's HotRowCache); inverse[t][j] indexes the
// concatenation [cold ids..., hot ids...].
struct SparseWork {
  int64_t step = 0;
  // The sparse optimizer's rate for this step's updates: the job's schedule at the job's step
  // (common/lr_schedule.h), set by Compute; kTableLearningRate when the job has no schedule.
  float learning_rate = embedding::kTableLearningRate;
  std::vector<embedding::TableRows> rows;       // per table: unique cold ids, then their rows
  std::vector<std::vector<int32_t>> hot_slots;  // per table: cache slots of the unique hot ids
  std::vector<std::vector<int64_t>> inverse;    // per table: index into [cold..., hot...]
  std::vector<embedding::TableRows> grads;      // per table: cold ids and summed gradients
  int64_t ids = 0;                              // id occurrences in the batch
  int64_t hot_ids = 0;                          // of which hit the hot cache
  // Set by FetchRows when the rows are used where they live (Trainer::ReadsInPlace): rows[t]
  // then has no values, Compute pools from the store's tables and applies the sparse optimizer
  // to them itself, and leaves grads empty (PushGradients has nothing to send).
  bool in_place = false;
  std::vector<embedding::Deduplicator> dedup;  // per table: PrepareSparse's reusable state
};

// Running totals since the trainer was created.
struct TrainerCounters {
  int64_t samples = 0;
  int64_t ids = 0;         // id occurrences looked up
  int64_t hot_ids = 0;     // of which served by the hot cache
  int64_t store_rows = 0;  // unique rows fetched from plus pushed to the store
  // Payload bytes of those by formula, 2 x rows x (8-byte id + 4 x dim floats): what a store
  // call carries, not what a wire carries (a cluster job counts its gRPC bytes, rpc_bytes.h).
  int64_t store_payload_bytes_formula = 0;
  // Bytes this worker sent in collectives (Collectives::sent_bytes: the ring algorithm's
  // share of each payload): the dense gradients' allreduce, and the hot rows' exchange
  // (worker/hot_sync.h: counts, touched row indices, gradients).
  int64_t dense_sync_bytes = 0;
  int64_t hot_sync_bytes = 0;
  // Host seconds in the parts of Compute (with a CUDA backend, the time to enqueue the work, not
  // to run it): pooling the embeddings (the batch's lookups), the dense forward and backward,
  // the dense gradients' allreduce (overlapped with the backward: only the wait after it), the
  // dense optimizer, and the embedding gradients with the sparse update (hot rows' included).
  double pool_seconds = 0;
  double dense_seconds = 0;
  double allreduce_seconds = 0;
  double dense_optimizer_seconds = 0;
  double sparse_seconds = 0;
};

struct EvalMetrics {
  double auc = 0.5;
  double logloss = 0;
  double accuracy = 0;
  int64_t samples = 0;
};

struct TrainerOptions {
  common::JobSpec spec;
  // Not owned; must outlive the trainer.
  dense::Backend* backend = nullptr;
  embedding::EmbeddingStore* store = nullptr;
  Collectives* allreducer = nullptr;  // null: a single worker
  // CUDA backend only: sums the dense and hot-row gradients in device memory instead of
  // `allreducer` (which then only sets the number of workers; when null, this one does). Pass
  // the same NcclAllReducer for both. Not owned.
  DeviceAllReducer* device_allreducer = nullptr;
  // CUDA backend and a single worker (no allreducer): the tables live in GPU memory when they
  // take, with their optimizer state, at most this many bytes. 0 = never (the store serves the
  // rows); kGpuTablesAuto = when they fit in 80% of the device memory free at Create. When the
  // allocation fails anyway the trainer logs it and keeps the tables in the store.
  int64_t gpu_table_budget_bytes = 0;
  static constexpr int64_t kGpuTablesAuto = -1;
  // Memory the trainer may still fill (tests set it); -1: ask the machine (the CPU backend:
  // common::ReadMemoryInfo; CUDA: the device's free memory). Create refuses a model whose
  // parameters, optimizer state and batch-sized buffers need more, before allocating them (on
  // the CPU the kernel would kill the process while they are zeroed; on CUDA a failed allocation
  // is a CHECK).
  int64_t available_memory_bytes = -1;
  // Threads for the per-table work of a step (dedup, pooling, gradient aggregation) when a batch
  // has many ids; 0 = the machine's cores, 1 = the calling thread only.
  int threads = 0;
  // How the replicas of a hot row (worker/hot_rows.h) take the gradients of several workers.
  // kPerWorker: each worker's gradient is its own optimizer step, in rank order, as the
  // parameter servers apply each worker's push to a cold row, so a row trains the same whether
  // it is hot or cold. kSummed: one step with the mean over the workers (synchronous data
  // parallelism; what GPU hot rows do today, worker/gpu_hot_rows.h). The same for SGD; row-wise
  // Adagrad and Adam take larger steps per worker under kPerWorker.
  enum class HotUpdates { kPerWorker, kSummed };
  HotUpdates hot_updates = HotUpdates::kPerWorker;
  // CPU hot rows of a multi-worker job: a second set of collectives (its own connections) for
  // the hot rows' exchange, which then runs on a thread of its own while the next step computes
  // (overlapped): the exchange of step t is applied at the end of step t + 1, so a step reads
  // hot rows without the previous step's updates, one step stale as the parameter servers'
  // rows are with staleness >= 1. Null: the exchange runs on the compute thread and a step
  // reads every earlier update. Not owned.
  Collectives* hot_allreducer = nullptr;
  // CPU backend, several workers: the dense gradients' allreduce runs in buckets on a thread of
  // its own while the backward computes the layers below (worker/dense_sync.h), with the same
  // sums. False: one allreduce after the backward, on the compute thread.
  bool overlap_dense_allreduce = true;
};

// "B of the model's N dense parameters are inf or NaN after U updates: the model diverged (try
// lower ... learning_rate)": the words of every check of a diverged model.
std::string DivergedModel(int64_t bad, int64_t params, int64_t updates);

class Trainer {
 public:
  // Checks that the spec, the store's tables and the backend agree (INVALID_ARGUMENT naming the
  // mismatch) and builds the dense model with the spec's seed.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);
  ~Trainer();

  // One full training step; returns the batch's mean loss. FAILED_PRECONDITION naming the step
  // when the loss is not finite (the model diverged), here and from Compute.
  absl::StatusOr<float> Step(const Batch& batch);

  // --- the stages of Step ---
  // INVALID_ARGUMENT naming the mismatch when `batch` does not fit the model; PrepareSparse
  // requires a batch that passed it.
  absl::Status CheckBatch(const Batch& batch) const;
  void PrepareSparse(const Batch& batch, int64_t step, SparseWork* work) const;
  absl::Status FetchRows(SparseWork* work) const;
  absl::StatusOr<float> Compute(const Batch& batch, SparseWork* work);
  absl::Status PushGradients(const SparseWork& work) const;

  // True when the tables live in GPU memory (see the file comment).
  bool gpu_tables() const { return gpu_tables_ != nullptr; }
  // With GPU tables: writes every row with its optimizer state to the store (the store is not
  // updated while training). A no-op otherwise. REQUIRES: no step in flight.
  absl::Status CopyEmbeddingsToStore();
  // With GPU tables: replaces the device's rows by the store's (after a checkpoint was restored
  // into the store). A no-op otherwise. REQUIRES: no step in flight.
  absl::Status LoadEmbeddingsFromStore();

  // Runs the model without updating anything over every batch of `reader` (from its current
  // position) and returns AUC, logloss and accuracy.
  absl::StatusOr<EvalMetrics> Evaluate(BatchReader* reader);
  // FAILED_PRECONDITION (DivergedModel's words) when a dense parameter is inf or NaN. Training
  // checks it every kFiniteCheckSteps steps and before every evaluation: a diverged model's loss
  // can stay finite (a ReLU turns NaN into 0), and a run went on to its end on a model all of
  // whose parameters were NaN, evaluating it at AUC 0.5 all along.
  absl::Status CheckDenseParamsFinite();
  static constexpr int64_t kFiniteCheckSteps = 100;
  // The click probability of every sample of every batch of `reader` (from its current position),
  // in order, and their labels.
  absl::Status Predict(BatchReader* reader, std::vector<float>* scores, std::vector<float>* labels);

  // With an overlapped hot-row exchange (TrainerOptions::hot_allreducer): waits for the one in
  // flight and applies it, so the hot rows hold every step's updates. Evaluate, Predict,
  // SetHotRows and MigrateHotSet do it themselves; call it before reading hot_rows() (a
  // checkpoint) and at the end of training. A no-op otherwise. Every rank must call it at the
  // same step boundary (it applies, it does not communicate). REQUIRES: no step in flight.
  absl::Status DrainHotExchange();

  // Replicates the rows of `cache` on this worker from the next step on; their gradients are
  // summed over the workers (when there is an allreducer) and applied locally. Every worker of a
  // job installs the same hot set at the same step. REQUIRES: no step in flight.
  absl::Status SetHotRows(std::unique_ptr<HotRowCache> cache);
  // Changes the hot set to `hot_ids` without losing an update: rows leaving the cache are
  // written to the store with their optimizer state (when `write_back`; in a multi-worker job
  // one rank writes, after a barrier), rows joining it are read from the store. REQUIRES: no
  // step in flight and every push of every worker completed.
  absl::Status MigrateHotSet(const std::vector<std::vector<int64_t>>& hot_ids, bool write_back);
  // The hot set. With GPU hot rows (gpu_hot_rows()) its values are those of the last migration
  // or SyncHotRowsToHost, not the trained ones; its ids and slots are always current.
  const HotRowCache* hot_rows() const { return hot_.get(); }

  // The rates of the latest step (the job's optimizer.schedule at its step; without one, or
  // before the first step, the optimizers' own).
  struct LearningRates {
    float dense = 0.0f;
    float sparse = 0.0f;
  };
  LearningRates learning_rates() const {
    return {.dense = model_->optimizer().options().learning_rate,
            .sparse = last_sparse_learning_rate_};
  }
  // True when the hot rows live in GPU memory (a CUDA backend without GPU tables).
  bool gpu_hot_rows() const { return gpu_hot_ != nullptr; }
  // With GPU hot rows: copies their trained values into hot_rows(). A no-op otherwise.
  // REQUIRES: no step in flight.
  absl::Status SyncHotRowsToHost();
  // Called by PrepareSparse with every training batch (on the pipeline's prepare thread, off the
  // compute thread's critical path), e.g. to count ids for re-checking the hot set. Set before
  // training starts.
  void set_batch_observer(std::function<void(const Batch&, int64_t step)> observer) {
    batch_observer_ = std::move(observer);
  }
  // A snapshot; any thread may call it while another trains.
  TrainerCounters counters() const {
    return {counters_.samples.load(),
            counters_.ids.load(),
            counters_.hot_ids.load(),
            counters_.store_rows.load(),
            counters_.store_bytes.load(),
            counters_.dense_sync_bytes.load(),
            counters_.hot_sync_bytes.load(),
            1e-9 * static_cast<double>(counters_.pool_ns.load()),
            1e-9 * static_cast<double>(counters_.dense_ns.load()),
            1e-9 * static_cast<double>(counters_.allreduce_ns.load()),
            1e-9 * static_cast<double>(counters_.dense_optimizer_ns.load()),
            1e-9 * static_cast<double>(counters_.sparse_ns.load())};
  }

  int64_t steps_done() const { return steps_done_; }
  // After loading a checkpoint: the steps it had taken. REQUIRES: no step in flight.
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  // training.dense_sync_compression powersgd's state (CPU workers of several); null otherwise.
  PowerSgdAllReducer* powersgd() { return powersgd_.get(); }
  dense::Backend* backend() const { return options_.backend; }
  dense::DlrmDenseModel& model() { return *model_; }
  const common::JobSpec& spec() const { return options_.spec; }

 private:
  explicit Trainer(const TrainerOptions& options);
  // PrepareSparse without the batch observer (evaluation batches are not counted).
  void SplitSparse(const Batch& batch, int64_t step, SparseWork* work) const;
  // Pools the fetched rows of every table (or, work.in_place, the store's rows) into the model's
  // embedding input.
  void Pool(const Batch& batch, const SparseWork& work);
  // True when FetchRows leaves the rows in the store for Compute to read and update in place:
  // the store's tables are in this process (a LocalEmbeddingStore), the dense model runs on the
  // CPU, nothing is hot and this is the only worker. Copying the batch's distinct rows out and
  // their gradients back in then costs as much as the dense model's GEMMs for wide rows.
  bool ReadsInPlace() const;
  // work.in_place: each table's gradient, summed per distinct id, applied straight to its rows.
  void ApplyGradientsInPlace(const Batch& batch, const SparseWork& work);
  // The job's learning-rate schedule at this step: sets the dense optimizer's rate and
  // work->learning_rate (nothing without a schedule).
  void ScheduleLearningRates(SparseWork* work);
  // Rows of table t in [cold..., hot...] order: the fetched rows alone when nothing is hot.
  const float* CombinedRows(const SparseWork& work, int t);
  // Runs fn(t) for every table, on the pool when the batch has at least kParallelMinIds ids.
  void ForEachTable(int64_t total_ids, const std::function<void(int)>& fn) const;
  // Sums the hot rows' gradients over the workers and applies them (overlapped: applies the
  // previous step's exchange and starts this step's).
  absl::Status ApplyHotGradients(float learning_rate);
  // Applies hot_gathered_ (the exchange's output) to the hot rows.
  void ApplyGatheredHotGradients(float learning_rate);
  // Lets the overlapped exchange in flight apply its gradients: the hot rows' values are no
  // longer read until the next step's Pool, which comes after DrainHotExchange.
  void AllowHotApply();
  void SumGatheredHotGradients();
  // Averages the dense gradients over the workers (no-op for a single worker).
  absl::Status AllReduceDenseGradients();
  // Sets up input staging and GPU tables when the budget allows, else GPU hot rows (CUDA
  // backend only).
  absl::Status InitGpu();
  // Creates gpu_tables_ when the tables fit options_.gpu_table_budget_bytes; leaves it null
  // otherwise.
  absl::Status InitGpuTables();
  // Counters and step count at the end of Compute, once work->grads holds the cold gradients.
  void FinishStep(const Batch& batch, const SparseWork& work);
  // The model's loss of the step just computed, or FAILED_PRECONDITION when it is not finite,
  // or, every kFiniteCheckSteps steps, when a dense parameter is not (CheckDenseParamsFinite).
  absl::StatusOr<float> TakeTrainLoss(int64_t step);

  TrainerOptions options_;
  int num_tables_ = 0;
  int dim_ = 0;
  // The spec's learning rates, which the job's schedule scales step by step.
  float dense_learning_rate_ = 0.0f;
  float sparse_learning_rate_ = 0.0f;
  float last_sparse_learning_rate_ = 0.0f;        // learning_rates()
  std::vector<embedding::PoolingMode> poolings_;  // per table
  std::unique_ptr<dense::DlrmDenseModel> model_;
  std::unique_ptr<embedding::EmbeddingKernels> kernels_;  // host-side pooling
  embedding::LocalEmbeddingStore* local_ = nullptr;       // the store, when it is in-process
  std::vector<embedding::PooledSparseUpdate> updates_;    // per table, with local_
  SparseWork step_work_;                                  // Step()'s, reused

  // The embedding input and its gradient, CPU backend only (a CUDA trainer pools on the device).
  std::vector<float> emb_host_;   // [max_batch x T x dim]
  std::vector<float> demb_host_;  // [max_batch x T x dim]
  // Backend buffers for the batch; null on the CPU backend, which reads host memory directly.
  // (Training inputs come from input_stager_; dense_dev_ serves Evaluate.)
  float* dense_dev_ = nullptr;
  float* emb_dev_ = nullptr;
  float* demb_dev_ = nullptr;
  float* probs_dev_ = nullptr;
  std::vector<float> grads_host_;     // dense gradients staged for the allreduce (non-CPU backends)
  std::vector<uint16_t> dense_wire_;  // dense gradients in bf16 (training.dense_sync_dtype)
  std::unique_ptr<GpuInputStager> input_stager_;  // CUDA backend: dense features and labels
  std::unique_ptr<GpuEmbeddings> gpu_tables_;     // CUDA backend: tables in device memory
  std::unique_ptr<GpuHotRows> gpu_hot_;           // CUDA backend without gpu_tables_
  std::unique_ptr<HotRowCache> hot_;
  std::function<void(const Batch&, int64_t step)> batch_observer_;
  std::vector<std::vector<float>> combined_;        // per table: [cold..., hot...] rows (hot path)
  std::vector<std::vector<float>> combined_grads_;  // per table: [cold + hot unique x dim]
  // Below this many ids a thread hand-off costs more than the per-table work it would share.
  static constexpr int64_t kParallelMinIds = 16384;
  std::unique_ptr<common::ParallelPool> pool_;
  // TrainerOptions::overlap_dense_allreduce where it applies (CPU backend, world > 1).
  std::unique_ptr<DenseGradientSync> dense_sync_;
  // training.dense_sync_compression: powersgd (CPU backend, world > 1).
  std::unique_ptr<PowerSgdAllReducer> powersgd_;
  // Per table, this step's hot rows: (slot, h) with the row's gradient at
  // combined_grads_[t][(hot_first_[t] + h) * dim] (a batch's hot slots are distinct).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> hot_touched_;
  std::vector<size_t> hot_first_;
  HotRowGradients hot_local_;          // the exchange's input
  GatheredHotGradients hot_gathered_;  // and its output
  HotRowGradients hot_summed_;         // HotUpdates::kSummed: the sums
  std::vector<uint8_t> hot_marked_;    // and the rows listed in them
  std::vector<float> hot_sum_acc_;     // kSummed: where they are summed (zero between uses)
  HotGradientExchange hot_exchange_;
  // The overlapped exchange in flight (joinable) and its outcome: it reads hot_local_, writes
  // hot_gathered_, hot_exchange_, hot_summed_, hot_marked_, hot_sum_acc_ and these two, and
  // once the next step has pooled (hot_may_apply_) applies the gradients to the hot rows'
  // values, which nothing else reads until the step after (the next Pool, or a drain).
  std::thread hot_thread_;
  absl::Status hot_thread_status_;
  int64_t hot_thread_sent_ = 0;
  absl::Mutex hot_mu_;
  bool hot_may_apply_ ABSL_GUARDED_BY(hot_mu_) = true;
  // The hot exchange's gradients travel in the tables' dtype when they all share a half one
  // (as their cold rows' gradients do to the parameter servers); fp32 otherwise.
  HotWire hot_wire_ = HotWire::kFp32;  // the hot-row exchange's format
  struct AtomicCounters {
    std::atomic<int64_t> samples{0}, ids{0}, hot_ids{0}, store_rows{0}, store_bytes{0};
    std::atomic<int64_t> dense_sync_bytes{0}, hot_sync_bytes{0};
    // TrainerCounters' *_seconds, in nanoseconds.
    std::atomic<int64_t> pool_ns{0}, dense_ns{0}, allreduce_ns{0}, dense_optimizer_ns{0},
        sparse_ns{0};
  };
  AtomicCounters counters_;
  int64_t steps_done_ = 0;
};

// Builds the options of the in-process pieces from a job spec.
dense::DlrmDenseModelOptions DenseModelOptionsFromSpec(const common::JobSpec& spec);
// The sparse optimizer and the tables (server/ps_load_request.h: the parameter servers' LoadJob
// takes them from the spec the same way).
using server::SparseOptimizerFromSpec;
using server::TableConfigsFromSpec;

}  // namespace dlrm::worker
