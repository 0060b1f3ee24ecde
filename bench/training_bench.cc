#include "bench/training_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/shapes.h"
#include "common/limits.h"
#include "common/parallel.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "embedding/dedup.h"
#include "embedding/local_store.h"
#include "nlohmann/json.hpp"
#include "worker/hot_rows.h"
#include "worker/input/zipf_sampler.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::bench {
namespace {

// Bytes of rows the batches `dlrm bench` cycles through should touch (RunTrainingBench): many
// times a server CPU's last-level cache.
constexpr int64_t kCycledRowBytes = int64_t{256} << 20;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Peak resident set size of this process, from the kernel.
int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// Batches with Zipf-skewed ids (rank r maps to a scattered row so hot rows are not adjacent),
// uniform dense features and random labels.
std::vector<worker::Batch> MakeBatches(const BenchShape& shape, int batch_size, int count,
                                       double exponent, uint64_t seed) {
  const common::JobSpec& spec = shape.spec;
  worker::Xoshiro256 rng(seed);
  std::vector<worker::ZipfSampler> samplers;
  for (const auto& t : spec.tables) samplers.emplace_back(t.rows, exponent);
  std::vector<worker::Batch> batches(count);
  for (auto& b : batches) {
    b.size = batch_size;
    b.num_dense = spec.dense_features;
    b.dense.resize(static_cast<size_t>(batch_size) * spec.dense_features);
    for (float& x : b.dense) x = static_cast<float>(rng.NextDouble() * 4.0);
    b.labels.resize(batch_size);
    for (float& y : b.labels) y = rng.NextDouble() < 0.25 ? 1.0f : 0.0f;
    b.sparse.resize(spec.tables.size());
    for (size_t t = 0; t < spec.tables.size(); ++t) {
      auto& f = b.sparse[t];
      const int64_t rows = spec.tables[t].rows;
      const int bag = shape.bag(t);
      f.ids.resize(static_cast<size_t>(batch_size) * bag);
      f.offsets.resize(batch_size + 1);
      for (int i = 0; i <= batch_size; ++i) f.offsets[i] = i * bag;
      for (int64_t& id : f.ids) {
        const int64_t rank = samplers[t].Sample(rng) - 1;  // 1-based ranks
        id = static_cast<int64_t>((static_cast<unsigned __int128>(rank) * 2654435761u) % rows);
      }
    }
  }
  return batches;
}

// The distinct ids of each table of `batch`, ascending (the order the trainer visits them).
std::vector<std::vector<int64_t>> DistinctIds(const common::JobSpec& spec,
                                              const worker::Batch& batch) {
  std::vector<std::vector<int64_t>> ids(spec.tables.size());
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    std::vector<int64_t> inverse;
    embedding::Deduplicator dedup;
    dedup.Run(batch.sparse[t].ids, spec.tables[t].rows, &ids[t], &inverse);
    std::sort(ids[t].begin(), ids[t].end());
  }
  return ids;
}

// Prefetches row ids[k + 8] (`floats` floats at rows + id * stride), as the trainer's kernels do.
inline void PrefetchAhead(const float* rows, int64_t stride, int floats,
                          const std::vector<int64_t>& ids, size_t k, bool write) {
  if (k + 8 >= ids.size()) return;
  const char* ahead = reinterpret_cast<const char*>(rows + ids[k + 8] * stride);
  const int bytes = floats * static_cast<int>(sizeof(float));
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(ahead + b, write ? 1 : 0);
  __builtin_prefetch(ahead + bytes - 1, write ? 1 : 0);
}

// Reads the first `floats` floats of each row `ids` of a table, and returns their sum (so the
// reads are kept): the least memory traffic of pooling these rows.
float ReadRows(const float* rows, int64_t stride, int floats, const std::vector<int64_t>& ids) {
  using Float4 = float __attribute__((vector_size(16)));
  Float4 acc = {};
  float rest = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    PrefetchAhead(rows, stride, floats, ids, k, false);
    const float* r = rows + ids[k] * stride;
    int i = 0;
    for (; i + 4 <= floats; i += 4) {
      Float4 v;
      std::memcpy(&v, r + i, sizeof(v));
      acc += v;
    }
    for (; i < floats; ++i) rest += r[i];
  }
  return acc[0] + acc[1] + acc[2] + acc[3] + rest;
}

