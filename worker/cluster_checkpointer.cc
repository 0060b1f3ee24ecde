// ClusterCheckpointer (worker/checkpoint.h): a cluster job's checkpoints, cut by the workers and
// written by the parameter servers and rank 0.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "embedding/checkpoint_io.h"
#include "worker/checkpoint.h"
#include "worker/checkpoint_internal.h"
#include "worker/ps_client.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using embedding::CheckpointFileEntry;
using embedding::CheckpointManifest;

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
}  // namespace

using checkpoint_internal::BaseManifest;
using checkpoint_internal::DenseBytes;
using checkpoint_internal::LockCheckpointFolder;
using checkpoint_internal::MakeCheckpointDir;
using checkpoint_internal::PrepareCheckpointRoot;
using checkpoint_internal::WriteDenseBytes;

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
  std::unique_ptr<ClusterCheckpointer> c(new ClusterCheckpointer(options));
  if (options.rank == 0) {
    const std::string& root = options.spec.checkpoint.dir;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) return FileError(ec, absl::StrCat("checkpoint.dir ", root));
    // Another job given the same folder under another name (a symlink) is refused here; the
    // coordinator refuses only the same path.
    DLRM_ASSIGN_OR_RETURN(
        c->lock_fd_, LockCheckpointFolder(
                         root, absl::StrCat("job ", options.job_id, " (process ", ::getpid(), ")"),
                         options.job_id));
    DLRM_RETURN_IF_ERROR(PrepareCheckpointRoot(root));
  }
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
  ReleaseFolder();
}

void ClusterCheckpointer::ReleaseFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
}

bool ClusterCheckpointer::DueBySteps(int64_t step) const {
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
  const auto wait_start = std::chrono::steady_clock::now();
  DLRM_RETURN_IF_ERROR(Finish());  // one write in flight at a time
  previous_write_wait_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  const common::JobSpec& spec = options_.spec;
  const std::string name = embedding::CheckpointDirName(position.step);
  if (position.step == options_.base_step &&
      embedding::ReadManifest((fs::path(spec.checkpoint.dir) / name).string()).ok()) {
    // Committed already (the job resumed from it and trained no further): kept as it is. Any
    // other committed checkpoint of this name is written over (a damaged one the job could not
    // resume from; CheckNoNewerCheckpoints refused other runs' before the job's first step).
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
    if (position.step == options_.base_step && embedding::ReadManifest(dir).ok()) {
      return absl::OkStatus();  // committed already (see Prepare)
    }
    writer_ = std::thread([this, dir, state = std::move(powersgd_state)] {
      write_status_ = WritePowerSgdPart(dir, state).status();
    });
    return absl::OkStatus();
  }
  if (prepared_dir_.empty()) return absl::OkStatus();  // committed already
  const std::string dir = std::exchange(prepared_dir_, std::string());
  const auto start = std::chrono::steady_clock::now();
  DLRM_ASSIGN_OR_RETURN(CheckpointManifest m,
                        BaseManifest(spec, spec_yaml_, trainer, position, options_.world_size));
  m.job_id = options_.job_id;
  if (fs::path(dir).filename() != m.name) {
    return absl::InternalError(absl::StrCat("checkpoint prepared as ", dir, ", cut at ", m.name));
  }
  // dense.bin is written with the servers' parts, from this copy (a diverged model is refused
  // before the servers cut).
  DLRM_ASSIGN_OR_RETURN(std::string dense, DenseBytes(trainer));
  // The cut: from here on the servers may take pushes of later steps.
  DLRM_RETURN_IF_ERROR(options_.ps->CheckpointAll(position.step, /*write=*/false, "").status());
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
  const double waited_for_previous = previous_write_wait_seconds_;
  writer_ = std::thread([this, m = std::move(m), dir, dense = std::move(dense), hot_files,
                         cut_seconds, waited_for_previous, start, incremental,
                         powersgd_state = std::move(powersgd_state)]() mutable {
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
          options_.ps->CheckpointAll(m.step, /*write=*/true, dir, incremental ? parent_step_ : -1,
                                     &incremental_shards));
      // A server that could not tell its changed rows wrote them all, which is right on top
      // of the parent too; only when every server wrote all is the checkpoint a full one.
      m.incremental = incremental_shards > 0;
      if (m.incremental) {
        m.parent = parent_name_;
        m.parent_created_unix = parent_created_unix_;
      }
      m.files.push_back(dense_entry);
      m.files.insert(m.files.end(), powersgd_files.begin(), powersgd_files.end());
      m.files.insert(m.files.end(), ps_files.begin(), ps_files.end());
      m.files.insert(m.files.end(), hot_files.begin(), hot_files.end());
      DLRM_RETURN_IF_ERROR(embedding::SyncDirectory(dir));
      DLRM_RETURN_IF_ERROR(embedding::CommitManifest(dir, m));
      parent_name_ = m.name;
      parent_created_unix_ = m.created_unix;
      parent_step_ = m.step;
      since_full_ = m.incremental ? since_full_ + 1 : 1;
      // Committed: an older checkpoint that cannot be removed stays, and the job goes on.
      if (absl::StatusOr<int> removed = embedding::ApplyRetention(
              options_.spec.checkpoint.dir, options_.spec.checkpoint.keep_last);
          !removed.ok()) {
        DLRM_LOG(WARNING) << "checkpoint " << dir << " committed; " << removed.status().message();
      }
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
                     << m.total_bytes() << " bytes; training waited " << waited_for_previous
                     << " s for the previous write and " << cut_seconds
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

}  // namespace dlrm::worker
