#include "worker/checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_snapshot.h"
#include "embedding/sparse_optimizer_options.h"
#include "worker/ps_client.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using embedding::CheckpointFileEntry;
using embedding::CheckpointManifest;

// dense.bin: "DLRMDENS" | u32 version = 1 | u32 reserved | u64 params | u64 state floats |
// i64 optimizer step | params x f32 | state x f32.
constexpr char kDenseMagic[8] = {'D', 'L', 'R', 'M', 'D', 'E', 'N', 'S'};
constexpr uint32_t kDenseVersion = 1;
constexpr char kDenseFile[] = "dense.bin";

using embedding::AllocateSnapshotBuffer;
using embedding::SnapshotBuffer;

// The bytes of dense.bin for the trainer's dense parameters and optimizer state now.
std::string DenseBytes(Trainer& trainer) {
  dense::DlrmDenseModel& model = trainer.model();
  std::vector<float> params(model.num_params());
  trainer.backend()->CopyToHost(model.params(), params.data(), params.size());
  const std::vector<float> state = model.optimizer().StateToHost();
  char header[40] = {};
  std::memcpy(header, kDenseMagic, 8);
  const uint32_t version[2] = {kDenseVersion, 0};
  std::memcpy(header + 8, version, 8);
  const uint64_t counts[2] = {params.size(), state.size()};
  std::memcpy(header + 16, counts, 16);
  const int64_t step = model.optimizer().step();
  std::memcpy(header + 32, &step, 8);
  std::string bytes(header, sizeof(header));
  bytes.append(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
  bytes.append(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
  return bytes;
}

absl::StatusOr<CheckpointFileEntry> WriteDenseBytes(const std::string& dir,
                                                    const std::string& bytes) {
  DLRM_ASSIGN_OR_RETURN(auto out,
                        embedding::ChecksummedWriter::Create(absl::StrCat(dir, "/", kDenseFile)));
  DLRM_RETURN_IF_ERROR(out->Append(bytes.data(), bytes.size()));
  DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, out->Close());
  return CheckpointFileEntry{
      .name = kDenseFile, .kind = "dense", .bytes = d.bytes, .crc32c = d.crc32c};
}

absl::Status ReadDense(const std::string& path, Trainer& trainer) {
  dense::DlrmDenseModel& model = trainer.model();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  char header[40];
  in.read(header, sizeof(header));
  if (!in || std::memcmp(header, kDenseMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a dense parameter file"));
  }
  uint32_t version[2];
  uint64_t counts[2];
  int64_t step = 0;
  std::memcpy(version, header + 8, 8);
  std::memcpy(counts, header + 16, 16);
  std::memcpy(&step, header + 32, 8);
  if (version[0] != kDenseVersion) {
    return absl::DataLossError(absl::StrCat(path, ": version ", version[0]));
  }
  const size_t want_state = model.optimizer().state().size();
  if (counts[0] != model.num_params() || counts[1] != want_state) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds ", counts[0], " dense parameters and ", counts[1],
        " optimizer state floats; the model has ", model.num_params(), " and ", want_state));
  }
  std::vector<float> params(counts[0]);
  std::vector<float> state(counts[1]);
  in.read(reinterpret_cast<char*>(params.data()), params.size() * sizeof(float));
  in.read(reinterpret_cast<char*>(state.data()), state.size() * sizeof(float));
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    return absl::DataLossError(absl::StrCat(path, ": size does not match its header"));
  }
  trainer.backend()->CopyFromHost(params.data(), model.params(), params.size());
  if (!state.empty()) model.optimizer().StateFromHost(state);
  model.optimizer().set_step(step);
  return absl::OkStatus();
}

