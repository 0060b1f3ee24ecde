#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/memory_info.h"
#include "common/parallel.h"
#include "common/status.h"
#include "dense/metrics.h"
#include "embedding/cpu_kernels.h"
#include "embedding/row_dtype.h"
#include "embedding/table_config.h"
#ifdef DLRM_WITH_CUDA
#include "dense/cuda/cuda_backend.h"
#endif

namespace dlrm::worker {

dense::DlrmDenseModelOptions DenseModelOptionsFromSpec(const common::JobSpec& spec) {
  dense::DlrmDenseModelOptions o;
  o.num_dense_features = spec.dense_features;
  o.bottom_widths = spec.bottom_mlp;
  o.top_widths = spec.top_mlp;
  o.num_tables = static_cast<int>(spec.tables.size());
  o.embedding_dim = spec.embedding_dim;
  o.interaction =
      spec.interaction == "dcnv2" ? dense::Interaction::kDcnV2 : dense::Interaction::kDot;
  o.cross_layers = spec.cross_layers;
  o.low_rank = spec.low_rank;
  o.max_batch_size = spec.batch_size;
  o.seed = spec.seed;
  auto type = dense::ParseDenseOptimizerType(spec.dense_optimizer.type);
  o.optimizer.type = type.ok() ? *type : dense::DenseOptimizerType::kSgd;
  o.optimizer.learning_rate = static_cast<float>(spec.dense_optimizer.learning_rate);
  o.optimizer.beta1 = static_cast<float>(spec.dense_optimizer.beta1);
  o.optimizer.beta2 = static_cast<float>(spec.dense_optimizer.beta2);
  o.optimizer.epsilon = static_cast<float>(spec.dense_optimizer.epsilon);
  o.optimizer.weight_decay = static_cast<float>(spec.dense_optimizer.weight_decay);
  return o;
}

Trainer::Trainer(const TrainerOptions& options) : options_(options) {
  // One reducer decides the number of workers for every scaling (dense, hot and cold rows).
  if (options_.allreducer == nullptr) options_.allreducer = options_.device_allreducer;
  const std::vector<embedding::TableConfig> tables = TableConfigsFromSpec(options_.spec);
  if (!tables.empty() &&
      std::all_of(tables.begin(), tables.end(), [&](const embedding::TableConfig& t) {
        return t.dtype == tables.front().dtype;
      })) {
    hot_wire_ = HotWireFor(tables.front().dtype);
  }
  // The spec was validated: the name parses.
  if (!options_.spec.hot_sync_dtype.empty()) {
    hot_wire_ = *ParseHotWire(options_.spec.hot_sync_dtype);
  }
  dense_learning_rate_ = static_cast<float>(options_.spec.dense_optimizer.learning_rate);
  sparse_learning_rate_ = static_cast<float>(options_.spec.sparse_optimizer.learning_rate);
  last_sparse_learning_rate_ = sparse_learning_rate_;
}

Trainer::~Trainer() {
  // An exchange in flight ends with its collective (or its timeout when a peer is gone).
  if (hot_thread_.joinable()) {
    AllowHotApply();
    hot_thread_.join();
  }
  // They may still have work queued that reads the buffers below.
  gpu_tables_.reset();
  gpu_hot_.reset();
  input_stager_.reset();
  dense::Backend* b = options_.backend;
  for (float* p : {dense_dev_, emb_dev_, demb_dev_, probs_dev_}) {
    if (p != nullptr) b->Deallocate(p);
  }
}

namespace {

// RESOURCE_EXHAUSTED when the trainer's dense model (DlrmDenseModel::MemoryFloats) and its batch
// buffers need more memory than is available: host memory on the CPU, the device's free memory
// on CUDA (where an allocation that fails is a CHECK, which ends the process).
absl::Status CheckStepFitsInMemory(const TrainerOptions& options, size_t emb_floats) {
  const common::JobSpec& spec = options.spec;
  const int64_t model_bytes = static_cast<int64_t>(
      dense::DlrmDenseModel::MemoryFloats(DenseModelOptionsFromSpec(spec)) * sizeof(float));
  const bool cpu = options.backend->device() == dense::Device::kCpu;
  // The CPU trainer's pooled embeddings and their gradients; on CUDA those and the dense input
  // and the probabilities, in device memory.
  const int64_t emb_bytes = static_cast<int64_t>(
      (2 * emb_floats +
       (cpu ? 0 : static_cast<size_t>(spec.batch_size) * (spec.dense_features + 1))) *
      sizeof(float));
  const int64_t needed = model_bytes + emb_bytes;
  common::MemoryInfo info;
  int64_t available = options.available_memory_bytes;
  std::string where;
  if (available < 0 && cpu) {
    info = common::ReadMemoryInfo();
    available = info.AvailableBytes();
    where = absl::StrCat(" (", info.Describe(), ")");
  } else if (available < 0) {
#ifdef DLRM_WITH_CUDA
    absl::StatusOr<dense::cuda::DeviceMemoryInfo> device =
        dense::cuda::DeviceMemoryOf(*options.backend);
    if (device.ok()) {
      available = static_cast<int64_t>(device->free_bytes);
      where = absl::StrCat(" on the CUDA device (", common::FormatBytes(device->total_bytes),
                           " in all)");
    }
#endif
  }
  if (available < 0 || needed <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a training step of ", spec.batch_size, " samples needs ", needed, " bytes (",
      common::FormatBytes(needed),
      ": the dense model's parameters, optimizer state and work "
      "buffers for that batch ",
      common::FormatBytes(model_bytes), ", the pooled embeddings and their gradients ",
      common::FormatBytes(emb_bytes), ") and this process has ", available, " bytes (",
      common::FormatBytes(available), ") of memory available", where,
      ": lower training.batch_size, or the widths of model.bottom_mlp and model.top_mlp"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  if (options.backend == nullptr || options.store == nullptr) {
    return absl::InvalidArgumentError("trainer needs a backend and an embedding store");
  }
  const common::JobSpec& spec = options.spec;
  const auto& tables = options.store->tables();
  if (tables.size() != spec.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec has ", spec.tables.size(),
                                                   " tables but the embedding store has ",
                                                   tables.size()));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].rows != spec.tables[t].rows || tables[t].dim != spec.embedding_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", t, " (", spec.tables[t].name, "): job spec says ", spec.tables[t].rows, " x ",
          spec.embedding_dim, " but the store has ", tables[t].rows, " x ", tables[t].dim));
    }
  }
  if (spec.dense_sync_dtype == "bf16" && options.device_allreducer != nullptr) {
    return absl::UnimplementedError(
        "training.dense_sync_dtype bf16 applies to CPU workers' allreduce (Gloo); GPU workers "
        "allreduce their dense gradients in fp32 over NCCL (bf16 there is planned): use fp32");
  }
  if (spec.dense_sync_compression == "powersgd" &&
      options.backend->device() != dense::Device::kCpu &&
      (options.allreducer != nullptr || options.device_allreducer != nullptr)) {
    return absl::UnimplementedError(
        "training.dense_sync_compression powersgd applies to CPU workers' allreduce; GPU workers "
        "allreduce their dense gradients uncompressed (PowerSGD there is planned): use none");
  }
  if (spec.hot_sync_dtype == "fp8" && options.backend->device() != dense::Device::kCpu &&
      (options.allreducer != nullptr || options.device_allreducer != nullptr)) {
    return absl::UnimplementedError(
        "training.hot_sync_dtype fp8 applies to CPU workers' hot-row exchange; GPU workers sum "
        "their hot rows' gradients in fp32 (fp8 there is planned): leave it unset");
  }
  const size_t emb_floats = static_cast<size_t>(spec.batch_size) * tables.size() *
                            static_cast<size_t>(spec.embedding_dim);
  DLRM_RETURN_IF_ERROR(CheckStepFitsInMemory(options, emb_floats));
  std::unique_ptr<Trainer> trainer(new Trainer(options));
  trainer->num_tables_ = static_cast<int>(tables.size());
  trainer->dim_ = spec.embedding_dim;
  for (int t = 0; t < trainer->num_tables_; ++t) {
    trainer->poolings_.push_back(spec.TablePooling(t) == "mean" ? embedding::PoolingMode::kMean
                                                                : embedding::PoolingMode::kSum);
  }
  DLRM_ASSIGN_OR_RETURN(trainer->model_, dense::DlrmDenseModel::Create(
                                             options.backend, DenseModelOptionsFromSpec(spec)));
  trainer->kernels_ = embedding::CreateCpuKernels();
  trainer->local_ = options.store->AsLocal();
  if (trainer->local_ != nullptr) trainer->updates_.resize(trainer->num_tables_);
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads > 1) trainer->pool_ = std::make_unique<common::ParallelPool>(threads - 1);
  if (options.backend->device() == dense::Device::kCpu) {
    // The CPU backend reads and writes the embedding input in host memory; a CUDA trainer pools
    // on the device (GPU tables or GPU hot rows) and never needs them.
    if (options.device_allreducer != nullptr) {
      return absl::InvalidArgumentError("a device allreducer needs a CUDA backend");
    }
    trainer->emb_host_.resize(emb_floats);
    trainer->demb_host_.resize(emb_floats);
    const bool several = options.allreducer != nullptr && options.allreducer->world_size() > 1;
    if (spec.dense_sync_compression == "powersgd" && several) {
      trainer->powersgd_ = std::make_unique<PowerSgdAllReducer>(
          options.allreducer, options.backend, trainer->model_->WeightMatrices(),
          trainer->model_->num_params(), spec.powersgd_rank, spec.seed + 0x5067);
    } else if (options.overlap_dense_allreduce && several) {
      trainer->dense_sync_ =
          std::make_unique<DenseGradientSync>(options.allreducer, spec.dense_sync_dtype == "bf16");
    }
  } else {
    dense::Backend* b = options.backend;
    trainer->dense_dev_ = b->Allocate(static_cast<size_t>(spec.batch_size) * spec.dense_features);
    trainer->emb_dev_ = b->Allocate(emb_floats);
    trainer->demb_dev_ = b->Allocate(emb_floats);
    trainer->probs_dev_ = b->Allocate(spec.batch_size);
    if (options.allreducer != nullptr && options.device_allreducer == nullptr) {
      trainer->grads_host_.resize(trainer->model_->num_params());
    }
    DLRM_RETURN_IF_ERROR(trainer->InitGpu());
  }
  return trainer;
}

