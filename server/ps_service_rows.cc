// PsService's stored-row methods (server/ps_service.h): ReadRows and WriteRows (full stored
// rows: weights and optimizer state) and Checkpoint (DoCheckpoint: the SNAPSHOT phase and
// the WRITE of this server's row files, checked against --checkpoint-root).
#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/status.h"
#include "embedding/checkpoint_snapshot.h"
#include "server/ps_service.h"
#include "server/ps_service_internal.h"

namespace dlrm::server {

// ---- ReadRows / WriteRows ----

void PsService::HandleReadRows(grpc::CallbackServerContext* context,
                               const dlrm::v1::ReadRowsRequest* request,
                               dlrm::v1::ReadRowsResponse* response, Done done) {
  if (absl::Status denied = AuthorizeMember(*context, "ParameterServer.ReadRows", request->job_id(),
                                            request->job_epoch());
      !denied.ok()) {
    return done(denied);
  }
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<std::shared_ptr<PsJob>> job = FindJob(request->job_id());
    if (!job.ok()) return done(job.status());
    absl::Status status = (*job)->ValidateReadRows(*request);
    if (status.ok()) status = (*job)->ReadRows(*request, response);
    if (!status.ok()) response->Clear();
    UpdateStoreMetrics();
    done(status);
  });
}

void PsService::HandleWriteRows(grpc::CallbackServerContext* context,
                                const dlrm::v1::WriteRowsRequest* request,
                                dlrm::v1::WriteRowsResponse* response, Done done) {
  if (absl::Status denied =
          AuthorizeAdmin(*context, "ParameterServer.WriteRows", request->job_id());
      !denied.ok()) {
    return done(denied);
  }
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<std::shared_ptr<PsJob>> job = FindJob(request->job_id());
    if (!job.ok()) return done(job.status());
    absl::Status valid = (*job)->ValidateWriteRows(*request);
    if (!valid.ok()) return done(valid);
    absl::StatusOr<int64_t> rows = (*job)->WriteRows(*request);
    if (rows.ok()) response->set_rows_written(*rows);
    UpdateStoreMetrics();
    done(rows.status());
  });
}

// ---- Checkpoint ----

