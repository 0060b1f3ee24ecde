// TrainCheckpointer (worker/checkpoint.h): `dlrm train`'s checkpoints, from a snapshot it keeps.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_snapshot.h"
#include "worker/checkpoint.h"
#include "worker/checkpoint_internal.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using embedding::AllocateSnapshotBuffer;
using embedding::CheckpointFileEntry;
using embedding::CheckpointManifest;
using embedding::SnapshotBuffer;

}  // namespace

using checkpoint_internal::BaseManifest;
using checkpoint_internal::DenseBytes;
using checkpoint_internal::MakeCheckpointDir;
using checkpoint_internal::PrepareCheckpointRoot;
using checkpoint_internal::SeekSorted;
using checkpoint_internal::WriteDenseBytes;

absl::StatusOr<std::unique_ptr<TrainCheckpointer>> TrainCheckpointer::Create(
    const common::JobSpec& spec, const std::string& resumed_from) {
  const std::string& root = spec.checkpoint.dir;
  if (root.empty()) return absl::InvalidArgumentError("checkpoint.dir is empty");
  DLRM_RETURN_IF_ERROR(PrepareCheckpointRoot(root));
  std::error_code ec;
  std::unique_ptr<TrainCheckpointer> c(new TrainCheckpointer(spec));
  if (!resumed_from.empty() &&
      fs::equivalent(fs::path(resumed_from).parent_path(), fs::path(root), ec)) {
    DLRM_ASSIGN_OR_RETURN(CheckpointManifest m, embedding::ReadManifest(resumed_from));
    c->parent_ = m.name;
    c->last_step_ = m.step;
    // The chain since its full base counts toward full_every.
    DLRM_ASSIGN_OR_RETURN(auto chain, embedding::LoadChain(resumed_from));
    c->since_full_ = static_cast<int>(chain.size());
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
// Every row the store has changed since it was created, as of the last checkpoint: `ids` with
// their rows (the base), plus `new_ids` first changed since the checkpoint before (kept apart so
// that the cut copies only what changed; the writer merges them into the base after the write).
// A checkpoint writes all of them (full) or `write_ids` (incremental, manifest.incremental).
struct TrainCheckpointer::Snapshot {
  struct Table {
    int table = 0;
    int row_floats = 0;
    std::vector<int64_t> ids;        // sorted
    SnapshotBuffer rows;             // ids.size() x row_floats, in id order
    size_t capacity = 0;             // floats allocated in `rows`
    std::vector<int64_t> new_ids;    // sorted, none of them in `ids`
    std::vector<float> new_rows;     // new_ids.size() x row_floats
    std::vector<int64_t> write_ids;  // an incremental one's rows (sorted)
    std::vector<int64_t> write_pos;  // each one's index in ids, or ~its index in new_ids
    // A last checkpoint's rows: read from the table itself by id (no rows, new_ids, write_pos).
    const embedding::EmbeddingTable* live = nullptr;
  };
  CheckpointManifest manifest;
  std::string dir;
  std::string dense;  // dense.bin's bytes
  std::vector<Table> tables;
  std::chrono::steady_clock::time_point start;
};

namespace {

// Copies the rows of every table's ids into its snapshot buffer, in chunks spread over two
// threads: one thread copies at about 2.6 GB/s on this project's machines, short of what the
// memory gives two (docs/BENCHMARKS.md, "Checkpoints"). Runs of consecutive ids are one memcpy.
template <typename SnapshotTable>
void CopySnapshotRows(const embedding::LocalEmbeddingStore& store,
                      const std::vector<SnapshotTable*>& tables) {
  constexpr size_t kChunkRows = 8192;
  struct Chunk {
    SnapshotTable* rows;
    size_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (SnapshotTable* rows : tables) {
    for (size_t i = 0; i < rows->ids.size(); i += kChunkRows) {
      chunks.push_back({rows, i, std::min(rows->ids.size(), i + kChunkRows)});
    }
  }
  common::ParallelForOnce(static_cast<int64_t>(chunks.size()), 2, [&](int64_t c) {
    const Chunk& chunk = chunks[c];
    SnapshotTable& rows = *chunk.rows;
    const embedding::EmbeddingTable& table = store.table(rows.table);
    const size_t row_bytes = rows.row_floats * sizeof(float);
    for (size_t i = chunk.begin; i < chunk.end;) {
      size_t end = i + 1;
      while (end < chunk.end && rows.ids[end] == rows.ids[end - 1] + 1) ++end;
      std::memcpy(rows.rows.get() + i * rows.row_floats, table.Row(rows.ids[i]),
                  (end - i) * row_bytes);
      i = end;
    }
  });
}

// Brings a snapshot table that held every changed row as of the last checkpoint up to now:
// `changed` (sorted: the rows changed since) are copied over their old values in the base, or
// into new_ids / new_rows when the base lacks them. With `positions` (an incremental
// checkpoint's, which its write reads the rows by), each changed id's place: its index in ids,
// or ~its index in new_ids.
template <typename SnapshotTable>
absl::Status UpdateSnapshotTable(const embedding::LocalEmbeddingStore& store,
                                 const std::vector<int64_t>& changed, SnapshotTable& rows,
                                 std::vector<int64_t>* positions) {
  if (!rows.new_ids.empty()) {
    return absl::InternalError("checkpoint snapshot: the last write did not merge its new rows");
  }
  const embedding::EmbeddingTable& table = store.table(rows.table);
  const size_t row_floats = rows.row_floats;
  const std::vector<int64_t>& base = rows.ids;
  if (positions != nullptr) positions->resize(changed.size());
  // In chunks on two threads, each in blocks: the block's ids found in the base first (searches
  // that do not wait on one another), then their rows copied over their old values with the
  // rows a few ids ahead already requested. The ids the base lacks are listed.
  constexpr size_t kChunk = 65536, kBlock = 512, kAhead = 8;
  const size_t chunks = (changed.size() + kChunk - 1) / kChunk;
  std::vector<std::vector<size_t>> missing(chunks);  // indices into `changed`
  common::ParallelForOnce(static_cast<int64_t>(chunks), 2, [&](int64_t c) {
    const size_t chunk_end = std::min(changed.size(), (c + 1) * kChunk);
    for (size_t begin = c * kChunk; begin < chunk_end; begin += kBlock) {
      const size_t n = std::min(kBlock, chunk_end - begin);
      int64_t at[kBlock];
      for (size_t k = 0; k < n; ++k) {
        // Consecutive changed ids (most rows changed) are consecutive in the base: the place
        // after the last one is checked before a search.
        const int64_t id = changed[begin + k];
        const size_t next = k > 0 && at[k - 1] >= 0 ? static_cast<size_t>(at[k - 1]) + 1 : 0;
        const size_t found =
            next > 0 && next < base.size() && base[next] == id ? next : SeekSorted(base, 0, id);
        at[k] = found < base.size() && base[found] == id ? static_cast<int64_t>(found) : -1;
        if (at[k] < 0) missing[c].push_back(begin + k);
      }
      for (size_t k = 0; k < n; ++k) {
        if (k + kAhead < n && at[k + kAhead] >= 0) {
          __builtin_prefetch(table.Row(changed[begin + k + kAhead]));
          __builtin_prefetch(rows.rows.get() + at[k + kAhead] * row_floats, 1);
        }
        if (at[k] < 0) continue;
        std::memcpy(rows.rows.get() + at[k] * row_floats, table.Row(changed[begin + k]),
                    row_floats * sizeof(float));
      }
      if (positions != nullptr) std::copy(at, at + n, positions->begin() + begin);
    }
  });
  for (const std::vector<size_t>& m : missing) {
    for (size_t k : m) {
      if (positions != nullptr) (*positions)[k] = ~static_cast<int64_t>(rows.new_ids.size());
      rows.new_ids.push_back(changed[k]);
    }
  }
  rows.new_rows.resize(rows.new_ids.size() * row_floats);
  for (size_t i = 0; i < rows.new_ids.size(); ++i) {
    std::memcpy(rows.new_rows.data() + i * row_floats, table.Row(rows.new_ids[i]),
                row_floats * sizeof(float));
  }
  return absl::OkStatus();
}

// Merges new_ids / new_rows into the base (after the write, off the training path): in place,
// from the end, when the base's buffer has room, else into a larger one (an eighth to spare, so
// that later merges are in place).
template <typename SnapshotTable>
absl::Status MergeNewRows(SnapshotTable& rows) {
  if (rows.new_ids.empty()) return absl::OkStatus();
  const size_t row_floats = rows.row_floats;
  const size_t old_n = rows.ids.size(), added = rows.new_ids.size(), n = old_n + added;
  if (rows.capacity < n * row_floats) {
    const size_t capacity = (n + n / 8) * row_floats;
    SnapshotBuffer bigger = AllocateSnapshotBuffer(capacity);
    if (bigger == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("checkpoint snapshot of table ", rows.table,
                                                       ": cannot allocate ", capacity * 4,
                                                       " bytes"));
    }
    if (old_n > 0) std::memcpy(bigger.get(), rows.rows.get(), old_n * row_floats * sizeof(float));
    rows.rows = std::move(bigger);
    rows.capacity = capacity;
  }
  rows.ids.resize(n);
  float* data = rows.rows.get();
  // From the end: each base row moves up by the number of new ids above it.
  size_t i = old_n, j = added, k = n;
  while (j > 0) {
    if (i > 0 && rows.ids[i - 1] > rows.new_ids[j - 1]) {
      size_t run = 1;  // base rows above the next new id move together
      while (i - run > 0 && rows.ids[i - run - 1] > rows.new_ids[j - 1]) ++run;
      std::memmove(data + (k - run) * row_floats, data + (i - run) * row_floats,
                   run * row_floats * sizeof(float));
      for (size_t r = 1; r <= run; ++r) rows.ids[k - r] = rows.ids[i - r];
      i -= run;
      k -= run;
    } else {
      --j;
      --k;
      rows.ids[k] = rows.new_ids[j];
      std::memcpy(data + k * row_floats, rows.new_rows.data() + j * row_floats,
                  row_floats * sizeof(float));
    }
  }
  rows.new_ids.clear();
  rows.new_rows.clear();
  return absl::OkStatus();
}

}  // namespace

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
    // they were copied are copied now.
    precopy_thread_.join();
    if (precopy_ != nullptr) {
      DLRM_LOG(INFO) << "checkpoint at step " << position.step << ": on a pre-copy of its rows ("
                     << precopy_seconds_.load() << " s, while training went on)";
      last_snapshot_ = std::move(precopy_);
    }
  }
  // GPU tables: the store holds the trained rows only after this copy.
  DLRM_RETURN_IF_ERROR(trainer.CopyEmbeddingsToStore());
  const common::JobSpec& spec = spec_;
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->start = start;
  DLRM_ASSIGN_OR_RETURN(snapshot->manifest, BaseManifest(spec, trainer, position, 1));
  CheckpointManifest& m = snapshot->manifest;
  m.incremental = !parent_.empty() && since_full_ < spec.checkpoint.full_every &&
                  spec.checkpoint.full_every > 1;
  if (m.incremental) m.parent = parent_;

  // A committed one at this step would have been skipped by Due.
  DLRM_ASSIGN_OR_RETURN(snapshot->dir, MakeCheckpointDir(spec.checkpoint.dir, m.name));
  snapshot->dense = DenseBytes(trainer);
  // The base of the last snapshot, once written and merged, is every changed row as of the last
  // checkpoint: only the rows changed since are copied now. Without one (the first checkpoint of
  // this process), every row the store has changed is.
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
        rows.write_ids = std::move(changed);
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
      rows.write_pos.swap(base.write_pos);  // its memory, reused
      DLRM_RETURN_IF_ERROR(
          UpdateSnapshotTable(store, changed, rows, m.incremental ? &rows.write_pos : nullptr));
    } else {
      store.TouchedIds(t, &rows.ids);  // sorted
      // Prepared memory when there is enough, else uninitialised (no zero fill to pay for);
      // CopySnapshotRows fills it below.
      const size_t floats = rows.ids.size() * rows.row_floats;
      if (t < static_cast<int>(prepared_.size()) && prepared_[t].second >= floats) {
        rows.rows = std::move(prepared_[t].first);
        rows.capacity = prepared_[t].second;
      } else {
        rows.rows = AllocateSnapshotBuffer(floats);
        rows.capacity = floats;
      }
      if (rows.rows == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat("checkpoint snapshot of table ", t,
                                                         ": cannot allocate ",
                                                         floats * sizeof(float), " bytes"));
      }
      if (m.incremental) {
        // Every changed id is among the touched ones just listed.
        rows.write_pos.resize(changed.size());
        for (size_t k = 0; k < changed.size(); ++k) {
          const size_t at = SeekSorted(rows.ids, 0, changed[k]);
          if (at == rows.ids.size() || rows.ids[at] != changed[k]) {
            return absl::InternalError(absl::StrCat("checkpoint snapshot of table ", t,
                                                    ": changed row ", changed[k],
                                                    " is not among the touched ones"));
          }
          rows.write_pos[k] = static_cast<int64_t>(at);
        }
      }
    }
    if (m.incremental) rows.write_ids = std::move(changed);
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
  since_full_ = m.incremental ? since_full_ + 1 : 1;
  last_step_ = position.step;
  last_time_ = std::chrono::steady_clock::now();
  const double stall = std::chrono::duration<double>(last_time_ - start).count();
  // Its buffers are reused by the next one once written. A last one has none, and it took the
  // changes: a later one copies every row.
  last_snapshot_ = last ? nullptr : snapshot;
  pending_ = std::make_shared<absl::StatusOr<CheckpointWriteResult>>(
      absl::UnknownError("checkpoint write did not finish"));
  writer_ = std::thread([this, snapshot, out = pending_] { *out = WriteSnapshot(*snapshot); });
  return stall;
}