absl::Status Trainer::InitGpu() {
  dense::Backend* b = options_.backend;
  const common::JobSpec& spec = options_.spec;
  DLRM_ASSIGN_OR_RETURN(input_stager_,
                        GpuInputStager::Create(b, spec.batch_size, spec.dense_features));
  DLRM_RETURN_IF_ERROR(InitGpuTables());
  if (gpu_tables_ != nullptr) return absl::OkStatus();
  GpuHotRowsOptions hot;
  hot.tables = options_.store->tables();
  DLRM_ASSIGN_OR_RETURN(hot.optimizer, SparseOptimizerFromSpec(spec));
  hot.poolings = poolings_;
  hot.backend = b;
  hot.device_reducer = options_.device_allreducer;
  hot.host_reducer = options_.allreducer;
  hot.pool = pool_.get();
  DLRM_ASSIGN_OR_RETURN(gpu_hot_, GpuHotRows::Create(hot));
  if (options_.allreducer != nullptr && options_.allreducer->world_size() > 1 &&
      options_.hot_updates == TrainerOptions::HotUpdates::kPerWorker) {
    DLRM_LOG(WARNING) << "GPU hot rows apply the workers' summed gradient, one step per row "
                         "(HotUpdates::kSummed): with an adaptive sparse optimizer they train "
                         "differently from the same rows on the parameter servers";
  }
  return absl::OkStatus();
}