// The manifest of a checkpoint of `trainer` at `position` without its files; every one of
// `world_size` ranks is at the same position (ranks of a cluster job step in lockstep over
// equal shards of the input).
absl::StatusOr<CheckpointManifest> BaseManifest(const common::JobSpec& spec, Trainer& trainer,
                                                const TrainPosition& position, int world_size) {
  CheckpointManifest m;
  m.name = embedding::CheckpointDirName(position.step);
  m.job_name = spec.name;
  m.spec_yaml = common::JobSpecToYaml(spec);
  m.step = position.step;
  m.samples = position.samples;
  m.created_unix = absl::ToUnixMicros(absl::Now()) / 1e6;
  m.seed = spec.seed;
  m.world_size = world_size;
  for (int r = 0; r < world_size; ++r) {
    m.ranks.push_back({.rank = r,
                       .epoch = position.epoch,
                       .batches = position.batches,
                       .samples = position.samples / world_size});
  }
  DLRM_ASSIGN_OR_RETURN(embedding::SparseOptimizerOptions sparse, SparseOptimizerFromSpec(spec));
  m.sparse_optimizer = embedding::SparseOptimizerTypeName(sparse.type);
  m.dense_optimizer = spec.dense_optimizer.type;
  m.dense_params = static_cast<int64_t>(trainer.model().num_params());
  const int row_floats =
      spec.embedding_dim + embedding::SparseOptimizerStateFloats(sparse.type, spec.embedding_dim);
  for (const common::TableSpec& t : spec.tables) {
    m.tables.push_back(
        {.name = t.name, .rows = t.rows, .dim = spec.embedding_dim, .row_floats = row_floats});
  }
  return m;
}

// Creates the checkpoint folder `root` if needed and removes what an interrupted write left there.
absl::Status PrepareCheckpointRoot(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("checkpoint.dir ", root, ": ", ec.message()));
  DLRM_ASSIGN_OR_RETURN(int removed, embedding::RemoveUncommitted(root));
  if (removed > 0) {
    DLRM_LOG(WARNING) << "removed " << removed << " unfinished checkpoint(s) under " << root;
  }
  return absl::OkStatus();
}

// Creates (or empties) the directory of checkpoint `name` under `root`.
absl::StatusOr<std::string> MakeCheckpointDir(const std::string& root, const std::string& name) {
  const std::string dir = (fs::path(root) / name).string();
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": ", ec.message()));
  return dir;
}

// Writes the rows of `ids` (sorted here) of table `table` as file `name` in `dir`, each taken
// from row_of(id) (row_floats floats), and returns the file's manifest entry.
absl::StatusOr<CheckpointFileEntry> WriteRows(const std::string& dir, const std::string& name,
                                              const std::string& kind, int table, int part,
                                              int row_floats, std::vector<int64_t> ids,
                                              const std::function<const float*(int64_t)>& row_of) {
  if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());
  DLRM_ASSIGN_OR_RETURN(auto writer, embedding::RowFileWriter::Create(absl::StrCat(dir, "/", name),
                                                                      table, row_floats));
  for (int64_t id : ids) DLRM_RETURN_IF_ERROR(writer->AppendRow(id, row_of(id)));
  DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, writer->Close());
  return CheckpointFileEntry{.name = name,
                             .kind = kind,
                             .table = table,
                             .part = part,
                             .rows = static_cast<int64_t>(ids.size()),
                             .bytes = d.bytes,
                             .crc32c = d.crc32c};
}

// Writes the worker's hot rows (weights and optimizer state, trained values) as part `part`.
absl::Status WriteHotPart(const std::string& dir, Trainer& trainer, int part,
                          std::vector<CheckpointFileEntry>* files) {
  DLRM_RETURN_IF_ERROR(trainer.SyncHotRowsToHost());
  const HotRowCache* hot = trainer.hot_rows();
  if (hot == nullptr || hot->total_rows() == 0) return absl::OkStatus();
  for (int t = 0; t < hot->num_tables(); ++t) {
    if (hot->ids(t).empty()) continue;
    DLRM_ASSIGN_OR_RETURN(
        CheckpointFileEntry entry,
        WriteRows(dir, embedding::RowFileName(t, part), "hot_rows", t, part, hot->row_floats(t),
                  hot->ids(t), [&](int64_t id) { return hot->StoredRow(t, hot->Find(t, id)); }));
    files->push_back(std::move(entry));
  }
  return absl::OkStatus();
}

