// Checkpoints of a trainer's state in the one checkpoint format (docs/CHECKPOINTS.md,
// embedding/checkpoint_manifest.h): the dense parameters with their optimizer state, every
// updated embedding row with its optimizer state, the step, and where the input stood.
//
//   TrainCheckpointer: `dlrm train`'s writer. Decides when a checkpoint is due (spec's
//     checkpoint.every_steps / every_seconds), writes full or incremental ones (full_every),
//     keeps the newest keep_last, and always writes one at the end of training.
//   RestoreCheckpoint: loads a checkpoint (following an incremental chain) into a trainer and
//     any EmbeddingStore — the in-process store or the parameter servers through their client,
//     which place every row on its shard, so the number of servers may differ from the writer's.
//
// Not thread-safe; call between steps (no step in flight).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/embedding_store.h"
#include "embedding/local_store.h"
#include "worker/trainer.h"

namespace dlrm::worker {

// Where training stands after `step` steps.
struct TrainPosition {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t epoch = 0;    // 0-based epoch in progress
  int64_t batches = 0;  // batches of that epoch consumed
};

struct CheckpointWriteResult {
  std::string dir;
  embedding::CheckpointManifest manifest;
  double seconds = 0;
};

class TrainCheckpointer {
 public:
  // Prepares spec.checkpoint.dir (created if missing; an interrupted write's leftovers are
  // removed). `resumed_from`: the checkpoint training resumed from ("" if none); when it lies in
  // the same folder, the first checkpoint may be incremental on top of it.
  static absl::StatusOr<std::unique_ptr<TrainCheckpointer>> Create(
      const common::JobSpec& spec, const std::string& resumed_from = "");

  // True when every_steps or every_seconds says a checkpoint is due after `step` steps.
  bool Due(int64_t step) const;
  // Writes a checkpoint of `trainer` and `store` at `position` (full or incremental by
  // full_every), commits its manifest, then applies keep_last.
  absl::StatusOr<CheckpointWriteResult> Write(Trainer& trainer,
                                              embedding::LocalEmbeddingStore& store,
                                              const TrainPosition& position);
  int64_t last_step() const { return last_step_; }

 private:
  explicit TrainCheckpointer(const common::JobSpec& spec) : spec_(spec) {}

  common::JobSpec spec_;
  std::string parent_;  // name of the newest checkpoint of this chain, "" before the first
  int since_full_ = 0;  // checkpoints written since the last full one
  int64_t last_step_ = -1;
  std::chrono::steady_clock::time_point last_time_ = std::chrono::steady_clock::now();
};

struct RestoredCheckpoint {
  std::string dir;  // the checkpoint loaded (the newest of its chain)
  embedding::CheckpointManifest manifest;
  TrainPosition position;  // of `rank`
};

// Loads the checkpoint at `path` (a checkpoint, or a folder whose newest committed one is taken)
// into `trainer` (dense parameters, optimizer state, step count) and `store` (every row of every
// link of its chain, oldest first, through WriteStoredRows). The checkpoint must fit the trainer's
// spec: INVALID_ARGUMENT naming the first difference (a table's rows or dim, the optimizers, the
// dense parameter count). DATA_LOSS naming the file when a checksum or a file's layout is wrong;
// nothing is loaded then (the files are verified before anything is applied).
absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const std::string& path, int rank,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store);

// Checks that `manifest` describes a model of `spec`'s shape and optimizers.
absl::Status CheckCheckpointFitsSpec(const embedding::CheckpointManifest& manifest,
                                     const common::JobSpec& spec);

}  // namespace dlrm::worker