absl::Status Trainer::InitGpuTables() {
  dense::Backend* b = options_.backend;
  const common::JobSpec& spec = options_.spec;
  int64_t budget = options_.gpu_table_budget_bytes;
  if (budget == 0) return absl::OkStatus();
  if (options_.allreducer != nullptr || options_.device_allreducer != nullptr) {
    // Each worker would train its own copy of the tables: they stay in the store.
    return absl::OkStatus();
  }
  DLRM_ASSIGN_OR_RETURN(embedding::SparseOptimizerOptions optimizer, SparseOptimizerFromSpec(spec));
  const int64_t bytes = GpuEmbeddings::DeviceBytes(options_.store->tables(), optimizer.type);
  if (budget == TrainerOptions::kGpuTablesAuto) {
#ifdef DLRM_WITH_CUDA
    DLRM_ASSIGN_OR_RETURN(dense::cuda::DeviceMemoryInfo memory, dense::cuda::DeviceMemoryOf(*b));
    budget = static_cast<int64_t>(memory.free_bytes / 5 * 4);
#else
    budget = 0;
#endif
  }
  if (bytes > budget) {
    DLRM_LOG(INFO) << "embedding tables (" << bytes
                   << " bytes with optimizer state) exceed the GPU "
                   << "table budget of " << budget << " bytes: they stay in host memory";
    return absl::OkStatus();
  }
  GpuEmbeddingsOptions gpu_options;
  gpu_options.tables = options_.store->tables();
  gpu_options.optimizer = optimizer;
  gpu_options.seed = spec.seed;
  gpu_options.poolings = poolings_;
  gpu_options.backend = b;
  gpu_options.init_threads = options_.threads;
  gpu_options.pool = pool_.get();
  absl::StatusOr<std::unique_ptr<GpuEmbeddings>> gpu = GpuEmbeddings::Create(gpu_options);
  if (gpu.status().code() == absl::StatusCode::kResourceExhausted) {
    DLRM_LOG(WARNING) << "embedding tables do not fit on the GPU (" << gpu.status().message()
                      << "): they stay in host memory";
    return absl::OkStatus();
  }
  DLRM_RETURN_IF_ERROR(gpu.status());
  gpu_tables_ = std::move(gpu).value();
  DLRM_LOG(INFO) << num_tables_ << " embedding tables (" << bytes
                 << " bytes with optimizer state) live in GPU memory";
  return absl::OkStatus();
}