// The dense architecture of a spec in words, for comparing a checkpoint's with the job's.
std::string DenseArchitecture(const common::JobSpec& spec) {
  std::string cross;
  if (spec.interaction == "dcnv2") {
    cross = absl::StrCat(" (", spec.cross_layers, " cross layers of rank ", spec.low_rank, ")");
  }
  return absl::StrCat(spec.dense_features, " dense features, bottom MLP [",
                      absl::StrJoin(spec.bottom_mlp, ", "), "], interaction ", spec.interaction,
                      cross, ", top MLP [", absl::StrJoin(spec.top_mlp, ", "), "]");
}

}  // namespace

absl::Status CheckCheckpointFitsSpec(const CheckpointManifest& m, const common::JobSpec& spec) {
  if (m.tables.size() != spec.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, " has ", m.tables.size(),
                                                   " tables, the job spec ", spec.tables.size()));
  }
  DLRM_ASSIGN_OR_RETURN(embedding::SparseOptimizerOptions sparse, SparseOptimizerFromSpec(spec));
  const int row_floats =
      spec.embedding_dim + embedding::SparseOptimizerStateFloats(sparse.type, spec.embedding_dim);
  for (size_t t = 0; t < m.tables.size(); ++t) {
    const auto& a = m.tables[t];
    if (a.rows != spec.tables[t].rows || a.dim != spec.embedding_dim ||
        a.row_floats != row_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", m.name, ": table ", t, " (", a.name, ") is ", a.rows, " x ",
                       a.dim, " with ", a.row_floats, " floats per stored row; the job spec's is ",
                       spec.tables[t].rows, " x ", spec.embedding_dim, " with ", row_floats));
    }
  }
  if (m.sparse_optimizer != embedding::SparseOptimizerTypeName(sparse.type)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, ": sparse optimizer ",
                                                   m.sparse_optimizer, ", the job spec's ",
                                                   spec.sparse_optimizer.type));
  }
  if (m.dense_optimizer != spec.dense_optimizer.type) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, ": dense optimizer ",
                                                   m.dense_optimizer, ", the job spec's ",
                                                   spec.dense_optimizer.type));
  }
  // Two architectures may have the same parameter count; the spec they were trained with tells
  // them apart.
  if (auto trained = common::ParseJobSpec(m.spec_yaml, m.name); trained.ok()) {
    const std::string have = DenseArchitecture(*trained), want = DenseArchitecture(spec);
    if (have != want) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, " holds a model with ",
                                                     have, "; the job spec's has ", want));
    }
  }
  return absl::OkStatus();
}

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

// The first position at or after `from` of `sorted` whose id is >= id (sorted.size() if none),
// by galloping: a step when the id is near, a binary search's steps when it is far.
size_t GallopTo(const std::vector<int64_t>& sorted, size_t from, int64_t id) {
  size_t step = 1, hi = from;
  while (hi < sorted.size() && sorted[hi] < id) {
    from = hi;
    hi = from + step;
    step *= 2;
  }
  return std::lower_bound(sorted.begin() + from, sorted.begin() + std::min(hi, sorted.size()), id) -
         sorted.begin();
}

