// PsJob: one training job loaded on a parameter server: its shard of the embedding tables (a
// TieredStore under <data_dir>/<job_id>/shard-<i>), the job's parameters as LoadJob gave them,
// the stale-synchronous StepGate, and the folder of its checkpoint snapshots
// (<data_dir>/<job_id>/shard-<i>-snapshots).
//
// Validation (every Lookup / PushGradients is checked whole before any row is read or written;
// messages name the value):
//   - epoch older than loaded: FAILED_PRECONDITION; newer: FAILED_PRECONDITION (LoadJob first)
//   - unknown table: NOT_FOUND "job J: table 30 not found (the job has 26 tables)"
//   - ids bytes not a multiple of 8, grads bytes != ids x dim x 4: INVALID_ARGUMENT with both
//   - id out of range: INVALID_ARGUMENT "table 3: id 10131227 >= rows 10131227"
//   - id owned by another shard (common/sharding.h ShardOf): INVALID_ARGUMENT
//   - worker rank outside [0, num_workers) for a step >= 0: INVALID_ARGUMENT
//   - PushGradients: a repeated id within a table, or a table given twice: INVALID_ARGUMENT
//     (clients deduplicate and sum gradients before pushing).
//   - PushGradients with a sequence number: one applied already (a retry) is answered OK and not
//     applied again (PushDedupe); a copy of one that failed part way is ABORTED; one older than
//     PushDedupe's window is FAILED_PRECONDITION.
//   - ReadRows / WriteRows (full stored rows, no staleness wait): as Lookup / PushGradients, the
//     WriteRows payload being ids x row_floats x 4 bytes (row_floats = dim + optimizer state).
//
// Thread-safe: Lookup and Push may run concurrently on any threads (the TieredStore locks per
// table).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "embedding/tiered_store.h"
#include "proto/lookup_wire.h"
#include "proto/ps.pb.h"
#include "server/ps_step_gate.h"
#include "server/timer_queue.h"

namespace dlrm::server {

struct PsJobOptions {
  dlrm::v1::LoadJobRequest spec;  // as given to LoadJob (validated by ValidateLoadRequest)
  std::string data_dir;           // the PS's data directory; the job lives in a subfolder
  int64_t memory_budget_bytes = 0;
  bool rocksdb_wal = false;      // rows are rebuilt from checkpoints, so the WAL is off
  TimerQueue* timers = nullptr;  // not owned; for staleness deadlines
};

// Checks a LoadJob request before anything is allocated for it: a job id of [A-Za-z0-9._-] (it
// names a folder) of at most kMaxNameBytes, epoch >= 0, 0 <= shard_index < shard_count <=
// kMaxJobWorkers, 1..kMaxTables tables numbered 0..n-1 in order with 1 <= rows <= kMaxTableRows,
// 1 <= dim <= kMaxEmbeddingDim and names of at most kMaxNameBytes, a known optimizer whose
// learning rate is finite in (0, kMaxOptimizerValue], epsilon and initial accumulator finite in
// [0, kMaxOptimizerValue], betas in [0, 1), 0 <= staleness <= kMaxStaleness,
// 1 <= num_workers <= kMaxJobWorkers (limits: common/limits.h). INVALID_ARGUMENT naming the field,
// the value and the limit.
absl::Status ValidateLoadRequest(const dlrm::v1::LoadJobRequest& request);

// Which numbered pushes (PushGradientsRequest.sequence) of each worker rank a job has applied in
// its current epoch, so that a push sent again after a lost answer is applied once. Per rank it
// keeps the highest number seen and a bitmap of the kWindow numbers up to it (a client's numbers
// run over every shard, so each shard sees them with gaps; a retry comes within one Push call,
// a handful of numbers later), plus the numbers being applied right now. Memory: kWindow / 8
// bytes per rank that pushed. Thread-safe.
class PushDedupe {
 public:
  static constexpr uint64_t kWindow = uint64_t{1} << 14;
  enum class Claim { kApply, kDuplicate };

  // What a claimed push came to.
  enum class Outcome {
    kApplied,     // a copy is a duplicate
    kNotApplied,  // failed before any row was applied: a copy may apply it
    kPartly,      // failed part way: a copy is refused (ABORTED), it can be neither applied again
                  // nor answered OK
  };