absl::Status Trainer::CopyEmbeddingsToStore() {
  if (gpu_tables_ == nullptr) return absl::OkStatus();
  return gpu_tables_->CopyToStore(options_.store);
}

absl::Status Trainer::LoadEmbeddingsFromStore() {
  if (gpu_tables_ == nullptr) return absl::OkStatus();
  return gpu_tables_->CopyFromStore(options_.store);
}

absl::Status Trainer::CheckBatch(const Batch& batch) const {
  const common::JobSpec& spec = options_.spec;
  if (batch.size <= 0 || batch.size > spec.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", batch.size, " samples; expected 1..", spec.batch_size));
  }
  if (batch.num_dense != spec.dense_features ||
      batch.dense.size() != static_cast<size_t>(batch.size) * spec.dense_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has ", batch.num_dense, " dense features; the model expects ", spec.dense_features));
  }
  if (batch.sparse.size() != static_cast<size_t>(num_tables_)) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", batch.sparse.size(),
                                                   " sparse features; the model has ", num_tables_,
                                                   " tables"));
  }
  for (int t = 0; t < num_tables_; ++t) {
    if (batch.sparse[t].offsets.size() != static_cast<size_t>(batch.size) + 1) {
      return absl::InvalidArgumentError(absl::StrCat("table ", t, ": ",
                                                     batch.sparse[t].offsets.size(),
                                                     " offsets for ", batch.size, " samples"));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::AllReduceDenseGradients() {
  if (options_.allreducer == nullptr && options_.device_allreducer == nullptr) {
    return absl::OkStatus();
  }
  // Each rank's gradient is of its own mean loss: average them so every replica applies the
  // same update as one worker with the union of the batches.
  dense::Backend* b = options_.backend;
  const size_t n = model_->num_params();
  float* grads = model_->grads();
  if (options_.device_allreducer != nullptr) {
    // Summed where they are, ordered on the backend's stream: no host round trip.
    DeviceAllReducer* reducer = options_.device_allreducer;
    DLRM_RETURN_IF_ERROR(reducer->AllReduceSumDevice(grads, n));
#ifdef DLRM_WITH_CUDA
    return dense::cuda::ScaleOnDevice(*b, grads, n,
                                      1.0f / static_cast<float>(reducer->world_size()));
#else
    return absl::InternalError("a device allreducer in a build without CUDA");
#endif
  }
  if (emb_dev_ != nullptr) {
    b->CopyToHost(grads, grads_host_.data(), n);
    grads = grads_host_.data();
  }
  const int64_t sent_before = options_.allreducer->sent_bytes();
  // The job's steps so far: the optimizer's count is restored with a checkpoint, while a resumed
  // cluster job numbers steps_done_ from 0 again.
  if (powersgd_ != nullptr && model_->optimizer().step() >= options_.spec.powersgd_warmup_steps) {
    DLRM_RETURN_IF_ERROR(powersgd_->AllReduceMean(grads));  // the mean, approximated
  } else {
    const bool bf16 = options_.spec.dense_sync_dtype == "bf16";
    if (bf16) dense_wire_.resize(n);
    DLRM_RETURN_IF_ERROR(
        AllReduceDenseMean(options_.allreducer, bf16, grads, n, dense_wire_.data()));
  }
  counters_.dense_sync_bytes += options_.allreducer->sent_bytes() - sent_before;
  if (emb_dev_ != nullptr) b->CopyFromHost(grads_host_.data(), model_->grads(), n);
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::Compute(const Batch& batch, SparseWork* work) {
  DLRM_RETURN_IF_ERROR(CheckBatch(batch));
  // Each part's host seconds go to its counter (TrainerCounters).
  auto mark = std::chrono::steady_clock::now();
  auto lap = [&mark](std::atomic<int64_t>* ns) {
    const auto now = std::chrono::steady_clock::now();
    *ns += std::chrono::duration_cast<std::chrono::nanoseconds>(now - mark).count();
    mark = now;
  };
  const float* dense_in = batch.dense.data();
  const float* labels = batch.labels.data();
  const float* emb = emb_host_.data();
  float* demb = demb_host_.data();
  if (gpu_tables_ != nullptr) {
    DLRM_RETURN_IF_ERROR(gpu_tables_->Lookup(batch, emb_dev_));
  } else if (gpu_hot_ != nullptr) {
    DLRM_RETURN_IF_ERROR(gpu_hot_->Lookup(batch, *work, emb_dev_));
  } else {
    Pool(batch, *work);
    // The hot rows' values are read: the previous step's exchange may update them now.
    if (hot_thread_.joinable()) AllowHotApply();
  }
  lap(&counters_.pool_ns);
  GpuInputStager::Staged staged;
  if (emb_dev_ != nullptr) {
    DLRM_ASSIGN_OR_RETURN(staged, input_stager_->Stage(batch));
    dense_in = staged.dense;
    labels = staged.labels;
    emb = emb_dev_;
    demb = demb_dev_;
  }
  dense::GradientsReady ready;
  const int64_t dense_sync_sent_before = dense_sync_ != nullptr ? dense_sync_->sent_bytes() : 0;
  if (dense_sync_ != nullptr) {
    // The dense allreduce starts with the top layers' gradients while the backward goes on.
    dense_sync_->Begin(model_->grads(), model_->num_params());
    ready = [this](const float* g, size_t count) { dense_sync_->Ready(g, count); };
  }
  // The loss is taken at the end: the optimizers are queued behind the backward, not after a
  // wait for the device.
  model_->StartTrainStep(dense_in, emb, labels, batch.size, demb, ready);
  if (emb_dev_ != nullptr) {
    // TrainStep was the last reader of the staged inputs.
    DLRM_RETURN_IF_ERROR(input_stager_->Release(staged));
  }
  lap(&counters_.dense_ns);
  if (dense_sync_ != nullptr) {
    // What is left of the allreduce after the backward (the time counted here).
    DLRM_RETURN_IF_ERROR(dense_sync_->Finish());
    counters_.dense_sync_bytes += dense_sync_->sent_bytes() - dense_sync_sent_before;
  } else {
    DLRM_RETURN_IF_ERROR(AllReduceDenseGradients());
  }
  lap(&counters_.allreduce_ns);
  ScheduleLearningRates(work);
  model_->ApplyOptimizer();
  lap(&counters_.dense_optimizer_ns);
  absl::Cleanup sparse_time = [&] { lap(&counters_.sparse_ns); };

  if (gpu_tables_ != nullptr) {
    DLRM_RETURN_IF_ERROR(gpu_tables_->ApplyGradients(demb_dev_, work->learning_rate));
    work->grads.assign(num_tables_, {});
    FinishStep(batch, *work);
    return TakeTrainLoss(work->step);
  }

  // Embedding gradients, summed over duplicate ids. Scaled by 1/world so that, like the dense
  // gradients, a row's update is the gradient of the mean loss over all workers' samples (hot
  // rows are summed by the allreduce and scaled there).
  const int world = options_.allreducer ? options_.allreducer->world_size() : 1;
  if (gpu_hot_ != nullptr) {
    DLRM_RETURN_IF_ERROR(gpu_hot_->Backward(work, demb_dev_, 1.0f / static_cast<float>(world)));
    FinishStep(batch, *work);
    return TakeTrainLoss(work->step);
  }
  if (work->in_place) {
    ApplyGradientsInPlace(batch, *work);
    work->grads.clear();
    FinishStep(batch, *work);
    return TakeTrainLoss(work->step);
  }
  const int64_t stride = static_cast<int64_t>(num_tables_) * dim_;
  work->grads.resize(num_tables_);
  combined_grads_.resize(num_tables_);
  // Tables write their own gradient buffers and hot-row lists.
  ForEachTable(work->ids, [&](int t) {
    embedding::TableRows& g = work->grads[t];
    g.table = t;
    g.ids = work->rows[t].ids;
    const size_t cold = g.ids.size();
    const size_t hot = work->hot_slots[t].size();
    float* out = nullptr;
    if (hot == 0) {
      g.values.resize(cold * dim_);
      out = g.values.data();
    } else {
      combined_grads_[t].resize((cold + hot) * dim_);
      out = combined_grads_[t].data();
    }
    kernels_->PooledScatterGrad(demb_host_.data() + static_cast<int64_t>(t) * dim_, stride, dim_,
                                work->inverse[t].data(), batch.sparse[t].offsets.data(), batch.size,
                                poolings_[t], static_cast<int64_t>(cold + hot), out);
    if (hot > 0) {
      g.values.assign(out, out + cold * dim_);
      // The hot rows' gradients stay where the scatter put them, after the cold ones, until
      // ApplyHotGradients packs them (a batch's hot slots are distinct: one per unique id).
      std::vector<std::pair<int32_t, int32_t>>& touched = hot_touched_[t];
      touched.resize(hot);
      for (size_t h = 0; h < hot; ++h)
        touched[h] = {work->hot_slots[t][h], static_cast<int32_t>(h)};
      hot_first_[t] = cold;
    }
    if (world > 1) {
      const float scale = 1.0f / static_cast<float>(world);
      for (float& v : g.values) v *= scale;
    }
  });
  DLRM_RETURN_IF_ERROR(ApplyHotGradients(work->learning_rate));
  FinishStep(batch, *work);
  return TakeTrainLoss(work->step);
}

void Trainer::FinishStep(const Batch& batch, const SparseWork& work) {
  // The cold ids are those fetched and pushed (or, in place, read and updated in the store).
  int64_t cold_rows = 0;
  for (const auto& r : work.rows) cold_rows += static_cast<int64_t>(r.ids.size());
  counters_.samples += batch.size;
  counters_.ids += work.ids;
  counters_.hot_ids += work.hot_ids;
  counters_.store_rows += 2 * cold_rows;  // fetched, then pushed
  counters_.store_bytes += 2 * cold_rows * (8 + 4 * static_cast<int64_t>(dim_));
  ++steps_done_;
}

absl::Status Trainer::CheckDenseParamsFinite() {
  const float* params = model_->params();
  const size_t count = model_->num_params();
  constexpr size_t kChunk = 1 << 20;  // floats: a bounded host copy, however large the model
  std::vector<float> chunk(std::min(count, kChunk));
  int64_t bad = 0;
  for (size_t at = 0; at < count; at += kChunk) {
    const size_t n = std::min(kChunk, count - at);
    backend()->CopyToHost(params + at, chunk.data(), n);
    backend()->Synchronize();
    for (size_t i = 0; i < n; ++i) bad += std::isfinite(chunk[i]) ? 0 : 1;
  }
  if (bad == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      DivergedModel(bad, static_cast<int64_t>(count), model_->optimizer().step()));
}

std::string DivergedModel(int64_t bad, int64_t params, int64_t updates) {
  return absl::StrCat(bad, " of the model's ", params, " dense parameters are inf or NaN after ",
                      updates,
                      " updates: the model diverged (try lower optimizer.dense.learning_rate or "
                      "optimizer.sparse.learning_rate)");
}

absl::StatusOr<float> Trainer::TakeTrainLoss(int64_t step) {
  const float loss = model_->TakeTrainLoss();
  if (std::isfinite(loss)) {
    if ((step + 1) % kFiniteCheckSteps == 0) {
      DLRM_RETURN_IF_ERROR(
          Annotate(CheckDenseParamsFinite(), absl::StrCat("step ", step, " (training stopped)")));
    }
    return loss;
  }
  // Every parameter the step touched is inf or NaN from here on: training on would only spread
  // them and write them to checkpoints (those taken so far predate the divergence).
  return absl::FailedPreconditionError(
      absl::StrCat("step ", step, ": the training loss is ", loss,
                   ": the model diverged (try lower optimizer.dense.learning_rate or "
                   "optimizer.sparse.learning_rate); training stopped"));
}

absl::StatusOr<float> Trainer::Step(const Batch& batch) {
  DLRM_RETURN_IF_ERROR(CheckBatch(batch));
  PrepareSparse(batch, steps_done_, &step_work_);
  DLRM_RETURN_IF_ERROR(FetchRows(&step_work_));
  DLRM_ASSIGN_OR_RETURN(float loss, Compute(batch, &step_work_));
  DLRM_RETURN_IF_ERROR(PushGradients(step_work_));
  return loss;
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate(BatchReader* reader) {
  DLRM_RETURN_IF_ERROR(CheckDenseParamsFinite());
  std::vector<float> scores;
  std::vector<float> labels;
  DLRM_RETURN_IF_ERROR(Predict(reader, &scores, &labels));
  EvalMetrics m;
  m.samples = static_cast<int64_t>(scores.size());
  if (m.samples == 0) return absl::FailedPreconditionError("evaluation set is empty");
  m.auc = dense::Auc(scores, labels);
  m.logloss = dense::LogLoss(scores, labels);
  m.accuracy = dense::Accuracy(scores, labels);
  return m;
}

absl::Status Trainer::Predict(BatchReader* reader, std::vector<float>* scores_out,
                              std::vector<float>* labels_out) {
  DLRM_RETURN_IF_ERROR(DrainHotExchange());
  std::vector<float>& scores = *scores_out;
  std::vector<float>& labels = *labels_out;
  std::vector<float> probs(options_.spec.batch_size);
  Batch batch;
  SparseWork work;
  dense::Backend* b = options_.backend;
  while (true) {
    DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&batch));
    if (!more) break;
    DLRM_RETURN_IF_ERROR(CheckBatch(batch));
    SplitSparse(batch, steps_done_, &work);  // not a training batch: not observed
    DLRM_RETURN_IF_ERROR(FetchRows(&work));
    if (gpu_tables_ != nullptr) {
      DLRM_RETURN_IF_ERROR(gpu_tables_->Lookup(batch, emb_dev_));
    } else if (gpu_hot_ != nullptr) {
      DLRM_RETURN_IF_ERROR(gpu_hot_->Lookup(batch, work, emb_dev_));
    } else {
      Pool(batch, work);
    }
    if (emb_dev_ != nullptr) {
      b->CopyFromHost(batch.dense.data(), dense_dev_, batch.dense.size());
      model_->Predict(dense_dev_, emb_dev_, batch.size, probs_dev_);
      b->CopyToHost(probs_dev_, probs.data(), batch.size);
    } else {
      model_->Predict(batch.dense.data(), emb_host_.data(), batch.size, probs.data());
    }
    scores.insert(scores.end(), probs.begin(), probs.begin() + batch.size);
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.begin() + batch.size);
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
