// The job spec: everything a training job needs, read from YAML (yaml-cpp). The same spec drives
// `dlrm train` (single process), `dlrm local` and a job submitted to the coordinator.
//
//   name: criteo-small
//   model:
//     dense_features: 13
//     bottom_mlp: [512, 256, 64, 16]   # layer widths after the input; last == embedding_dim
//     top_mlp: [512, 256, 1]           # input width is derived; last must be 1
//     embedding_dim: 16
//     pooling: sum                     # sum | mean
//     interaction: dot                 # dot | dcnv2 (then cross_layers: 3, low_rank: 512;
//                                      # a low_rank >= (tables + 1) x embedding_dim warns)
//   tables:                            # either a list of {name, rows} or `cardinalities: [...]`
//     cardinalities: [1460, 583, ...]
//     dtype: fp32                      # fp32 | fp16 | bf16 rows on the parameter servers
//     pooling: mean                    # optional: these tables' pooling (else model.pooling)
//   optimizer:
//     dense: {type: adam, learning_rate: 0.001}
//     sparse: {type: rowwise_adagrad, learning_rate: 0.05}
//   training: {batch_size: 2048, epochs: 1, seed: 42, staleness: 1, hot_budget: 64MiB,
//              max_recoveries: 3}            # batch_size: global, split across the workers
//   data: {train: [data/train.tsv], format: auto, eval_fraction: 0.1}
//   checkpoint: {dir: /ckpt/criteo-small, every_steps: 1000, keep_last: 3, full_every: 4}
//
// Validation is strict: an unknown key, a negative or zero size, or mismatched dimensions is an
// INVALID_ARGUMENT whose message names the key (e.g. "model.bottom_mlp: last width 32 must equal
// model.embedding_dim 16"). Every size, count, length and rate has an upper limit too
// (common/limits.h: kMaxSpecBytes, kMaxBatchSize, kMaxTables, kMaxTableRows, ...), checked before
// anything is allocated for it; past one the message names the value and the limit. Floats are
// finite (a NaN or infinite learning rate is refused). The library returns plain structs; dense/
// and embedding/ options are built from them at the edge.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/lr_schedule.h"

namespace dlrm::common {

struct OptimizerSpec {
  std::string type;  // dense: sgd | adagrad | adam; sparse: sgd | adagrad | rowwise_adagrad | adam
  double learning_rate = 0.0;
  double epsilon = 1e-8;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;         // dense only
  double initial_accumulator = 0.0;  // sparse Adagrad variants
};

struct TableSpec {
  std::string name;
  int64_t rows = 0;
  // How the parameter servers store the weights and send rows and gradients: fp32 | fp16 | bf16
  // (embedding/row_dtype.h). `tables.dtype` next to `cardinalities`, or `dtype` per listed table.
  std::string dtype = "fp32";
  // How a bag of ids is pooled: sum | mean; "" = model.pooling (JobSpec::TablePooling).
  // `tables.pooling` next to `cardinalities`, or `pooling` per listed table.
  std::string pooling = "";
};

// When and where the trained state is written (docs/CHECKPOINTS.md). With a dir, a checkpoint
// is always taken at the end of the job (the trained model).
struct CheckpointSpec {
  std::string dir;           // "" = no checkpoints
  int64_t every_steps = 0;   // 0 = not by steps
  double every_seconds = 0;  // 0 = not by time
  int keep_last = 3;         // committed checkpoints kept (with the ones they build on); >= 1
  int full_every = 1;        // every Nth checkpoint is full, the others incremental; >= 1
  // A checkpoint (or a folder of them: the newest that verifies) the job starts from; absolute
  // for a cluster job. `dlrmctl submit --resume-from` sets it.
  std::string resume_from;
};

struct JobSpec {
  std::string name = "job";

  // model
  int dense_features = 13;
  std::vector<int> bottom_mlp;  // widths after the input; last == embedding_dim
  std::vector<int> top_mlp;     // widths after the (derived) input; last == 1
  int embedding_dim = 16;
  std::string pooling = "sum";  // sum | mean
  // dot: DLRM's pairwise dots; dcnv2: DCNv2 cross layers over [bottom output, embeddings]
  // (dense/cross_net.h) with cross_layers layers of rank low_rank.
  std::string interaction = "dot";
  int cross_layers = 3;
  int low_rank = 512;
  std::vector<TableSpec> tables;

  // optimizers
  OptimizerSpec dense_optimizer;
  OptimizerSpec sparse_optimizer;
  // `optimizer.schedule`: warm-up and decay of both learning rates (common/lr_schedule.h).
  LrSchedule lr_schedule;

