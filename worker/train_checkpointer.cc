// TrainCheckpointer (worker/checkpoint.h): `dlrm train`'s checkpoints, from a snapshot it keeps.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_snapshot.h"
#include "worker/checkpoint.h"
#include "worker/checkpoint_internal.h"
#include "worker/train_snapshot.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using embedding::AllocateSnapshotBuffer;
using embedding::CheckpointFileEntry;
using embedding::CheckpointManifest;

}  // namespace

using checkpoint_internal::BaseManifest;
using checkpoint_internal::DenseBytes;
using checkpoint_internal::LockCheckpointFolder;
using checkpoint_internal::MakeCheckpointDir;
using checkpoint_internal::PrepareCheckpointRoot;
using checkpoint_internal::WriteDenseBytes;

absl::StatusOr<std::unique_ptr<TrainCheckpointer>> TrainCheckpointer::Create(
    const common::JobSpec& spec, const ValidCheckpoint* resumed) {
  const std::string& root = spec.checkpoint.dir;
  if (root.empty()) return absl::InvalidArgumentError("checkpoint.dir is empty");
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return FileError(ec, absl::StrCat("checkpoint.dir ", root));
  std::unique_ptr<TrainCheckpointer> c(new TrainCheckpointer(spec));
  // Locked before anything in the folder is read or removed: a second run would otherwise take
  // the first's unfinished checkpoint for a crash's leftovers and remove it.
  DLRM_ASSIGN_OR_RETURN(c->lock_fd_,
                        LockCheckpointFolder(root, absl::StrCat("process ", ::getpid()), ""));
  const CheckpointManifest* resumed_manifest =
      resumed != nullptr && !resumed->chain.empty() ? &resumed->chain.back() : nullptr;
  DLRM_RETURN_IF_ERROR(
      CheckNoNewerCheckpoints(root, resumed_manifest != nullptr ? resumed_manifest->step : 0));
  DLRM_RETURN_IF_ERROR(PrepareCheckpointRoot(root));
  // The next checkpoint builds on the resumed one when that is a checkpoint of this root, found
  // by its folder's name (a renamed copy, e.g. ckpt-final, is not one: the next is full).
  const std::string resumed_name =
      resumed_manifest != nullptr ? fs::path(resumed->dir).filename().string() : "";
  if (resumed_manifest != nullptr && embedding::IsCheckpointDirName(resumed_name) &&
      fs::equivalent(fs::path(resumed->dir).parent_path(), fs::path(root), ec)) {
    c->parent_ = resumed_name;
    c->parent_created_unix_ = resumed_manifest->created_unix;
    c->last_step_ = resumed_manifest->step;
    // The chain since its full base counts toward full_every.
    c->since_full_ = static_cast<int>(resumed->chain.size());
  }
  return c;
}

bool TrainCheckpointer::Due(int64_t step) const {
  const common::CheckpointSpec& c = spec_.checkpoint;
  if (step <= last_step_) return false;
  if (c.every_steps > 0 && step % c.every_steps == 0) return true;
  if (c.every_seconds > 0) {
    const double since =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_time_).count();
    if (since >= c.every_seconds) return true;
  }
  return false;
}

absl::StatusOr<CheckpointWriteResult> TrainCheckpointer::Write(
    Trainer& trainer, embedding::LocalEmbeddingStore& store, const TrainPosition& position) {
  DLRM_ASSIGN_OR_RETURN(double stall, Start(trainer, store, position));
  (void)stall;
  return Finish();
}