// Brings a snapshot table that held every changed row as of the last checkpoint up to now:
// `changed` (sorted: the rows changed since) are copied over their old values in the base, or
// into new_ids / new_rows when the base lacks them.
template <typename SnapshotTable>
absl::Status UpdateSnapshotTable(const embedding::LocalEmbeddingStore& store,
                                 const std::vector<int64_t>& changed, SnapshotTable& rows) {
  if (!rows.new_ids.empty()) {
    return absl::InternalError("checkpoint snapshot: the last write did not merge its new rows");
  }
  const embedding::EmbeddingTable& table = store.table(rows.table);
  const size_t row_floats = rows.row_floats;
  // In chunks on two threads: each finds its ids in the base by galloping from where the last
  // one was (a step per id when most rows changed, a binary search's steps when few did), copies
  // those rows over their old values, and lists the ids the base lacks.
  constexpr size_t kChunk = 65536;
  const size_t chunks = (changed.size() + kChunk - 1) / kChunk;
  std::vector<std::vector<int64_t>> missing(chunks);
  const std::vector<int64_t>& base = rows.ids;
  common::ParallelForOnce(static_cast<int64_t>(chunks), 2, [&](int64_t c) {
    const size_t begin = c * kChunk, end = std::min(changed.size(), begin + kChunk);
    size_t at = std::lower_bound(base.begin(), base.end(), changed[begin]) - base.begin();
    for (size_t k = begin; k < end; ++k) {
      const int64_t id = changed[k];
      at = GallopTo(base, at, id);
      if (at < base.size() && base[at] == id) {
        std::memcpy(rows.rows.get() + at * row_floats, table.Row(id), row_floats * sizeof(float));
      } else {
        missing[c].push_back(id);
      }
    }
  });
  for (const std::vector<int64_t>& m : missing) {
    rows.new_ids.insert(rows.new_ids.end(), m.begin(), m.end());
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

// This rank's PowerSGD state from checkpoint `dir` (verified already): true when taken, false
// (and a log line saying why) when the state starts afresh: a checkpoint of another number of
// workers or of another rank or model, or one written without PowerSGD.
absl::StatusOr<bool> RestorePowerSgd(const std::string& dir, const CheckpointManifest& manifest,
                                     const RestoreOptions& options, PowerSgdAllReducer* powersgd) {
  const std::string who = absl::StrCat("rank ", options.rank, ": PowerSGD state starts afresh: ");
  if (manifest.world_size != options.world_size) {
    DLRM_LOG(INFO) << who << dir << " was written by " << manifest.world_size
                   << " worker(s), this job has " << options.world_size;
    return false;
  }
  const CheckpointFileEntry* entry = nullptr;
  for (const CheckpointFileEntry& f : manifest.files) {
    if (f.kind == "powersgd" && f.part == options.rank) entry = &f;
  }
  if (entry == nullptr) {
    DLRM_LOG(INFO) << who << dir << " holds none for it";
    return false;
  }
  const std::string path = (fs::path(dir) / entry->name).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot open"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::Status loaded = powersgd->LoadState(bytes, path);
  if (absl::IsFailedPrecondition(loaded)) {
    DLRM_LOG(INFO) << who << loaded.message();
    return false;
  }
  DLRM_RETURN_IF_ERROR(loaded);
  DLRM_LOG(INFO) << "rank " << options.rank << ": PowerSGD state restored from " << path;
  return true;
}

}  // namespace

absl::StatusOr<double> TrainCheckpointer::Start(Trainer& trainer,
                                                embedding::LocalEmbeddingStore& store,
                                                const TrainPosition& position) {
  // One write at a time: the previous one's outcome is reported here.
  if (writer_.joinable()) {
    absl::StatusOr<CheckpointWriteResult> previous = Finish();
    if (!previous.ok()) return previous.status();
  }
  const auto start = std::chrono::steady_clock::now();
  if (prepare_thread_.joinable()) prepare_thread_.join();
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
  std::vector<Snapshot::Table*> full_copies;
  snapshot->tables.reserve(store.tables().size());  // full_copies points into it
  for (int t = 0; t < static_cast<int>(store.tables().size()); ++t) {
    // Changed ids are taken in every checkpoint, so the next one is relative to it.
    std::vector<int64_t> changed = store.TakeChangedIds(t);
    const embedding::EmbeddingTable& table = store.table(t);
    Snapshot::Table& rows = snapshot->tables.emplace_back();
    rows.table = t;
    rows.row_floats = table.row_stride();
    if (have_base) {
      Snapshot::Table& base = last_snapshot_->tables[t];
      rows.ids.swap(base.ids);
      rows.rows = std::move(base.rows);
      rows.capacity = base.capacity;
      DLRM_RETURN_IF_ERROR(UpdateSnapshotTable(store, changed, rows));
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
      full_copies.push_back(&rows);
    }
    if (m.incremental) rows.write_ids = std::move(changed);
  }
  CopySnapshotRows(store, full_copies);
  // Training may go on: the files are written from the snapshot.
  parent_ = m.name;
  since_full_ = m.incremental ? since_full_ + 1 : 1;
  last_step_ = position.step;
  last_time_ = std::chrono::steady_clock::now();
  const double stall = std::chrono::duration<double>(last_time_ - start).count();
  last_snapshot_ = snapshot;  // its buffers are reused by the next one once written
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
        const float* row =
            from_base ? rows.rows.get() + i * row_floats : rows.new_rows.data() + j * row_floats;
        (from_base ? i : j)++;
        DLRM_RETURN_IF_ERROR(writer->AppendRow(id, row));
        ++written;
      }
    } else {
      size_t i = 0, j = 0;
      for (int64_t id : rows.write_ids) {
        i = GallopTo(rows.ids, i, id);
        const float* row = nullptr;
        if (i < rows.ids.size() && rows.ids[i] == id) {
          row = rows.rows.get() + i * row_floats;
        } else {
          j = GallopTo(rows.new_ids, j, id);
          if (j == rows.new_ids.size() || rows.new_ids[j] != id) {
            return absl::InternalError(absl::StrCat("checkpoint snapshot of table ", rows.table,
                                                    " lacks changed row ", id));
          }
          row = rows.new_rows.data() + j * row_floats;
        }
        DLRM_RETURN_IF_ERROR(writer->AppendRow(id, row));
        ++written;
      }
    }
    DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, writer->Close());
    m.files.push_back(CheckpointFileEntry{.name = name,
                                          .kind = "rows",
                                          .table = rows.table,
                                          .part = 0,
                                          .rows = written,
                                          .bytes = d.bytes,
                                          .crc32c = d.crc32c});
  }
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

