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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/checkpoint_snapshot.h"
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
  // removed). `resumed`: the checkpoint training resumed from, as FindValidCheckpoint found it
  // (null if none; not read again); when it lies in the same folder, the first checkpoint may be
  // incremental on top of it. The folder is locked (its file `.lock`, flock) while the
  // checkpointer lives: FAILED_PRECONDITION naming the process when another holds it, and when
  // it holds checkpoints newer than the run's start (CheckNoNewerCheckpoints).
  static absl::StatusOr<std::unique_ptr<TrainCheckpointer>> Create(
      const common::JobSpec& spec, const embedding::VerifiedCheckpoint* resumed = nullptr);

  ~TrainCheckpointer();  // waits for a write in flight

  // True when every_steps or every_seconds says a checkpoint is due after `step` steps.
  bool Due(int64_t step) const;
  // Takes a checkpoint of `trainer` and `store` at `position` (full or incremental by
  // full_every): copies the dense state and the rows to write into memory (the snapshot; for a
  // full checkpoint that is every row the store holds, so memory for one more copy is needed),
  // then writes the files, commits the manifest and applies keep_last on a background thread
  // while training goes on. Returns the seconds training waited (the snapshot). It first waits
  // for the previous write and returns its error if it failed. `last`: no training follows (the
  // end of a run), so the files are written from the store's tables themselves, without a copy;
  // nothing may update the store until Finish, and a later Start copies every row again.
  absl::StatusOr<double> Start(Trainer& trainer, embedding::LocalEmbeddingStore& store,
                               const TrainPosition& position, bool last = false);
  // Waits for the write Start began; its result (FAILED_PRECONDITION when none is in flight).
  absl::StatusOr<CheckpointWriteResult> Finish();
  // Start, then Finish.
  absl::StatusOr<CheckpointWriteResult> Write(Trainer& trainer,
                                              embedding::LocalEmbeddingStore& store,
                                              const TrainPosition& position);
  int64_t last_step() const { return last_step_; }
  bool writing() const { return writer_.joinable(); }

  // For a job with periodic checkpoints: readies the first snapshot's memory (room for every row
  // of every table of `store`, every page mapped) on a thread of its own, so that the first
  // checkpoint copies into mapped memory instead of waiting for page faults, as a parameter
  // server does at LoadJob. The memory (one more copy of the tables, and an 8-byte id per row)
  // is then held from here on instead of from the first checkpoint. The first Start waits for it.
  void PrepareSnapshotMemory(const embedding::LocalEmbeddingStore& store);
  // Seconds the preparation took (its thread's, off the training path); 0 before it ends.
  double prepare_seconds() const { return prepare_seconds_.load(); }
  // For a job with periodic checkpoints, after every step: when the first checkpoint of this
  // process will be full and is near, copies every changed row into the prepared memory on a
  // thread of its own, a chunk of a table at a time under that table's lock, while training
  // goes on (a pre-copy, as live migration does). The checkpoint then copies only the rows
  // changed since, as later checkpoints do, instead of every row while training waits. Near:
  // the time left, by the steps left (every_steps) at the pace of the last steps, or by the
  // clock (every_seconds), is at most twice the pre-copy's estimate (the tables' bytes at
  // kPreCopyBytesPerSecond); without a pace yet, two steps. Not for checkpoints less than twice
  // that time apart (taken before many rows are touched), nor for tables in GPU memory (copied
  // back at the checkpoint). A checkpoint that comes before the pre-copy is done copies what is
  // left from the other end, so that the rest is copied on two threads.
  void StartPreCopyIfNear(const Trainer& trainer, embedding::LocalEmbeddingStore& store,
                          int64_t step);
  // Seconds the pre-copy took (its thread's, off the training path); 0 before it ends.
  double precopy_seconds() const { return precopy_seconds_.load(); }
  // How many of the pre-copy's chunks the checkpoint copied because it came before the end.
  size_t precopy_chunks_helped() const { return precopy_chunks_helped_; }
  // A pre-copy's pace for its estimate, below what one thread copies here while training runs.
  static constexpr double kPreCopyBytesPerSecond = 1e9;

 private:
  struct Snapshot;
  explicit TrainCheckpointer(const common::JobSpec& spec)
      : spec_(spec), spec_yaml_(common::JobSpecToYaml(spec)) {}
  absl::StatusOr<CheckpointWriteResult> WriteSnapshot(Snapshot& snapshot);

  common::JobSpec spec_;
  std::string spec_yaml_;  // each manifest's copy of the spec, made once
  std::string parent_;     // name of the newest checkpoint of this chain, "" before the first
  double parent_created_unix_ = 0;  // its created_unix (CheckpointManifest::parent_created_unix)
  int since_full_ = 0;              // checkpoints written since the last full one
  int64_t last_step_ = -1;
  std::chrono::steady_clock::time_point last_time_ = std::chrono::steady_clock::now();
  int lock_fd_ = -1;  // holds the flock of the folder's .lock file
  std::thread writer_;
  std::shared_ptr<absl::StatusOr<CheckpointWriteResult>> pending_;  // the writer's result
  // The newest snapshot: once its write is done (and its changed rows applied to it), the next
  // Start copies only the rows changed since.
  std::shared_ptr<Snapshot> last_snapshot_;
  // PrepareSnapshotMemory's memory per table, each page mapped: room for every row (`floats`)
  // and for every row's id; and its thread.
  struct PreparedTable {
    embedding::SnapshotBuffer rows;
    size_t floats = 0;
    std::vector<int64_t> ids;  // empty, with the capacity
  };
  std::vector<PreparedTable> prepared_;
  std::thread prepare_thread_;
  std::atomic<double> prepare_seconds_{0};
  // The pre-copy's thread and snapshot (the next Start's base once joined).
  bool precopy_started_ = false;
  std::chrono::steady_clock::time_point last_step_seen_{};  // StartPreCopyIfNear's last call
  double step_seconds_ = 0;                                 // the pace of the last steps
  double table_bytes_ = 0;  // the tables' bytes (rows x row_stride floats), for the estimate
  std::thread precopy_thread_;
  struct PreCopyWork;  // its chunks, which a Start that comes before the end helps copy
  std::shared_ptr<PreCopyWork> precopy_work_;
  size_t precopy_chunks_helped_ = 0;
  std::shared_ptr<Snapshot> precopy_;
  std::atomic<double> precopy_seconds_{0};
};