// What a checkpoint of `dlrm train` writes, copied at the step it is taken (the snapshot).
// `ids` / `rows` (the base): every row the store had changed since it was created, as of the
// checkpoint before; `changed_ids` / `changed_rows`: the rows changed since, gathered at the cut
// (one read of each row in the table, written in order). A checkpoint writes the two merged
// (full) or the changed rows alone (incremental, manifest.incremental); after the write the
// changed rows are applied to the base (`base_ready` again), which becomes the next one's.
struct TrainCheckpointer::Snapshot {
  using Table = checkpoint_internal::SnapshotTable;
  // The base holds every changed row as of this snapshot's checkpoint (its write applied them).
  bool base_ready = false;
  CheckpointManifest manifest;
  std::string dir;
  std::string dense;  // dense.bin's bytes
  std::vector<Table> tables;
  std::chrono::steady_clock::time_point start;
};

// A pre-copy's chunks of rows: its thread copies them from the first on; a Start that comes
// before it is done copies from the last on, so that the rest is copied on two threads while
// training waits.
struct TrainCheckpointer::PreCopyWork {
  // A chunk at a time under its table's lock (CopyRowsAndClearChanged), so that training waits
  // at most one chunk's copy for a table's lock.
  static constexpr size_t kChunkRows = 8192;
  struct Chunk {
    Snapshot::Table* rows;
    size_t begin, n;
  };

  // The chunks to copy, or none (the pre-copy gave up); a Start that helps waits for this.
  void List(std::vector<Chunk> all) {
    absl::MutexLock lock(&mu);
    chunks = std::move(all);
    back = chunks.size();
    listed = true;
  }
  // Copies unclaimed chunks, from the first or from the last, until none is left; how many.
  size_t CopyAll(embedding::LocalEmbeddingStore& store, bool from_front) {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&listed));
    }
    for (size_t copied = 0;; ++copied) {
      Chunk chunk;
      {
        absl::MutexLock lock(&mu);
        if (front == back) return copied;
        chunk = from_front ? chunks[front++] : chunks[--back];
      }
      Snapshot::Table& rows = *chunk.rows;
      store.CopyRowsAndClearChanged(rows.table,
                                    absl::MakeConstSpan(rows.ids.data() + chunk.begin, chunk.n),
                                    rows.rows.get() + chunk.begin * rows.row_floats);
    }
  }

  absl::Mutex mu;
  std::vector<Chunk> chunks ABSL_GUARDED_BY(mu);
  size_t front ABSL_GUARDED_BY(mu) = 0;  // chunks [front, back) are not claimed yet
  size_t back ABSL_GUARDED_BY(mu) = 0;
  bool listed ABSL_GUARDED_BY(mu) = false;
};

using checkpoint_internal::ApplyAndClearChangedRows;
using checkpoint_internal::CopyChangedOverBase;
using checkpoint_internal::CopySnapshotRows;
using checkpoint_internal::GatherChangedRows;