// --- ClusterCheckpointer ---

absl::StatusOr<std::unique_ptr<ClusterCheckpointer>> ClusterCheckpointer::Create(
    const Options& options) {
  if (options.spec.checkpoint.dir.empty()) {
    return absl::InvalidArgumentError("checkpoint.dir is empty");
  }
  if (!fs::path(options.spec.checkpoint.dir).is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.dir '", options.spec.checkpoint.dir,
                     "' must be absolute for a cluster job (every process writes there)"));
  }
  if (options.rank == 0) DLRM_RETURN_IF_ERROR(PrepareCheckpointRoot(options.spec.checkpoint.dir));
  std::unique_ptr<ClusterCheckpointer> c(new ClusterCheckpointer(options));
  if (options.rank == 0 && options.metrics != nullptr) {
    common::MetricsRegistry& m = *options.metrics;
    c->cut_seconds_ = &m.Histogram(
        "checkpoint_cut_seconds",
        "Time training waited for a checkpoint's cut (drain excluded): snapshots, dense, hot rows.",
        common::MetricsRegistry::LatencyBuckets());
    c->write_seconds_ = &m.Histogram("checkpoint_write_seconds",
                                     "Time from a checkpoint's cut to its committed manifest.",
                                     common::MetricsRegistry::LatencyBuckets());
    c->bytes_ = &m.Gauge("checkpoint_bytes", "Bytes of the last committed checkpoint.");
    c->last_committed_step_ =
        &m.Gauge("checkpoint_last_step", "Step of the last committed checkpoint.");
    c->committed_ = &m.Counter("checkpoints_total", "Checkpoints committed, by result.",
                               {{"result", "committed"}});
    c->failed_ = &m.Counter("checkpoints_total", "Checkpoints committed, by result.",
                            {{"result", "failed"}});
  }
  return c;
}

ClusterCheckpointer::~ClusterCheckpointer() {
  if (writer_.joinable()) writer_.join();
}

bool ClusterCheckpointer::Due(int64_t step) const {
  const int64_t every = options_.spec.checkpoint.every_steps;
  return step > last_step_ && every > 0 && (step - options_.base_step) % every == 0;
}

absl::Status ClusterCheckpointer::Finish() {
  if (writer_.joinable()) writer_.join();
  absl::Status status = write_status_;
  write_status_ = absl::OkStatus();
  return status;
}

bool ClusterCheckpointer::DueByTime() const {
  const double every = options_.spec.checkpoint.every_seconds;
  return every > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_cut_time_).count() >=
             every;
}

std::string ClusterCheckpointer::PowerSgdKeyPrefix(const std::string& name) const {
  return absl::StrCat("job/", options_.job_id, "/", options_.job_epoch, "/checkpoint/", name,
                      "/powersgd/");
}

std::string ClusterCheckpointer::PowerSgdKey(const std::string& name, int rank) const {
  return absl::StrCat(PowerSgdKeyPrefix(name), rank);
}