class GrpcPsClient;

// A cluster job's checkpoints (docs/CHECKPOINTS.md "Cluster jobs"). Every rank calls DueBySteps
// and, at a pipeline-drained step boundary, Prepare, then (after a barrier) Cut; rank 0 does most:
//   Prepare  rank 0 waits for the previous checkpoint's write and creates the new directory.
//   Cut      rank 0 asks every parameter server for a SNAPSHOT (the cut: each copies its memory
//            tier's rows and takes a RocksDB checkpoint), writes the hot rows' part itself and
//            copies the dense state into memory. Every rank with PowerSGD state copies it. Then
//            training may go on (second barrier).
//   ...      rank 0's background thread writes dense.bin from that copy, asks every server to
//            WRITE its rows from the snapshot, commits the manifest and applies keep_last, while
//            training continues. Each rank writes its PowerSGD state (powersgd-rR.bin) on a
//            thread of its own and publishes the file's size and CRC32C under a job key of the
//            coordinator's store, where rank 0 reads them for the manifest.
//   Finish   waits for the write in flight and returns its status (a failed write is reported at
//            the next Prepare or at Finish).
// Incremental checkpoints (full_every > 1) hold the rows each server changed since the snapshot
// of the parent (the last checkpoint this run committed; the first of a run is full), which the
// servers track as they apply updates (TieredStore::TakeSnapshot). every_steps is the
// same on every rank; every_seconds and `dlrmctl checkpoint` are rank 0's to decide (DueByTime,
// the job's checkpoint requests), and the ranks agree at a decision boundary
// (JobRun::CheckpointDue, job_run_train.cc).
class ClusterCheckpointer {
 public:
  struct Options {
    common::JobSpec spec;
    std::string job_id;
    int rank = 0;
    int world_size = 1;
    GrpcPsClient* ps = nullptr;  // not owned
    int64_t base_step = 0;       // the job's step this run started at (a resumed job's)
    common::MetricsRegistry* metrics = nullptr;  // rank 0's checkpoint metrics; may be null
    // The coordinator's key-value store (job-scoped keys; kv_get waits for a key that is not
    // set yet, up to the collective timeout), and the job's epoch, which keys are scoped by.
    // Needed when a job's workers have PowerSGD state.
    std::function<absl::Status(const std::string&, const std::string&)> kv_set;
    std::function<absl::StatusOr<std::string>(const std::string&)> kv_get;
    // Removes every key under a prefix (best effort): rank 0 clears a checkpoint's keys once it
    // has read them, so that a long job does not fill the store. May be null.
    std::function<void(const std::string&)> kv_delete_prefix;
    int64_t job_epoch = 0;
  };
  static absl::StatusOr<std::unique_ptr<ClusterCheckpointer>> Create(const Options& options);
  ~ClusterCheckpointer();