  // training
  int batch_size = 2048;
  int epochs = 1;
  uint64_t seed = 42;
  int64_t max_steps = 0;  // 0 = no limit
  int staleness = 1;      // stale-synchronous bound k (distributed pipeline)
  // Bytes of hot rows (weights and optimizer state) replicated on each worker, at most: the
  // planner (worker/hot_plan.h) picks the set with the least estimated cost under this ceiling;
  // 0 = no hot set; kHotBudgetAuto ("auto", the default) = a ceiling of kHotBudgetAutoCeiling.
  // `dlrm train` keeps every table in process and ignores it.
  static constexpr int64_t kHotBudgetAuto = -1;
  static constexpr int64_t kHotBudgetAutoCeiling = int64_t{256} << 20;
  int64_t hot_budget_bytes = kHotBudgetAuto;
  int64_t hot_budget_ceiling() const {
    return hot_budget_bytes == kHotBudgetAuto ? kHotBudgetAutoCeiling : hot_budget_bytes;
  }
  // The network between the workers and the parameter servers, for the planner's time estimate.
  double network_gbps = 10;
  // The number type of the hot rows' gradients in the workers' exchange: fp32 | fp16 | bf16 |
  // fp8 (FP8 E4M3 with an f32 scale per row: 4 + dim bytes a row; CPU workers). Rounded to
  // nearest; every replica applies the same decoded values. Empty: the tables' dtype when they
  // all share one, else fp32.
  std::string hot_sync_dtype;
  // The number type of the dense gradients in the workers' allreduce: fp32 | bf16 (each step of
  // Gloo's ring sums in fp32 and rounds to nearest even; every replica gets the same bits), as
  // PyTorch DDP's bf16_compress_hook. fp16 is refused: gradients below 2^-24 would flush to zero.
  // GPU workers (NCCL) allreduce fp32 and refuse bf16 (planned).
  std::string dense_sync_dtype = "fp32";
  // How the dense gradients are compressed for the workers' allreduce: none | powersgd
  // (PowerSGD, Vogels et al. 2019, as PyTorch DDP's powerSGD_hook: each weight matrix's gradient
  // is sent as two rank-`powersgd_rank` factors, with error feedback; biases and matrices too
  // small to gain travel whole). CPU workers only; the factors travel in fp32, so it takes
  // dense_sync_dtype fp32.
  std::string dense_sync_compression = "none";
  int powersgd_rank = 4;  // 1..64
  // Steps allreduced whole before PowerSGD starts (DDP's start_powerSGD_iter, also 1000 there):
  // the first steps are the most sensitive to approximate gradients.
  int64_t powersgd_warmup_steps = 1000;
  int hot_sample_batches = 64;   // batches sampled to choose the hot set
  int hot_refresh_steps = 1000;  // re-check the hot set every N steps (0 = never)
  std::string device = "auto";   // auto | cpu | cuda
  // fp32 | tf32 | bf16: GEMM precision on CUDA, and bf16 also on CPUs with AVX512_BF16 or AMX
  // (dense/cpu/cpu_backend.h; tf32 runs as fp32 on CPUs).
  std::string math_mode = "fp32";
  int64_t eval_every_steps = 0;  // 0 = only at the end
  // Train to target quality, as MLPerf Training does (0.80275 for DLRMv2): stop at the first
  // periodic evaluation (eval_every_steps, which it needs) whose AUC is >= this, as if max_steps
  // had ended training there. 0 = no target; otherwise in (0, 1).
  double target_auc = 0;
  // A cluster job that loses a member recovers (rolls back to its last checkpoint) at most this
  // many times; the next loss fails it.
  int max_recoveries = 3;

  // data
  std::vector<std::string> train_paths;
  std::vector<std::string> eval_paths;  // empty: hold out eval_fraction of the training data
  std::string format = "auto";          // auto | tsv | binary
  double eval_fraction = 0.1;
  bool strict = false;  // stop at the first malformed line

  CheckpointSpec checkpoint;

  // Width of the top MLP input: embedding_dim + (T+1)T/2 for dot, (T+1) embedding_dim for dcnv2.
  int TopInputWidth() const;
  // Table t's pooling: its own, else model.pooling.
  const std::string& TablePooling(int t) const {
    return tables[t].pooling.empty() ? pooling : tables[t].pooling;
  }
};

// Parses and validates a job spec. `source` names the text in messages (a path or "<submitted>").
// A text over kMaxSpecBytes is refused before it is parsed. A key given twice in one mapping is
// refused naming it and both lines (YAML leaves it to the reader; yaml-cpp would take the first).
// Integers are decimal: a leading zero (YAML 1.1's octal, 0400 = 256) or a 0x / 0o prefix is
// refused naming the key.
//
// A value the job would ignore is not refused but warned about, one message per key that starts
// with `source` and names the key: an optimizer parameter its `type` does not use (beta1 and beta2
// except for adam; epsilon for sgd; a sparse initial_accumulator except for adagrad and
// rowwise_adagrad), and data.eval_fraction next to data.eval (nothing is held out then). Only
// a value other than the default is warned about: it is the one that looks meant, and specs
// written back by older versions list every key with its default. The messages go to `warnings`,
// or to the log (WARNING) when it is null.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text,
                                     const std::string& source = "<job spec>",
                                     std::vector<std::string>* warnings = nullptr);
// Reads and parses a file; a missing or unreadable file (or a folder) is NOT_FOUND naming the path
// and the reason ("No such file or directory", "is a directory"). Relative data paths are
// resolved against the directory of the spec file. `warnings` as for ParseJobSpec.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    std::vector<std::string>* warnings = nullptr);
// Emits a spec back to YAML that ParseJobSpec reads to an equal spec (equal in every value the
// job uses: the keys the warnings above name are left out, so it reads back without a warning).
std::string JobSpecToYaml(const JobSpec& spec);

// `training.batch_size` is the global batch: each of `workers` workers trains on an equal share
// of it per step (the dense and sparse gradients are averaged over the workers), so N workers
// train the model one process trains with the same spec. Returns the share, or INVALID_ARGUMENT
// naming both numbers when batch_size is not a multiple of workers.
absl::StatusOr<int> WorkerBatchSize(const JobSpec& spec, int workers);

// Parses "64MiB", "2GB", "1048576" into bytes (units B; KiB, MiB, GiB, TiB, PiB, EiB, also as K,
// Ki, ...; KB, MB, GB, TB, PB, EB); INVALID_ARGUMENT naming the text otherwise, or naming the text
// and the limit past kMaxByteSize (common/limits.h, 1 PiB).
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace dlrm::common