  explicit PushDedupe(int num_workers);

  // Claims push `sequence` (> 0) of `rank` (in [0, num_workers)) at `epoch`. kApply: apply it,
  // then call End. kDuplicate: applied already, answer OK. While the same number is being
  // applied by another call this waits for that call's End, so that OK always means applied. A
  // newer epoch forgets every number seen (clients number from 1 per epoch). FAILED_PRECONDITION
  // for an epoch older than one seen or a number below the window; ABORTED for a copy of a push
  // that failed part way.
  absl::StatusOr<Claim> Begin(int64_t epoch, int rank, uint64_t sequence);
  // Ends a kApply claim.
  void End(int64_t epoch, int rank, uint64_t sequence, Outcome outcome);

 private:
  struct RankWindow {
    uint64_t high = 0;           // highest number seen; 0: none
    std::vector<uint64_t> bits;  // bit s % kWindow: s applied or being applied (s > high - kWindow)
  };

  absl::Mutex mu_;
  absl::CondVar applied_;  // signalled when a claim ends
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<RankWindow> ranks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::pair<int, uint64_t>> applying_ ABSL_GUARDED_BY(mu_);
  // Pushes that failed part way (rare), while in their rank's window.
  absl::flat_hash_set<std::pair<int, uint64_t>> partly_applied_ ABSL_GUARDED_BY(mu_);
};

class PsJob {
 public:
  // Creates the job's store in a fresh <data_dir>/<job_id>/shard-<i> (an old one is removed: a
  // newly loaded job starts from the deterministic initialisation), and removes the snapshots an
  // earlier load of the job left.
  static absl::StatusOr<std::unique_ptr<PsJob>> Create(const PsJobOptions& options);
  // The store's directory Create uses: <data_dir>/<job_id>/shard-<shard>.
  static std::string StorePath(const std::string& data_dir, const std::string& job_id, int shard);
  ~PsJob();

  const std::string& job_id() const { return spec_.job_id(); }
  int shard_index() const { return spec_.shard_index(); }
  int shard_count() const { return spec_.shard_count(); }
  int64_t memory_budget_bytes() const { return memory_budget_bytes_; }
  int64_t epoch() const;
  // FAILED_PRECONDITION naming both epochs unless `epoch` is the loaded one.
  absl::Status CheckEpoch(int64_t epoch) const;
  // The store's directory.
  const std::string& path() const { return path_; }
  // The folder of the job's checkpoint snapshots (RocksDB checkpoints of the store), beside the
  // store: <data_dir>/<job_id>/shard-<i>-snapshots. Create empties it.
  const std::string& snapshots_path() const { return snapshots_path_; }
  // Where the SNAPSHOT of `step` taken at job epoch `epoch` lives:
  // <snapshots_path>/epoch-<epoch>-step-<step>. Unique per job, shard, epoch and step, so that
  // two jobs on one server, or an older epoch's write still stopping, never share a folder.
  std::string SnapshotPath(int64_t epoch, int64_t step) const;
  // Removes the snapshot folders of epochs older than `epoch` (left by checkpoints of a replaced
  // run that never got their WRITE); returns how many.
  int RemoveSnapshotsBefore(int64_t epoch) const;

  // Whether `request` asks for the same job as loaded, the epoch and `restart` aside.
  bool SameParameters(const dlrm::v1::LoadJobRequest& request) const;
  // Moves the job to a newer epoch (after a recovery): the rows stay, staleness tracking restarts,
  // and lookups parked for the old epoch fail with FAILED_PRECONDITION.
  void AdvanceEpoch(int64_t epoch);

  // Validation only (see the header comment). Lookup and ReadRows are refused when they ask for
  // more than common::kMaxIdsPerRequest ids or an answer over common::kMaxRpcPayloadBytes (fp32
  // rows for Lookup, stored rows for ReadRows), before anything is allocated for them.
  absl::Status ValidateLookup(const dlrm::v1::LookupRequest& request) const;
  absl::Status ValidatePush(const dlrm::v1::PushGradientsRequest& request) const;
  // ReadRows: epoch and ids as for Lookup. WriteRows: as for Push, with rows of row_floats
  // (dim + optimizer state) floats per id instead of gradients.
  absl::Status ValidateReadRows(const dlrm::v1::ReadRowsRequest& request) const;
  absl::Status ValidateWriteRows(const dlrm::v1::WriteRowsRequest& request) const;