absl::StatusOr<CheckpointFileEntry> ClusterCheckpointer::WritePowerSgdPart(
    const std::string& dir, const std::string& state) {
  const std::string name = fs::path(dir).filename().string();
  absl::StatusOr<CheckpointFileEntry> entry = [&]() -> absl::StatusOr<CheckpointFileEntry> {
    const std::string file = absl::StrCat("powersgd-r", options_.rank, ".bin");
    DLRM_ASSIGN_OR_RETURN(auto out,
                          embedding::ChecksummedWriter::Create((fs::path(dir) / file).string()));
    DLRM_RETURN_IF_ERROR(out->Append(state.data(), state.size()));
    DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, out->Close());
    return CheckpointFileEntry{.name = file,
                               .kind = "powersgd",
                               .part = options_.rank,
                               .bytes = d.bytes,
                               .crc32c = d.crc32c};
  }();
  if (options_.rank == 0) return entry;
  // Rank 0 lists the file in the manifest from this value, or fails the checkpoint with its error.
  const std::string value = entry.ok() ? absl::StrCat("ok ", entry->bytes, " ", entry->crc32c)
                                       : absl::StrCat("error ", entry.status().message());
  DLRM_RETURN_IF_ERROR(options_.kv_set(PowerSgdKey(name, options_.rank), value));
  return entry;
}

absl::Status ClusterCheckpointer::Prepare(const TrainPosition& position) {
  prepared_dir_.clear();
  if (options_.rank != 0) return absl::OkStatus();
  DLRM_RETURN_IF_ERROR(Finish());  // one write in flight at a time
  const common::JobSpec& spec = options_.spec;
  const std::string name = embedding::CheckpointDirName(position.step);
  if (embedding::ReadManifest((fs::path(spec.checkpoint.dir) / name).string()).ok()) {
    // Committed already (the job resumed from it and trained no further): kept as it is.
    return absl::OkStatus();
  }
  // Made before the barrier ahead of the cut, so that every rank may write its part into it.
  DLRM_ASSIGN_OR_RETURN(prepared_dir_, MakeCheckpointDir(spec.checkpoint.dir, name));
  return absl::OkStatus();
}