  // Steps are the job's (base_step + this run's): due every every_steps steps after base_step.
  bool DueBySteps(int64_t step) const;
  // every_seconds have passed since the last cut (or since Create).
  bool DueByTime() const;
  // Before the barrier ahead of Cut, with Cut's position.
  absl::Status Prepare(const TrainPosition& position);
  absl::Status Cut(Trainer& trainer, const TrainPosition& position);
  absl::Status Finish();
  // Rank 0, after the last Finish: lets go of the folder's lock, so that the next job given the
  // folder may start as soon as this one has reported its end (not only once the worker has
  // torn the run down).
  void ReleaseFolder();
  int64_t last_step() const { return last_step_; }

 private:
  explicit ClusterCheckpointer(const Options& options)
      : options_(options), spec_yaml_(common::JobSpecToYaml(options.spec)) {}
  // The key rank `rank` publishes its PowerSGD file's entry under, for checkpoint `name`:
  // PowerSgdKeyPrefix(name) followed by the rank.
  std::string PowerSgdKeyPrefix(const std::string& name) const;
  std::string PowerSgdKey(const std::string& name, int rank) const;
  // Writes `state` as this rank's powersgd-rR.bin in `dir` and publishes its entry (or the error).
  absl::StatusOr<embedding::CheckpointFileEntry> WritePowerSgdPart(const std::string& dir,
                                                                   const std::string& state);
  Options options_;
  std::string spec_yaml_;     // each manifest's copy of the spec, made once
  std::string prepared_dir_;  // rank 0: the directory Prepare made ("" when none is due)
  // Rank 0 with a registry: the dlrm_checkpoint_* series (null otherwise).
  prometheus::Histogram* cut_seconds_ = nullptr;
  prometheus::Histogram* write_seconds_ = nullptr;
  prometheus::Gauge* bytes_ = nullptr;
  prometheus::Gauge* last_committed_step_ = nullptr;
  prometheus::Counter* committed_ = nullptr;
  prometheus::Counter* failed_ = nullptr;
  int64_t last_step_ = -1;
  // The last checkpoint committed by this run (written by the writer thread, read by Cut after
  // joining it), and how many checkpoints its chain holds since its full base.
  std::string parent_name_;
  double parent_created_unix_ = 0;
  int64_t parent_step_ = -1;
  int since_full_ = 0;
  std::chrono::steady_clock::time_point last_cut_time_ = std::chrono::steady_clock::now();
  // Rank 0: how long Prepare waited for the previous write (one in flight at a time), logged
  // with the checkpoint it prepared.
  double previous_write_wait_seconds_ = 0;
  std::thread writer_;
  absl::Status write_status_;  // of the last write joined
  int lock_fd_ = -1;           // rank 0: holds the flock of the folder's .lock file
};