  // Lookup in two phases, so that tables can be filled on several threads: PrepareLookup lays
  // `answer` out with one table per request table and room for its rows; LookupTables fills
  // tables [begin, end) (disjoint ranges may run concurrently) and returns the rows it served.
  // REQUIRES: ValidateLookup passed.
  void PrepareLookup(const dlrm::v1::LookupRequest& request, proto::LookupAnswer* answer) const;
  absl::StatusOr<int64_t> LookupTables(const dlrm::v1::LookupRequest& request, int begin, int end,
                                       proto::LookupAnswer* answer);
  // LookupTables' non-blocking fast path (for a gRPC reactor thread): fills tables begin,
  // begin + 1, ... while each table's rows are all resident and its lock is free
  // (TieredStore::TryLookupResident), and stops at the first table that is not. Returns the
  // index of the first table not filled (end when all were; those are left to LookupTables,
  // nothing of theirs was counted) and adds the rows served to *rows. REQUIRES: PrepareLookup.
  absl::StatusOr<int> LookupTablesResident(const dlrm::v1::LookupRequest& request, int begin,
                                           int end, proto::LookupAnswer* answer, int64_t* rows);
  // Applies the gradients with the job's sparse optimizer, then (unless more_chunks) marks the
  // worker's step complete in the gate. Returns the rows updated. A numbered push (sequence > 0,
  // rank in [0, num_workers)) applied already is neither applied nor counted again: it returns
  // 0 rows and sets *duplicate (when given). REQUIRES: ValidatePush passed.
  absl::StatusOr<int64_t> Push(const dlrm::v1::PushGradientsRequest& request,
                               bool* duplicate = nullptr);

  // Full stored rows of every table of `request` (response in request order). REQUIRES:
  // ValidateReadRows passed.
  absl::Status ReadRows(const dlrm::v1::ReadRowsRequest& request,
                        dlrm::v1::ReadRowsResponse* response);
  // Overwrites full stored rows through the tier; returns the rows written. REQUIRES:
  // ValidateWriteRows passed.
  absl::StatusOr<int64_t> WriteRows(const dlrm::v1::WriteRowsRequest& request);

  // The gate of the current epoch.
  std::shared_ptr<StepGate> gate() const;
  // The gate of `epoch` while it is the loaded one; CheckEpoch's error once the job moved on. A
  // call validated before an epoch change parks on, or completes its step in, its own epoch's
  // gate, never the next one's.
  absl::StatusOr<std::shared_ptr<StepGate>> GateOf(int64_t epoch) const;
  // Fails the lookups parked on the gate with `status`, and those of every gate a later epoch
  // brings (the server is shutting down, or the job was unloaded).
  void CloseGates(const absl::Status& status);
  embedding::TieredStore& store() { return *store_; }
  // Lookups of resident rows leave their frequency counting for later (TieredStore "Deferred
  // counting"): the first caller after a lookup gets true and must call CountPendingAccesses
  // (on a pool thread, after the answer went out); others get false until it has.
  bool ClaimAccessCounting() { return !counting_claimed_.exchange(true); }
  void CountPendingAccesses() {
    counting_claimed_ = false;
    store_->CountPendingAccesses();
  }
  embedding::TieredStoreStats stats() const { return store_->stats(); }