absl::Status ClusterCheckpointer::Cut(Trainer& trainer, const TrainPosition& position) {
  last_step_ = position.step;
  last_cut_time_ = std::chrono::steady_clock::now();
  const common::JobSpec& spec = options_.spec;
  // Every rank's PowerSGD state (its residual E differs from the others'), copied at the cut.
  const PowerSgdAllReducer* powersgd = trainer.powersgd();
  std::string powersgd_state = powersgd != nullptr ? powersgd->StateBytes() : std::string();
  if (options_.rank != 0) {
    if (powersgd == nullptr) return absl::OkStatus();
    DLRM_RETURN_IF_ERROR(Finish());
    const std::string dir =
        (fs::path(spec.checkpoint.dir) / embedding::CheckpointDirName(position.step)).string();
    if (embedding::ReadManifest(dir).ok()) return absl::OkStatus();  // committed already
    writer_ = std::thread([this, dir, state = std::move(powersgd_state)] {
      write_status_ = WritePowerSgdPart(dir, state).status();
    });
    return absl::OkStatus();
  }
  if (prepared_dir_.empty()) return absl::OkStatus();  // committed already
  const std::string dir = std::exchange(prepared_dir_, std::string());
  const auto start = std::chrono::steady_clock::now();
  DLRM_ASSIGN_OR_RETURN(CheckpointManifest m,
                        BaseManifest(spec, trainer, position, options_.world_size));
  m.job_id = options_.job_id;
  if (fs::path(dir).filename() != m.name) {
    return absl::InternalError(absl::StrCat("checkpoint prepared as ", dir, ", cut at ", m.name));
  }
  // The cut: from here on the servers may take pushes of later steps.
  DLRM_RETURN_IF_ERROR(options_.ps->CheckpointAll(position.step, /*write=*/false, "").status());
  // dense.bin is written with the servers' parts, from this copy.
  std::string dense = DenseBytes(trainer);
  // The hot rows are newer than the servers' copies: their part is listed after the servers'.
  std::vector<CheckpointFileEntry> hot_files;
  DLRM_RETURN_IF_ERROR(WriteHotPart(dir, trainer, options_.ps->shard_count(), &hot_files));
  const double cut_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (cut_seconds_ != nullptr) cut_seconds_->Observe(cut_seconds);
  // Incremental (full_every) on top of the last checkpoint this run committed: the servers then
  // write only the rows changed since its snapshot. The first one of a run is full.
  const int full_every = spec.checkpoint.full_every;
  const bool incremental = !parent_name_.empty() && full_every > 1 && since_full_ < full_every;
  writer_ =
      std::thread([this, m = std::move(m), dir, dense = std::move(dense), hot_files, cut_seconds,
                   start, incremental, powersgd_state = std::move(powersgd_state)]() mutable {
        write_status_ = [&]() -> absl::Status {
          DLRM_ASSIGN_OR_RETURN(CheckpointFileEntry dense_entry, WriteDenseBytes(dir, dense));
          std::vector<CheckpointFileEntry> powersgd_files;
          if (!powersgd_state.empty()) {
            DLRM_ASSIGN_OR_RETURN(powersgd_files.emplace_back(),
                                  WritePowerSgdPart(dir, powersgd_state));
            for (int r = 1; r < options_.world_size; ++r) {
              DLRM_ASSIGN_OR_RETURN(std::string value, options_.kv_get(PowerSgdKey(m.name, r)));
              CheckpointFileEntry& e = powersgd_files.emplace_back(CheckpointFileEntry{
                  .name = absl::StrCat("powersgd-r", r, ".bin"), .kind = "powersgd", .part = r});
              if (std::sscanf(value.c_str(), "ok %" SCNd64 " %" SCNu32, &e.bytes, &e.crc32c) != 2) {
                return absl::UnavailableError(
                    absl::StrCat("rank ", r, "'s PowerSGD state for ", m.name, ": ", value));
              }
            }
            // Read: the keys go, so that a long job does not fill the coordinator's store.
            if (options_.kv_delete_prefix) options_.kv_delete_prefix(PowerSgdKeyPrefix(m.name));
          }
          int incremental_shards = 0;
          DLRM_ASSIGN_OR_RETURN(
              std::vector<CheckpointFileEntry> ps_files,
              options_.ps->CheckpointAll(m.step, /*write=*/true, dir,
                                         incremental ? parent_step_ : -1, &incremental_shards));
          // A server that could not tell its changed rows wrote them all, which is right on top
          // of the parent too; only when every server wrote all is the checkpoint a full one.
          m.incremental = incremental_shards > 0;
          if (m.incremental) m.parent = parent_name_;
          m.files.push_back(dense_entry);
          m.files.insert(m.files.end(), powersgd_files.begin(), powersgd_files.end());
          m.files.insert(m.files.end(), ps_files.begin(), ps_files.end());
          m.files.insert(m.files.end(), hot_files.begin(), hot_files.end());
          DLRM_RETURN_IF_ERROR(embedding::SyncDirectory(dir));
          DLRM_RETURN_IF_ERROR(embedding::CommitManifest(dir, m));
          parent_name_ = m.name;
          parent_step_ = m.step;
          since_full_ = m.incremental ? since_full_ + 1 : 1;
          DLRM_RETURN_IF_ERROR(embedding::ApplyRetention(options_.spec.checkpoint.dir,
                                                         options_.spec.checkpoint.keep_last)
                                   .status());
          const double total =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (write_seconds_ != nullptr) {
            write_seconds_->Observe(total);
            bytes_->Set(static_cast<double>(m.total_bytes()));
            last_committed_step_->Set(static_cast<double>(m.step));
            committed_->Increment();
          }
          DLRM_LOG(INFO) << "checkpoint " << dir << ": step " << m.step << ", "
                         << (m.incremental ? "incremental on " + m.parent : "full") << ", "
                         << m.total_bytes() << " bytes; training waited " << cut_seconds
                         << " s for the cut, the write took " << total << " s";
          return absl::OkStatus();
        }();
        if (!write_status_.ok()) {
          if (failed_ != nullptr) failed_->Increment();
          DLRM_LOG(ERROR) << "checkpoint " << dir << " failed: " << write_status_.message();
        }
      });
  return absl::OkStatus();
}