absl::StatusOr<dlrm::v1::CheckpointResponse> PsService::DoCheckpoint(
    const dlrm::v1::CheckpointRequest& request, const std::function<bool()>& cancelled) {
  DLRM_ASSIGN_OR_RETURN(std::shared_ptr<PsJob> job, FindJob(request.job_id()));
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", request.step(), " < 0"));
  }
  if (!dlrm::v1::CheckpointRequest::Phase_IsValid(request.phase())) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint phase ", request.phase(), " is neither SNAPSHOT nor WRITE"));
  }
  if (request.phase() == dlrm::v1::CheckpointRequest::WRITE &&
      request.part() != job->shard_index()) {
    // The part names this shard's files in the manifest (rows-t<T>-p<part>.bin).
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint part ", request.part(), " is not this server's shard of job ",
                     request.job_id(), " (", job->shard_index(), ")"));
  }
  const int64_t epoch = request.job_epoch();
  if (epoch > 0) DLRM_RETURN_IF_ERROR(job->CheckEpoch(epoch));
  namespace fs = std::filesystem;
  // The snapshot lives beside the job's store, named by shard, epoch and step: jobs loaded on
  // this server together, and a replaced epoch's write still stopping, each have their own.
  const fs::path snapshot = job->SnapshotPath(epoch, request.step());
  std::error_code ec;
  dlrm::v1::CheckpointResponse response;
  if (request.phase() == dlrm::v1::CheckpointRequest::SNAPSHOT) {
    // A folder of the same name is left by an earlier attempt that failed before its WRITE;
    // those of older epochs by a run a recovery replaced.
    fs::remove_all(snapshot, ec);
    if (!ec) fs::create_directories(snapshot.parent_path(), ec);
    if (ec) return FileError(ec, snapshot.string());
    if (epoch > 0) job->RemoveSnapshotsBefore(epoch);
    std::vector<std::vector<int64_t>> changed;
    std::shared_ptr<embedding::StoreSnapshot> copy = job->RecycledStoreSnapshot();
    const absl::Status taken = job->store().TakeSnapshot(snapshot.string(), copy.get(), &changed);
    // Recorded even when the snapshot failed: those rows changed all the same, and the next
    // incremental checkpoint must hold them.
    job->RecordSnapshot(request.step(), std::move(changed));
    DLRM_RETURN_IF_ERROR(taken);
    job->KeepStoreSnapshot(request.step(), std::move(copy));
    response.set_directory(snapshot.string());
    return response;
  }
  const fs::path given = request.directory();
  const fs::path out = given.lexically_normal();
  const bool climbs =
      std::any_of(given.begin(), given.end(), [](const fs::path& part) { return part == ".."; });
  if (!out.is_absolute() || climbs) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory '", request.directory(),
                                                   "' must be an absolute path without '..'"));
  }
  if (!options_.checkpoint_root.empty()) {
    // Resolved through symbolic links, so a link inside the root cannot lead out of it.
    std::error_code resolve_root, resolve_dir;
    const fs::path root = fs::weakly_canonical(options_.checkpoint_root, resolve_root);
    const fs::path where = fs::weakly_canonical(out, resolve_dir);
    const auto differ = std::mismatch(root.begin(), root.end(), where.begin(), where.end());
    if (resolve_root || resolve_dir || differ.first != root.end()) {
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint directory '", request.directory(),
                       "' is outside this parameter server's --checkpoint-root '",
                       options_.checkpoint_root, "'"));
    }
  }
  // The resident rows copied at the SNAPSHOT live in this process: a restarted server has none.
  const std::shared_ptr<const embedding::StoreSnapshot> copy = job->StoreSnapshotOf(request.step());
  if (copy == nullptr || !fs::exists(snapshot)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", request.job_id(), ": no snapshot of step ", request.step(), " (SNAPSHOT first)"));
  }
  std::vector<embedding::RowCodec> codecs;
  for (int t = 0; t < static_cast<int>(job->store().tables().size()); ++t) {
    codecs.push_back(job->store().codec(t));
  }
  std::optional<std::vector<std::vector<int64_t>>> changed;
  if (request.incremental()) changed = job->ChangedSince(request.parent_step(), request.step());
  fs::create_directories(out, ec);
  DLRM_ASSIGN_OR_RETURN(
      std::vector<embedding::CheckpointFileEntry> files,
      embedding::WriteRowFilesFromSnapshot(
          *copy, codecs, out.string(), request.part(), changed ? &*changed : nullptr,
          [&]() -> absl::Status {
            // The caller gave up, or the server is shutting down (Shutdown cancels the calls at
            // its deadline and then waits for this task): the files written are removed.
            if (cancelled && cancelled()) {
              return absl::CancelledError(absl::StrCat("checkpoint of step ", request.step(),
                                                       " of job ", request.job_id(),
                                                       ": the call was cancelled"));
            }
            // The job was unloaded, reloaded or moved on (a recovery) while this ran.
            absl::StatusOr<std::shared_ptr<PsJob>> now = FindJob(request.job_id());
            if (epoch > 0 && (!now.ok() || now->get() != job.get() || job->epoch() != epoch)) {
              return absl::AbortedError(absl::StrCat(
                  "job ", request.job_id(), " left epoch ", epoch, " while its checkpoint of step ",
                  request.step(), " was being written; the files written are removed"));
            }
            return absl::OkStatus();
          }));
  fs::remove_all(snapshot, ec);
  job->ForgetStoreSnapshot(request.step());
  // Later checkpoints build on this one or on its parent, never on anything older.
  job->ForgetBefore(changed ? request.parent_step() : request.step());
  response.set_incremental(changed.has_value());
  int64_t rows = 0;
  for (const embedding::CheckpointFileEntry& f : files) {
    dlrm::v1::CheckpointFile* p = response.add_files();
    p->set_name(f.name);
    p->set_table(f.table);
    p->set_part(f.part);
    p->set_rows(f.rows);
    p->set_bytes(f.bytes);
    p->set_crc32c(f.crc32c);
    rows += f.rows;
  }
  response.set_directory(out.string());
  response.set_rows(rows);
  return response;
}

void PsService::HandleCheckpoint(grpc::CallbackServerContext* context,
                                 const dlrm::v1::CheckpointRequest* request,
                                 dlrm::v1::CheckpointResponse* response, Done done) {
  if (absl::Status denied =
          AuthorizeAdmin(*context, "ParameterServer.Checkpoint", request->job_id());
      !denied.ok()) {
    return done(denied);
  }
  // A WRITE holds its thread for as long as the shard takes to write: on the data plane's pool
  // two of them took every thread of a 2-core server, and every job's lookups and pushes waited
  // (past their deadlines: a recovery). The cut (SNAPSHOT) is short and stays there.
  PsWorkPool* pool =
      request->phase() == dlrm::v1::CheckpointRequest::WRITE ? CheckpointPool() : options_.pool;
  pool->Submit([this, context, request, response, done] {
    if (context->IsCancelled()) return done(absl::CancelledError("Checkpoint: the caller gave up"));
    absl::StatusOr<dlrm::v1::CheckpointResponse> r =
        DoCheckpoint(*request, [context] { return context->IsCancelled(); });
    if (r.ok()) *response = std::move(*r);
    UpdateStoreMetrics();
    done(r.status());
  });
}

}  // namespace dlrm::server