// Reads and writes back unchanged (x * 1, the 1 read at run time so that the stores are kept)
// the first `floats` floats of each row `ids`: the least memory traffic of updating these rows.
void RewriteRows(float* rows, int64_t stride, int floats, const std::vector<int64_t>& ids) {
  static volatile float one = 1.0f;
  const float factor = one;
  for (size_t k = 0; k < ids.size(); ++k) {
    PrefetchAhead(rows, stride, floats, ids, k, true);
    float* r = rows + ids[k] * stride;
    for (int i = 0; i < floats; ++i) r[i] *= factor;
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// INVALID_ARGUMENT naming the option, its value and the limit past one; checked before anything is
// allocated (`dlrm bench` checks its flags the same way, client/dlrm_main.cc).
absl::Status CheckOptions(const TrainingBenchOptions& o) {
  auto over = [](const char* name, int64_t value, int64_t limit, const char* limit_name) {
    return absl::InvalidArgumentError(absl::StrCat("bench: ", name, " ", value,
                                                   " is over the limit of ", limit, " (",
                                                   limit_name, " in common/limits.h)"));
  };
  if (o.batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: batch_size ", o.batch_size, " must be >= 0 (0: the shape's)"));
  }
  if (o.batch_size > common::kMaxBatchSize) {
    return over("batch_size", o.batch_size, common::kMaxBatchSize, "kMaxBatchSize");
  }
  if (o.steps <= 0 || o.rounds <= 0 || o.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps ", o.steps, " and rounds ", o.rounds, " must be > 0"));
  }
  if (o.batches < 0 || o.batches > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: batches ", o.batches, " must be in [0, 10000] (0: sized by rows)"));
  }
  if (o.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: threads ", o.threads, " must be >= 0 (0: all cores)"));
  }
  if (o.threads > common::kMaxThreads) {
    return over("threads", o.threads, common::kMaxThreads, "kMaxThreads");
  }
  if (!(o.zipf_exponent > 0) || !std::isfinite(o.zipf_exponent)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: zipf exponent ", o.zipf_exponent, " must be a finite number > 0"));
  }
  if (o.hot_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: hot_budget ", o.hot_budget_bytes, " bytes must be >= 0 (0: none)"));
  }
  if (o.hot_budget_bytes > common::kMaxByteSize) {
    return over("hot_budget", o.hot_budget_bytes, common::kMaxByteSize, "kMaxByteSize");
  }
  if (o.max_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: max_rows ", o.max_rows, " must be >= 0 (0: the shape's sizes)"));
  }
  if (o.gpu_table_budget_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat("bench: gpu_table_budget ",
                                                   o.gpu_table_budget_bytes,
                                                   " bytes must be >= -1 (-1: 80% of free)"));
  }
  if (o.gpu_table_budget_bytes > common::kMaxByteSize) {
    return over("gpu_table_budget", o.gpu_table_budget_bytes, common::kMaxByteSize, "kMaxByteSize");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RunTrainingBench(const TrainingBenchOptions& options) {
  DLRM_RETURN_IF_ERROR(CheckOptions(options));
  DLRM_ASSIGN_OR_RETURN(BenchShape shape, GetBenchShape(options.shape));
  common::JobSpec& spec = shape.spec;
  if (options.batch_size > 0) spec.batch_size = options.batch_size;
  if (options.max_rows > 0) {
    for (auto& t : spec.tables) t.rows = std::min(t.rows, options.max_rows);
  }
  spec.seed = options.seed;

  DLRM_ASSIGN_OR_RETURN(auto backend, worker::CreateBackendForDevice(
                                          options.device, options.math_mode, options.threads));

  const auto init_start = Clock::now();
  embedding::LocalStoreOptions store_options;
  store_options.tables = worker::TableConfigsFromSpec(spec);
  store_options.seed = spec.seed;
  DLRM_ASSIGN_OR_RETURN(store_options.optimizer, worker::SparseOptimizerFromSpec(spec));
  if (options.threads > 0) store_options.num_threads = options.threads - 1;
  DLRM_ASSIGN_OR_RETURN(auto store, embedding::LocalEmbeddingStore::Create(store_options));
  const double init_seconds = Seconds(init_start, Clock::now());

  int64_t table_bytes = 0;
  const int state =
      embedding::SparseOptimizerStateFloats(store_options.optimizer.type, spec.embedding_dim);
  for (const auto& t : spec.tables) {
    table_bytes += t.rows * static_cast<int64_t>(spec.embedding_dim + state) * 4;
  }

  worker::TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = backend.get();
  trainer_options.store = store.get();
  trainer_options.threads = options.threads;
  // On a GPU every table lives in device memory when it fits (kaggle-shape: about 2.2 GB).
  trainer_options.gpu_table_budget_bytes = options.gpu_table_budget_bytes;
  const auto gpu_init_start = Clock::now();
  DLRM_ASSIGN_OR_RETURN(auto trainer, worker::Trainer::Create(trainer_options));
  const double trainer_init_seconds = Seconds(gpu_init_start, Clock::now());

  // Batches cycled through the steps: enough that the rows they touch are far more than a CPU's
  // last-level cache holds, as a training run's fresh batches are (4 cycled kaggle-shape batches
  // touched about 4 MB of rows, which a cache can keep, sparing the step misses a real run pays),
  // at most one per step run, at least 4. Sized from a first batch's distinct rows.
  const int64_t row_bytes = static_cast<int64_t>(spec.embedding_dim + state) * 4;
  const int max_batches = options.warmup_steps + options.rounds * options.steps;
  int num_batches = options.batches;
  if (num_batches == 0) {
    const std::vector<worker::Batch> first =
        MakeBatches(shape, spec.batch_size, 1, options.zipf_exponent, options.seed + 7);
    int64_t first_rows = 0;
    for (const auto& ids : DistinctIds(spec, first[0])) {
      first_rows += static_cast<int64_t>(ids.size());
    }
    const int64_t batch_row_bytes = std::max<int64_t>(1, first_rows * row_bytes);
    const int64_t wanted = (kCycledRowBytes + batch_row_bytes - 1) / batch_row_bytes;
    num_batches = static_cast<int>(std::clamp<int64_t>(wanted, 4, std::max(4, max_batches)));
  }
  std::vector<worker::Batch> batches =
      MakeBatches(shape, spec.batch_size, num_batches, options.zipf_exponent, options.seed + 7);

  int64_t hot_rows = 0;
  if (options.hot_budget_bytes > 0 && !trainer->gpu_tables()) {
    // The most frequent ids of a sample drawn like the timed batches but not the same ones (so
    // the hit rate is the distribution's, not a memorised set's), as a worker samples its input.
    worker::HotSetSelector selector(store_options.tables, state);
    for (const worker::Batch& b : MakeBatches(shape, spec.batch_size, num_batches,
                                              options.zipf_exponent, options.seed + 11)) {
      selector.Add(b);
    }
    worker::HotRowCacheOptions hot_options;
    hot_options.tables = store_options.tables;
    hot_options.optimizer = store_options.optimizer;
    hot_options.seed = spec.seed;
    DLRM_ASSIGN_OR_RETURN(auto cache, worker::HotRowCache::Create(
                                          hot_options, selector.Select(options.hot_budget_bytes)));
    hot_rows = cache->total_rows();
    DLRM_RETURN_IF_ERROR(trainer->SetHotRows(std::move(cache)));
  }

  // Stage times of the full step, so the report shows where the non-GEMM time goes.
  double prepare_s = 0, fetch_s = 0, compute_s = 0, push_s = 0;
  int64_t step_index = 0;
  worker::SparseWork work;  // reused, as Trainer::Step reuses its own
  auto full_step = [&](bool record) -> absl::Status {
    const worker::Batch& b = batches[step_index++ % num_batches];
    auto t0 = Clock::now();
    trainer->PrepareSparse(b, trainer->steps_done(), &work);
    auto t1 = Clock::now();
    DLRM_RETURN_IF_ERROR(trainer->FetchRows(&work));
    auto t2 = Clock::now();
    DLRM_ASSIGN_OR_RETURN(float loss, trainer->Compute(b, &work));
    (void)loss;
    auto t3 = Clock::now();
    DLRM_RETURN_IF_ERROR(trainer->PushGradients(work));
    auto t4 = Clock::now();
    if (record) {
      prepare_s += Seconds(t0, t1);
      fetch_s += Seconds(t1, t2);
      compute_s += Seconds(t2, t3);
      push_s += Seconds(t3, t4);
    }
    return absl::OkStatus();
  };
  // The rows' share of a step's memory traffic, measured alone (in-process tables on the host):
  // a pass reading each distinct row of a batch once, and one reading and writing it.
  const bool host_rows = !trainer->gpu_tables() && hot_rows == 0;
  std::vector<std::vector<std::vector<int64_t>>> distinct;
  int64_t distinct_rows = 0;
  if (host_rows) {
    for (const worker::Batch& b : batches) {
      distinct.push_back(DistinctIds(spec, b));
      for (const auto& ids : distinct.back()) distinct_rows += static_cast<int64_t>(ids.size());
    }
  }
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  common::ParallelPool row_pool(std::max(0, threads - 1));
  float row_sum = 0;
  int64_t row_pass_index = 0;
  auto row_pass = [&](bool write) {
    const auto& ids = distinct[row_pass_index++ % num_batches];
    std::vector<float> sums(spec.tables.size());
    row_pool.ParallelFor(static_cast<int64_t>(spec.tables.size()), [&](int64_t t) {
      // The weights and the optimizer state, through the store's calls: what an update touches
      // (the write pass is an update that leaves every row as it was).
      const int table = static_cast<int>(t);
      if (write) {
        store->UpdateTable(table, ids[t], [&](embedding::EmbeddingTable& rows) {
          RewriteRows(rows.mutable_data(), rows.row_stride(), static_cast<int>(rows.row_stride()),
                      ids[t]);
        });
      } else {
        store->ReadTable(table, [&](const embedding::EmbeddingTable& rows) {
          sums[t] =
              ReadRows(rows.data(), rows.row_stride(), static_cast<int>(rows.row_stride()), ids[t]);
        });
      }
    });
    for (float s : sums) row_sum += s;
  };

  const float* dense_in = batches[0].dense.data();
  auto gemm_step = [&] {
    trainer->model().GemmOnlyStep(spec.batch_size,
                                  backend->device() == dense::Device::kCpu ? dense_in : nullptr);
  };

  for (int i = 0; i < options.warmup_steps; ++i) {
    DLRM_RETURN_IF_ERROR(full_step(false));
    gemm_step();
  }
  backend->Synchronize();

  const worker::TrainerCounters before = trainer->counters();  // the parts of compute, below
  std::vector<double> full_times, gemm_times, read_times, write_times;
  for (int r = 0; r < options.rounds; ++r) {
    for (int i = 0; i < options.steps; ++i) {
      auto t0 = Clock::now();
      DLRM_RETURN_IF_ERROR(full_step(true));
      backend->Synchronize();
      full_times.push_back(Seconds(t0, Clock::now()));
    }
    for (int i = 0; i < options.steps; ++i) {
      auto t0 = Clock::now();
      gemm_step();
      backend->Synchronize();
      gemm_times.push_back(Seconds(t0, Clock::now()));
    }
    for (int i = 0; host_rows && i < options.steps; ++i) {
      // After a GEMM-only step, as the pooling comes after the last step's dense work.
      gemm_step();
      auto t0 = Clock::now();
      row_pass(false);
      auto t1 = Clock::now();
      row_pass(true);
      read_times.push_back(Seconds(t0, t1));
      write_times.push_back(Seconds(t1, Clock::now()));
    }
  }
  const double full = Median(full_times);
  const double gemm = Median(gemm_times);
  const int64_t timed = static_cast<int64_t>(full_times.size());
  const int64_t peak_rss = PeakRssBytes();

  nlohmann::json j;
  j["shape"] = options.shape;
  j["device"] = backend->name();
  j["math_mode"] = options.math_mode;
  j["tables_on_gpu"] = trainer->gpu_tables();
  j["hot_rows"] = hot_rows;
  j["hot_rows_on_gpu"] = hot_rows > 0 && trainer->gpu_hot_rows();
  const worker::TrainerCounters counters = trainer->counters();
  j["hot_hit_rate"] =
      counters.ids > 0 ? static_cast<double>(counters.hot_ids) / static_cast<double>(counters.ids)
                       : 0.0;
  j["batch_size"] = spec.batch_size;
  j["threads"] =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  j["timed_steps"] = timed;
  j["batches_cycled"] = num_batches;
  j["samples_per_sec"] = spec.batch_size / full;
  j["dense_bound_samples_per_sec"] = spec.batch_size / gemm;
  j["ratio"] = gemm / full;
  j["step_ms_median"] = full * 1e3;
  j["gemm_only_ms_median"] = gemm * 1e3;
  j["stage_ms_mean"] = {{"prepare", prepare_s * 1e3 / timed},
                        {"fetch", fetch_s * 1e3 / timed},
                        {"compute", compute_s * 1e3 / timed},
                        {"push", push_s * 1e3 / timed}};
  // Where `compute` went (host time; on CUDA the time to enqueue): TrainerCounters' parts.
  const worker::TrainerCounters after = trainer->counters();
  j["compute_ms_mean"] = {
      {"pool", (after.pool_seconds - before.pool_seconds) * 1e3 / timed},
      {"dense", (after.dense_seconds - before.dense_seconds) * 1e3 / timed},
      {"allreduce", (after.allreduce_seconds - before.allreduce_seconds) * 1e3 / timed},
      {"dense_optimizer",
       (after.dense_optimizer_seconds - before.dense_optimizer_seconds) * 1e3 / timed},
      {"sparse", (after.sparse_seconds - before.sparse_seconds) * 1e3 / timed}};
  if (host_rows) {
    // Measured: one read pass and one read-and-write pass over a batch's distinct rows.
    const double read = Median(read_times), write = Median(write_times);
    j["distinct_rows_per_step"] = distinct_rows / num_batches;
    j["row_read_ms_median"] = read * 1e3;
    j["row_read_write_ms_median"] = write * 1e3;
    // By formula from the measured parts: the ratio of a step that did its GEMMs and nothing but
    // these two passes (the least a pooling and an update of these rows move), an upper bound
    // on `ratio` for this machine.
    j["ratio_ceiling_formula"] = gemm / (gemm + read + write);
    j["row_pass_checksum"] = row_sum;
  }
  j["zipf_exponent"] = options.zipf_exponent;
  if (shape.bags.empty()) {
    j["ids_per_lookup"] = shape.ids_per_lookup;
  } else {
    j["ids_per_lookup_by_table"] = shape.bags;
  }
  j["max_rows"] = options.max_rows;
  j["interaction"] = spec.interaction;
  j["table_rows"] = [&spec] {
    int64_t rows = 0;
    for (const auto& t : spec.tables) rows += t.rows;
    return rows;
  }();
  j["sparse_optimizer"] = spec.sparse_optimizer.type;
  j["table_and_state_bytes"] = table_bytes;
  j["peak_rss_bytes"] = peak_rss;
  j["memory_ratio"] = static_cast<double>(peak_rss) / static_cast<double>(table_bytes);
  j["table_init_seconds"] = init_seconds;
  j["trainer_init_seconds"] = trainer_init_seconds;
  return j.dump();
}

}  // namespace dlrm::bench