absl::StatusOr<ValidCheckpoint> FindValidCheckpoint(const std::string& path) {
  // LoadChain verifies the size and CRC32C of every file of every link.
  ValidCheckpoint out;
  std::error_code ec;
  if (fs::exists(fs::path(path) / embedding::kManifestName, ec)) {
    out.dir = path;
    DLRM_ASSIGN_OR_RETURN(out.chain, embedding::LoadChain(path));
    return out;
  }
  // A folder: the newest checkpoint whose whole chain verifies; damaged ones are named.
  DLRM_ASSIGN_OR_RETURN(std::vector<CheckpointManifest> all, embedding::ListCheckpoints(path));
  if (all.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": neither a checkpoint nor a folder holding committed checkpoints"));
  }
  absl::Status last_error;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string candidate = (fs::path(path) / it->name).string();
    absl::StatusOr<std::vector<CheckpointManifest>> loaded = embedding::LoadChain(candidate);
    if (loaded.ok()) {
      out.dir = candidate;
      out.chain = std::move(*loaded);
      return out;
    }
    DLRM_LOG(ERROR) << "checkpoint " << candidate << " refused: " << loaded.status().message();
    last_error = loaded.status();
  }
  return last_error;
}

absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const std::string& path,
                                                     const RestoreOptions& options,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store) {
  const int rank = options.rank;
  // Every file of every link is verified before anything is read.
  DLRM_ASSIGN_OR_RETURN(ValidCheckpoint valid, FindValidCheckpoint(path));
  const std::string& dir = valid.dir;
  const std::vector<CheckpointManifest>& chain = valid.chain;
  const CheckpointManifest& newest = chain.back();
  DLRM_RETURN_IF_ERROR(CheckCheckpointFitsSpec(newest, trainer->spec()));
  const fs::path root = fs::path(dir).parent_path();
  RestoredCheckpoint out;
  for (const CheckpointManifest& link : chain) {
    DLRM_RETURN_IF_ERROR(CheckCheckpointFitsSpec(link, trainer->spec()));
    for (const CheckpointFileEntry& f : link.files) {
      if (f.kind == "dense" || f.kind == "powersgd") continue;
      const bool hot = f.kind == "hot_rows";
      const bool newest_link = &link == &chain.back();
      if (hot && newest_link) out.hot_ids.resize(link.tables.size());
      if (!options.load_rows && !(hot && newest_link)) continue;
      if (f.table < 0 || f.table >= static_cast<int>(link.tables.size())) {
        return absl::DataLossError(
            absl::StrCat((root / link.name / f.name).string(), ": table ", f.table));
      }
      const int row_floats = link.tables[f.table].row_floats;
      DLRM_RETURN_IF_ERROR(
          embedding::ReadRowFile((root / link.name / f.name).string(), f.table, row_floats,
                                 [&](absl::Span<const int64_t> ids, const float* rows) {
                                   if (hot && newest_link) {
                                     std::vector<int64_t>& h = out.hot_ids[f.table];
                                     h.insert(h.end(), ids.begin(), ids.end());
                                   }
                                   if (!options.load_rows) return absl::OkStatus();
                                   embedding::TableRows r;
                                   r.table = f.table;
                                   r.ids.assign(ids.begin(), ids.end());
                                   r.values.assign(rows, rows + ids.size() * row_floats);
                                   return store->WriteStoredRows({&r, 1});
                                 }));
    }
  }
  DLRM_RETURN_IF_ERROR(ReadDense((fs::path(dir) / kDenseFile).string(), *trainer));
  if (PowerSgdAllReducer* powersgd = trainer->powersgd(); powersgd != nullptr) {
    DLRM_ASSIGN_OR_RETURN(out.powersgd_restored, RestorePowerSgd(dir, newest, options, powersgd));
  }
  if (options.set_steps) trainer->set_steps_done(newest.step);
  out.dir = dir;
  out.manifest = newest;
  out.position.step = newest.step;
  out.position.samples = newest.samples;
  for (const embedding::RankPosition& r : newest.ranks) {
    if (r.rank == rank) {
      out.position.epoch = r.epoch;
      out.position.batches = r.batches;
      out.position.samples = r.samples;
    }
  }
  return out;
}

}  // namespace dlrm::worker