  // Incremental checkpoints. Every SNAPSHOT records the rows changed since the previous one
  // (TieredStore::CreateCheckpoint), by its step (a second snapshot of the same step, after a
  // rollback, adds to the record). ChangedSince answers the rows changed since the snapshot of
  // `parent` up to that of `step`: the union of the records in (parent, step], sorted per table;
  // nullopt when this process took no snapshot of `parent` (or has forgotten it), so that only a
  // full write is right. ForgetBefore drops the records of snapshots older than `step`.
  void RecordSnapshot(int64_t step, std::vector<std::vector<int64_t>> changed);
  // The newest SNAPSHOT's copy of the store (its RocksDB checkpoint and resident rows), kept for
  // the WRITE of the same step; one at a time (a newer snapshot replaces it). StoreSnapshotOf:
  // null when none of `step` is held. ForgetStoreSnapshot(step): done with it if it is of
  // `step`. RecycledStoreSnapshot: the object for the next SNAPSHOT, the last one's when nobody
  // reads it any more (TakeSnapshot reuses its buffers: memory already mapped), else a new one.
  // A job loaded with periodic_checkpoints prepares the first one's memory on a thread of its
  // own from the load on (TieredStore::PrepareSnapshot); the first RecycledStoreSnapshot waits
  // for that thread and returns its object.
  void KeepStoreSnapshot(int64_t step, std::shared_ptr<embedding::StoreSnapshot> snapshot);
  std::shared_ptr<const embedding::StoreSnapshot> StoreSnapshotOf(int64_t step) const;
  void ForgetStoreSnapshot(int64_t step);
  std::shared_ptr<embedding::StoreSnapshot> RecycledStoreSnapshot();
  std::optional<std::vector<std::vector<int64_t>>> ChangedSince(int64_t parent, int64_t step) const;
  void ForgetBefore(int64_t step);

 private:
  PsJob(const PsJobOptions& options, std::string path);
  absl::Status CheckRank(int64_t step, int rank) const;
  // The tables of a Lookup (`stored_rows` false) or ReadRows (true): each known, their ids
  // checked (CheckIds), and the answer within what one request may carry (ValidateLookup).
  absl::Status CheckRowRequest(const char* method,
                               const google::protobuf::RepeatedPtrField<dlrm::v1::TableIds>& tables,
                               bool stored_rows) const;
  // NOT_FOUND unless the job has table `table`; its config through `config`.
  absl::Status CheckTable(int table, const embedding::TableConfig** config) const;
  // Checks one table entry: table known, ids length, range and ownership. Returns the table's
  // config through `config`.
  absl::Status CheckIds(int table, const std::string& ids_bytes,
                        const embedding::TableConfig** config) const;
  // CheckIds, then: the table not yet in *seen_tables (marks it), `payload` of ids x width x 4
  // bytes (width: dim for gradients, row_floats for full rows), no id repeated.
  absl::Status CheckPayloads(int table, const std::string& ids_bytes, const std::string& payload,
                             bool full_rows, std::vector<bool>* seen_tables) const;

  // FAILED_PRECONDITION naming both epochs unless `epoch` == `loaded`.
  absl::Status EpochError(int64_t epoch, int64_t loaded) const;

  const dlrm::v1::LoadJobRequest spec_;  // epoch as first loaded; see epoch_
  const std::string path_;
  const std::string snapshots_path_;
  const int64_t memory_budget_bytes_;
  TimerQueue* const timers_;
  std::vector<embedding::TableConfig> tables_;
  std::unique_ptr<embedding::TieredStore> store_;
  std::atomic<bool> counting_claimed_{false};
  mutable absl::Mutex snapshots_mu_;
  // Rows changed between a snapshot and the one before it, by the later one's step.
  std::map<int64_t, std::vector<std::vector<int64_t>>> changed_by_snapshot_
      ABSL_GUARDED_BY(snapshots_mu_);
  int64_t kept_snapshot_step_ ABSL_GUARDED_BY(snapshots_mu_) = -1;
  std::shared_ptr<embedding::StoreSnapshot> kept_snapshot_ ABSL_GUARDED_BY(snapshots_mu_);
  PushDedupe push_dedupe_;
  void JoinPreparer();                                  // waits for preparer_ when it runs
  absl::Mutex preparer_mu_;                             // held to join preparer_
  std::thread preparer_ ABSL_GUARDED_BY(preparer_mu_);  // PrepareSnapshot of the first snapshot

  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StepGate> gate_ ABSL_GUARDED_BY(mu_);
  absl::Status gates_closed_ ABSL_GUARDED_BY(mu_);  // not OK once CloseGates ran
};

}  // namespace dlrm::server