absl::StatusOr<CheckpointWriteResult> TrainCheckpointer::WriteSnapshot(Snapshot& snapshot) {
  const common::JobSpec& spec = spec_;
  CheckpointManifest& m = snapshot.manifest;
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
    // A full checkpoint: the base and the new rows, merged in id order. An incremental one: its
    // ids, each found in one or the other.
    const size_t row_floats = rows.row_floats;
    int64_t written = 0;
    if (!m.incremental) {
      size_t i = 0, j = 0;
      while (i < rows.ids.size() || j < rows.new_ids.size()) {
        const bool from_base =
            j == rows.new_ids.size() || (i < rows.ids.size() && rows.ids[i] < rows.new_ids[j]);
        const int64_t id = from_base ? rows.ids[i] : rows.new_ids[j];
        const float* row = rows.live != nullptr ? rows.live->Row(id)
                           : from_base          ? rows.rows.get() + i * row_floats
                                                : rows.new_rows.data() + j * row_floats;
        (from_base ? i : j)++;
        DLRM_RETURN_IF_ERROR(writer->AppendRow(id, row));
        ++written;
      }
    } else {
      // By the places UpdateSnapshotTable found (a last one's: by id, in the table), with the
      // rows a few ids ahead already requested.
      constexpr size_t kAhead = 8;
      if (rows.live == nullptr && rows.write_pos.size() != rows.write_ids.size()) {
        return absl::InternalError(absl::StrCat("checkpoint snapshot of table ", rows.table,
                                                " lacks the places of its changed rows"));
      }
      auto row_of = [&](size_t k) -> const float* {
        if (rows.live != nullptr) return rows.live->Row(rows.write_ids[k]);
        const int64_t pos = rows.write_pos[k];
        return pos >= 0 ? rows.rows.get() + pos * row_floats
                        : rows.new_rows.data() + ~pos * row_floats;
      };
      for (size_t k = 0; k < rows.write_ids.size(); ++k) {
        if (k + kAhead < rows.write_ids.size()) __builtin_prefetch(row_of(k + kAhead));
        DLRM_RETURN_IF_ERROR(writer->AppendRow(rows.write_ids[k], row_of(k)));
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
  for (auto& writer : finished) DLRM_RETURN_IF_ERROR(writer->Sync());
  DLRM_RETURN_IF_ERROR(embedding::SyncDirectory(snapshot.dir));
  DLRM_RETURN_IF_ERROR(embedding::CommitManifest(snapshot.dir, m));
  DLRM_ASSIGN_OR_RETURN(int removed,
                        embedding::ApplyRetention(spec.checkpoint.dir, spec.checkpoint.keep_last));
  (void)removed;
  // The next checkpoint's base: every changed row as of this one.
  for (Snapshot::Table& rows : snapshot.tables) DLRM_RETURN_IF_ERROR(MergeNewRows(rows));
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
}

void TrainCheckpointer::PrepareSnapshotMemory(const embedding::LocalEmbeddingStore& store) {
  if (prepare_thread_.joinable() || last_snapshot_ != nullptr) return;
  std::vector<size_t> floats;
  for (int t = 0; t < static_cast<int>(store.tables().size()); ++t) {
    const embedding::EmbeddingTable& table = store.table(t);
    floats.push_back(static_cast<size_t>(table.rows()) * table.row_stride());
  }
  prepare_thread_ = std::thread([this, floats] {
    common::NameThisThread("dlrm-ckpt-prep");
    const auto begin = std::chrono::steady_clock::now();
    std::vector<std::pair<SnapshotBuffer, size_t>> buffers;
    for (size_t n : floats) {
      SnapshotBuffer buffer = AllocateSnapshotBuffer(n);
      if (buffer == nullptr) break;  // the first checkpoint allocates what it needs then
      // One write a page maps it (with transparent huge pages, a write per 2 MiB would do).
      constexpr size_t kPageFloats = 4096 / sizeof(float);
      for (size_t i = 0; i < n; i += kPageFloats) buffer[i] = 0;
      buffers.emplace_back(std::move(buffer), n);
    }
    prepared_ = std::move(buffers);
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
  precopy_thread_ = std::thread([this, &store, num_tables, row_floats] {
    common::NameThisThread("dlrm-ckpt-pre");
    const auto begin = std::chrono::steady_clock::now();
    auto pre = std::make_shared<Snapshot>();
    pre->tables.resize(num_tables);
    // A chunk at a time, so that training waits at most one chunk's copy for a table's lock.
    constexpr size_t kChunkRows = 8192;
    for (int t = 0; t < num_tables; ++t) {
      Snapshot::Table& rows = pre->tables[t];
      rows.table = t;
      rows.row_floats = row_floats[t];
      store.TouchedIds(t, &rows.ids);  // sorted; rows first touched later are new rows then
      const size_t floats = rows.ids.size() * rows.row_floats;
      if (prepared_[t].second < floats) return;  // PrepareSnapshotMemory readies every row
      rows.rows = std::move(prepared_[t].first);
      rows.capacity = prepared_[t].second;
      prepared_[t].second = 0;  // moved: a Start without this pre-copy allocates its own
      for (size_t i = 0; i < rows.ids.size(); i += kChunkRows) {
        const size_t n = std::min(kChunkRows, rows.ids.size() - i);
        store.CopyRowsAndClearChanged(t, absl::MakeConstSpan(rows.ids.data() + i, n),
                                      rows.rows.get() + i * rows.row_floats);
      }
    }
    precopy_ = std::move(pre);
    precopy_seconds_.store(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  });
}

}  // namespace dlrm::worker