absl::StatusOr<double> TrainCheckpointer::Start(Trainer& trainer,
                                                embedding::LocalEmbeddingStore& store,
                                                const TrainPosition& position, bool last) {
  // One write at a time: the previous one's outcome is reported here.
  if (writer_.joinable()) {
    absl::StatusOr<CheckpointWriteResult> previous = Finish();
    if (!previous.ok()) return previous.status();
  }
  const auto start = std::chrono::steady_clock::now();
  if (prepare_thread_.joinable()) prepare_thread_.join();
  if (precopy_thread_.joinable()) {
    // The pre-copy's rows are a base like a written snapshot's: only the rows changed since
    // they were copied are copied now. What it has not copied yet is copied from the other end
    // here, on this thread too.
    const size_t helped = precopy_work_->CopyAll(store, /*from_front=*/false);
    precopy_chunks_helped_ = helped;
    precopy_thread_.join();
    if (precopy_ != nullptr) {
      absl::MutexLock lock(&precopy_work_->mu);
      DLRM_LOG(INFO) << "checkpoint at step " << position.step << ": on a pre-copy of its rows ("
                     << precopy_seconds_.load() << " s, " << helped << " of its "
                     << precopy_work_->chunks.size() << " chunks copied while training waited)";
      last_snapshot_ = std::move(precopy_);
    }
    precopy_work_.reset();
  }
  // GPU tables: the store holds the trained rows only after this copy.
  DLRM_RETURN_IF_ERROR(trainer.CopyEmbeddingsToStore());
  const common::JobSpec& spec = spec_;
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->start = start;
  DLRM_ASSIGN_OR_RETURN(snapshot->manifest, BaseManifest(spec, spec_yaml_, trainer, position, 1));
  CheckpointManifest& m = snapshot->manifest;
  // A last snapshot whose write failed is not a base, nor its checkpoint a parent.
  const bool base_lost = last_snapshot_ != nullptr && !last_snapshot_->base_ready;
  if (base_lost) last_snapshot_.reset();
  m.incremental = !parent_.empty() && !base_lost && since_full_ < spec.checkpoint.full_every &&
                  spec.checkpoint.full_every > 1;
  if (m.incremental) {
    m.parent = parent_;
    m.parent_created_unix = parent_created_unix_;
  }

  DLRM_ASSIGN_OR_RETURN(snapshot->dense, DenseBytes(trainer));
  // The base of the last snapshot, once written and its changed rows applied, is every changed
  // row as of the last checkpoint: only the rows changed since are copied now. Without one (the
  // first checkpoint of this process), every row the store has changed is.
  const bool have_base =
      last_snapshot_ != nullptr && last_snapshot_->tables.size() == store.tables().size();
  // Each table's changed ids and rows, the tables shared between two threads (training waits).
  const int num_tables = static_cast<int>(store.tables().size());
  snapshot->tables.resize(num_tables);
  std::vector<absl::Status> table_status(num_tables);
  auto snapshot_table = [&](int t) -> absl::Status {
    // Changed ids are taken in every checkpoint, so the next one is relative to it.
    std::vector<int64_t> changed = store.TakeChangedIds(t);
    const embedding::EmbeddingTable& table = store.table(t);
    Snapshot::Table& rows = snapshot->tables[t];
    rows.table = t;
    rows.row_floats = table.row_stride();
    if (last) {
      // Nothing updates the table before the write ends: it is read in place.
      rows.live = &table;
      if (m.incremental) {
        rows.changed_ids = std::move(changed);
      } else {
        store.TouchedIds(t, &rows.ids);
      }
      return absl::OkStatus();
    }
    if (have_base) {
      Snapshot::Table& base = last_snapshot_->tables[t];
      rows.ids.swap(base.ids);
      rows.rows = std::move(base.rows);
      rows.capacity = base.capacity;
      rows.changed_rows.swap(base.changed_rows);  // its memory, reused
    } else {
      if (t < static_cast<int>(prepared_.size())) rows.ids.swap(prepared_[t].ids);
      store.TouchedIds(t, &rows.ids);  // sorted
      // Prepared memory when there is enough, else uninitialised (no zero fill to pay for);
      // CopySnapshotRows fills it below.
      const size_t floats = rows.ids.size() * rows.row_floats;
      if (t < static_cast<int>(prepared_.size()) && prepared_[t].floats >= floats) {
        rows.rows = std::move(prepared_[t].rows);
        rows.capacity = prepared_[t].floats;
      } else {
        rows.rows = AllocateSnapshotBuffer(floats);
        rows.capacity = floats;
      }
      if (rows.rows == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat("checkpoint snapshot of table ", t,
                                                         ": cannot allocate ",
                                                         floats * sizeof(float), " bytes"));
      }
      // The base is copied whole below: an incremental one's rows are gathered too, and there
      // is nothing to apply after the write.
      rows.changed_in_base = true;
      if (!m.incremental) return absl::OkStatus();
    }
    if (have_base && !m.incremental && changed.size() * 8 > rows.ids.size()) {
      CopyChangedOverBase(store, changed, rows);
    } else {
      GatherChangedRows(store, std::move(changed), rows);
    }
    return absl::OkStatus();
  };
  common::ParallelForOnce(num_tables, 2, [&](int64_t t) { table_status[t] = snapshot_table(t); });
  for (const absl::Status& status : table_status) DLRM_RETURN_IF_ERROR(status);
  std::vector<Snapshot::Table*> full_copies;
  if (!have_base && !last) {
    for (Snapshot::Table& rows : snapshot->tables) full_copies.push_back(&rows);
  }
  CopySnapshotRows(store, full_copies);
  // Training may go on: the files are written from the snapshot.
  parent_ = m.name;
  parent_created_unix_ = m.created_unix;
  since_full_ = m.incremental ? since_full_ + 1 : 1;
  last_step_ = position.step;
  last_time_ = std::chrono::steady_clock::now();
  const double stall = std::chrono::duration<double>(last_time_ - start).count();
  // Its buffers are the next one's base once written and its changed rows applied (base_ready).
  // A last one has none, and it took the changes: a later one copies every row.
  last_snapshot_ = last ? nullptr : snapshot;
  pending_ = std::make_shared<absl::StatusOr<CheckpointWriteResult>>(
      absl::UnknownError("checkpoint write did not finish"));
  writer_ = std::thread([this, snapshot, out = pending_] { *out = WriteSnapshot(*snapshot); });
  return stall;
}