struct RestoredCheckpoint {
  std::string dir;  // the checkpoint loaded (the newest of its chain)
  embedding::CheckpointManifest manifest;
  TrainPosition position;  // of `rank`
  // The hot set of the worker that wrote it (its "hot_rows" files), per table; empty when the
  // checkpoint has none (written by dlrm train, or without hot rows).
  std::vector<std::vector<int64_t>> hot_ids;
  // The trainer's PowerSGD state came from the checkpoint (otherwise it starts afresh; the log
  // says why).
  bool powersgd_restored = false;
};

struct RestoreOptions {
  int rank = 0;           // whose input position (and PowerSGD state) to take; a rank the writer
                          // did not have takes rank 0's epoch and batches (every rank has the same)
  int world_size = 1;     // workers of the job resuming (PowerSGD state needs the writer's); with
                          // the trainer's batch size, the global batch the run resumes with
  bool load_rows = true;  // false: dense state only (the other ranks of a cluster job)
  bool set_steps = true;  // false: leave the trainer's step count (a cluster job numbers its
                          // steps from 0 on the parameter servers after a resume)
};

// The checkpoint at `path` (a checkpoint, or a folder: its newest checkpoint whose files all
// verify, the damaged ones logged by name): embedding::FindVerifiedCheckpoint.
using ValidCheckpoint = embedding::VerifiedCheckpoint;
absl::StatusOr<ValidCheckpoint> FindValidCheckpoint(const std::string& path,
                                                    absl::string_view job_id = {});

// Loads the checkpoint at `path` (a checkpoint, or a folder: its newest checkpoint whose files
// all verify) into `trainer` (dense parameters, optimizer state, step count) and `store` (every
// row of every link of its chain, oldest first, files in manifest order, through
// WriteStoredRows: a later file's row replaces an earlier one's). The checkpoint must fit the
// trainer's spec: INVALID_ARGUMENT naming the first difference (a table's rows or dim, the
// optimizers, the dense parameter count). A run with another global batch size (the trainer's
// times options.world_size) skips the same samples of the epoch in its own batches, or gets
// INVALID_ARGUMENT naming both sizes when they are not a whole number of its batches. DATA_LOSS
// naming the file when a checksum or a file's
// layout is wrong; nothing is loaded then (the files are verified before anything is applied).
// FindValidCheckpoint(path), then the overload below.
absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const std::string& path,
                                                     const RestoreOptions& options,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store);
// The same for a checkpoint FindValidCheckpoint found, whose files it verified: they are read
// once more, to load them, and not checksummed again (a file's layout is still checked).
absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const ValidCheckpoint& checkpoint,
                                                     const RestoreOptions& options,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store);

// Checks that `manifest` describes a model of `spec`'s shape and optimizers.
absl::Status CheckCheckpointFitsSpec(const embedding::CheckpointManifest& manifest,
                                     const common::JobSpec& spec);

// Before a run writes its first checkpoint into `root`: OK when no committed checkpoint there is
// newer than `resume_step` (the step the run resumed from; 0 for a run from the start), leaving
// out those whose files do not verify (nothing can load them; the run writes over them).
// Otherwise FAILED_PRECONDITION naming the folder and the newest such checkpoint: the two runs'
// checkpoints would mix, and a later resume, a recovery (which takes the folder's newest) or an
// incremental chain would load the other run's model.
absl::Status CheckNoNewerCheckpoints(const std::string& root, int64_t resume_step);

// The step a resume from `path` starts at, as far as manifests tell (loading verifies the files):
// that of the checkpoint `path` when it is one, else of the newest committed checkpoint in the
// folder `path`. NOT_FOUND naming `path` when it is neither. For a check before any process
// starts (dlrm local).
absl::StatusOr<int64_t> CommittedResumeStep(const std::string& path);

}  // namespace dlrm::worker