absl::StatusOr<CheckpointWriteResult> TrainCheckpointer::WriteSnapshot(Snapshot& snapshot) {
  const common::JobSpec& spec = spec_;
  CheckpointManifest& m = snapshot.manifest;
  // Made here, not in Start, so that training does not wait for it. A committed one at this step
  // would have been skipped by Due.
  DLRM_ASSIGN_OR_RETURN(snapshot.dir, MakeCheckpointDir(spec.checkpoint.dir, m.name));
  DLRM_ASSIGN_OR_RETURN(CheckpointFileEntry dense_entry,
                        WriteDenseBytes(snapshot.dir, snapshot.dense));
  m.files.push_back(dense_entry);
  // Each file is finished (its write-back started) as it is written, and all are fsynced after.
  std::vector<std::unique_ptr<embedding::RowFileWriter>> finished;
  for (Snapshot::Table& rows : snapshot.tables) {
    const std::string name = embedding::RowFileName(rows.table, 0);
    DLRM_ASSIGN_OR_RETURN(auto writer,
                          embedding::RowFileWriter::Create(absl::StrCat(snapshot.dir, "/", name),
                                                           rows.table, rows.row_floats));
    // A full checkpoint: the base and the changed rows merged in id order, a changed row in
    // place of the base's. An incremental one: the changed rows. A last one reads the table.
    const size_t row_floats = rows.row_floats;
    const std::vector<int64_t>& changed = rows.changed_ids;
    int64_t written = 0;
    if (!m.incremental) {
      size_t i = 0, j = 0;
      while (i < rows.ids.size() || j < changed.size()) {
        const bool from_base =
            j == changed.size() || (i < rows.ids.size() && rows.ids[i] < changed[j]);
        const int64_t id = from_base ? rows.ids[i] : changed[j];
        const float* row = rows.live != nullptr ? rows.live->Row(id)
                           : from_base          ? rows.rows.get() + i * row_floats
                                                : rows.changed_rows.data() + j * row_floats;
        if (!from_base && i < rows.ids.size() && rows.ids[i] == id) ++i;  // the base's is older
        (from_base ? i : j)++;
        DLRM_RETURN_IF_ERROR(writer->AppendRow(id, row));
        ++written;
      }
    } else {
      for (size_t k = 0; k < changed.size(); ++k) {
        const float* row = rows.live != nullptr ? rows.live->Row(changed[k])
                                                : rows.changed_rows.data() + k * row_floats;
        DLRM_RETURN_IF_ERROR(writer->AppendRow(changed[k], row));
        ++written;
      }
    }
    DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, writer->Finish());
    finished.push_back(std::move(writer));
    m.files.push_back(CheckpointFileEntry{.name = name,
                                          .kind = "rows",
                                          .table = rows.table,
                                          .part = 0,
                                          .rows = written,
                                          .bytes = d.bytes,
                                          .crc32c = d.crc32c});
  }
  DLRM_RETURN_IF_ERROR(embedding::SyncAll(finished));
  DLRM_RETURN_IF_ERROR(embedding::SyncDirectory(snapshot.dir));
  DLRM_RETURN_IF_ERROR(embedding::CommitManifest(snapshot.dir, m));
  // Committed: an older checkpoint that cannot be removed stays, and training goes on.
  if (absl::StatusOr<int> removed =
          embedding::ApplyRetention(spec.checkpoint.dir, spec.checkpoint.keep_last);
      !removed.ok()) {
    DLRM_LOG(WARNING) << "checkpoint " << snapshot.dir << " committed; "
                      << removed.status().message();
  }
  // The next checkpoint's base: every changed row as of this one.
  for (Snapshot::Table& rows : snapshot.tables)
    DLRM_RETURN_IF_ERROR(ApplyAndClearChangedRows(rows));
  snapshot.base_ready = true;
  CheckpointWriteResult result;
  result.dir = snapshot.dir;
  result.manifest = m;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - snapshot.start).count();
  DLRM_LOG(INFO) << "checkpoint " << result.dir << ": step " << m.step << ", "
                 << (m.incremental ? "incremental" : "full") << ", " << m.total_bytes()
                 << " bytes in " << result.seconds << " s";
  return result;
}

absl::StatusOr<CheckpointWriteResult> TrainCheckpointer::Finish() {
  if (!writer_.joinable()) {
    return absl::FailedPreconditionError("no checkpoint write in flight");
  }
  writer_.join();
  absl::StatusOr<CheckpointWriteResult> result = std::move(*pending_);
  pending_.reset();
  return result;
}

TrainCheckpointer::~TrainCheckpointer() {
  if (prepare_thread_.joinable()) prepare_thread_.join();
  if (precopy_thread_.joinable()) precopy_thread_.join();
  if (writer_.joinable()) writer_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void TrainCheckpointer::PrepareSnapshotMemory(const embedding::LocalEmbeddingStore& store) {
  if (prepare_thread_.joinable() || last_snapshot_ != nullptr) return;
  std::vector<std::pair<size_t, size_t>> sizes;  // rows, floats
  for (int t = 0; t < static_cast<int>(store.tables().size()); ++t) {
    const embedding::EmbeddingTable& table = store.table(t);
    sizes.emplace_back(table.rows(), static_cast<size_t>(table.rows()) * table.row_stride());
  }
  prepare_thread_ = std::thread([this, sizes] {
    common::NameThisThread("dlrm-ckpt-prep");
    const auto begin = std::chrono::steady_clock::now();
    std::vector<PreparedTable> tables;
    for (const auto& [rows, n] : sizes) {
      PreparedTable prepared;
      prepared.rows = AllocateSnapshotBuffer(n);
      if (prepared.rows == nullptr) break;  // the first checkpoint allocates what it needs then
      // One write a page maps it (with transparent huge pages, a write per 2 MiB would do).
      constexpr size_t kPageFloats = 4096 / sizeof(float);
      for (size_t i = 0; i < n; i += kPageFloats) prepared.rows[i] = 0;
      prepared.floats = n;
      prepared.ids.resize(rows);  // its pages mapped by the zero fill; the capacity stays
      prepared.ids.clear();
      tables.push_back(std::move(prepared));
    }
    prepared_ = std::move(tables);
    prepare_seconds_.store(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  });
}

void TrainCheckpointer::StartPreCopyIfNear(const Trainer& trainer,
                                           embedding::LocalEmbeddingStore& store, int64_t step) {
  if (precopy_started_ || last_snapshot_ != nullptr || writer_.joinable() || trainer.gpu_tables()) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (last_step_seen_ != std::chrono::steady_clock::time_point{}) {
    const double dt = std::chrono::duration<double>(now - last_step_seen_).count();
    step_seconds_ = step_seconds_ == 0 ? dt : 0.8 * step_seconds_ + 0.2 * dt;
  }
  last_step_seen_ = now;
  const common::CheckpointSpec& c = spec_.checkpoint;
  const bool full_next = parent_.empty() || c.full_every <= 1 || since_full_ >= c.full_every;
  if (!full_next) return;  // an incremental one writes only what changed since its parent
  if (table_bytes_ == 0) {
    for (int t = 0; t < static_cast<int>(store.tables().size()); ++t) {
      const embedding::EmbeddingTable& table = store.table(t);
      table_bytes_ += static_cast<double>(table.rows()) * table.row_stride() * sizeof(float);
    }
  }
  const double lead = 2 * table_bytes_ / kPreCopyBytesPerSecond;
  // Checkpoints this frequent are taken before many rows are touched: a pre-copy would copy few
  // of them, and the rest would be copied one by one as new rows.
  const double interval =
      c.every_steps > 0 ? c.every_steps * step_seconds_ : static_cast<double>(c.every_seconds);
  if (interval > 0 && interval < 2 * lead) return;
  bool near = false;
  if (c.every_steps > 0) {
    const int64_t left = (step / c.every_steps + 1) * c.every_steps - step;  // steps to train
    near = step_seconds_ > 0 ? left == 1 || left * step_seconds_ <= lead : left <= 2;
  }
  if (c.every_seconds > 0) {
    const double since = std::chrono::duration<double>(now - last_time_).count();
    near = near || since >= c.every_seconds - lead;
  }
  if (!near) return;
  if (prepare_thread_.joinable()) prepare_thread_.join();
  const int num_tables = static_cast<int>(store.tables().size());
  if (static_cast<int>(prepared_.size()) != num_tables) return;  // no memory readied: as before
  precopy_started_ = true;
  std::vector<int> row_floats(num_tables);
  for (int t = 0; t < num_tables; ++t) row_floats[t] = store.table(t).row_stride();
  auto work = std::make_shared<PreCopyWork>();
  precopy_work_ = work;
  precopy_thread_ = std::thread([this, &store, num_tables, row_floats, work] {
    common::NameThisThread("dlrm-ckpt-pre");
    const auto begin = std::chrono::steady_clock::now();
    auto pre = std::make_shared<Snapshot>();
    pre->tables.resize(num_tables);
    std::vector<PreCopyWork::Chunk> chunks;
    for (int t = 0; t < num_tables; ++t) {
      Snapshot::Table& rows = pre->tables[t];
      rows.table = t;
      rows.row_floats = row_floats[t];
      rows.ids.swap(prepared_[t].ids);
      store.TouchedIds(t, &rows.ids);  // sorted; rows first touched later are new rows then
      const size_t floats = rows.ids.size() * rows.row_floats;
      if (prepared_[t].floats < floats) {  // PrepareSnapshotMemory readies every row
        work->List({});
        return;
      }
    }
    for (int t = 0; t < num_tables; ++t) {
      Snapshot::Table& rows = pre->tables[t];
      rows.rows = std::move(prepared_[t].rows);
      rows.capacity = prepared_[t].floats;
      prepared_[t].floats = 0;  // moved: a Start without this pre-copy allocates its own
      for (size_t i = 0; i < rows.ids.size(); i += PreCopyWork::kChunkRows) {
        chunks.push_back({&rows, i, std::min(PreCopyWork::kChunkRows, rows.ids.size() - i)});
      }
    }
    work->List(std::move(chunks));
    work->CopyAll(store, /*from_front=*/true);
    pre->base_ready = true;
    precopy_ = std::move(pre);
    precopy_seconds_.store(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  });
}

}  // namespace dlrm::worker
