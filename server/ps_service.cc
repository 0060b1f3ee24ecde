// PsService (server/ps_service.h), its core and job management: construction, metrics, the job
// table (FindJob, job_ids, FailParkedLookups), the raw registration of the typed methods,
// LoadJob / UnloadJob with their validation, the admin methods' grant check (AuthorizeAdmin)
// and GetStats. Lookup and PushGradients are in ps_service_lookup.cc; ReadRows, WriteRows and
// Checkpoint in ps_service_rows.cc.
#include "server/ps_service.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/raw_unary.h"
#include "common/status.h"
#include "server/ps_load_request.h"
#include "server/ps_service_internal.h"

namespace dlrm::server {

PsService::PsService(const PsServiceOptions& options)
    : options_(options),
      metrics_(std::make_unique<Metrics>(*options.metrics)),
      lookup_requests_(std::make_shared<proto::MessagePool<dlrm::v1::LookupRequest>>()),
      reaper_(std::make_shared<JobReaper>()) {
  metrics_->memory_budget_bytes.Set(static_cast<double>(options.memory_budget_bytes));
}

PsService::~PsService() {
  FailParkedLookups(absl::UnavailableError("parameter server is shutting down"));
  {
    absl::MutexLock lock(&mu_);
    jobs_.clear();
  }
  // The stores close before the service is gone (a call that still holds a job closes its store
  // itself when it lets go).
  reaper_->Stop();
}

void PsService::Finish(grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
  if (!status.ok()) metrics_->rpc_errors.Increment();
  reactor->Finish(common::ToGrpcStatus(status));
}

absl::StatusOr<std::shared_ptr<PsJob>> PsService::FindJob(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", Shown(job_id), "' is not loaded on this parameter server"));
  }
  return it->second;
}

std::vector<std::string> PsService::job_ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  return ids;
}

void PsService::FailParkedLookups(const absl::Status& status) {
  std::vector<std::shared_ptr<PsJob>> jobs;
  {
    absl::MutexLock lock(&mu_);
    if (gates_closed_.ok()) gates_closed_ = status;
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const auto& job : jobs) job->CloseGates(status);
}

void PsService::UpdateStoreMetrics(bool wait) {
  int64_t rows = 0, bytes = 0;
  if (wait) {
    mu_.Lock();
  } else if (!mu_.TryLock()) {
    return;
  }
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&mu_};
  StoreCounts total = unloaded_;
  for (const auto& [id, job] : jobs_) {
    const embedding::TieredStoreStats s = job->stats();
    rows += s.memory_rows;
    bytes += s.memory_bytes;
    total.reads += s.rocksdb_reads;
    total.hits += s.rocksdb_hits;
    total.created += s.rows_created;
    total.writes += s.rocksdb_writes;
  }
  metrics_->memory_rows.Set(static_cast<double>(rows));
  metrics_->memory_bytes.Set(static_cast<double>(bytes));
  // Counters only grow: each gets what its count gained since the last report.
  auto report = [](int64_t count, int64_t& reported, prometheus::Counter& counter) {
    if (count > reported) {
      counter.Increment(static_cast<double>(count - reported));
      reported = count;
    }
  };
  report(total.reads, reported_.reads, metrics_->rocksdb_reads);
  report(total.hits, reported_.hits, metrics_->rocksdb_hits);
  report(total.created, reported_.created, metrics_->rows_created);
  report(total.writes, reported_.writes, metrics_->rocksdb_writes);
}

// The typed unary methods are registered raw (common/raw_unary.h): bytes that are no request
// are INVALID_ARGUMENT naming the message. Handle<Method> does each one's work.
#define DLRM_PS_RAW_UNARY(Method, Request, Response)                                               \
  grpc::ServerUnaryReactor* PsService::Method(grpc::CallbackServerContext* context,                \
                                              const grpc::ByteBuffer* in, grpc::ByteBuffer* out) { \
    return common::ServeRawUnary<Request, Response>(                                               \
        context, in, out, "/dlrm.v1.ParameterServer/" #Method,                                     \
        [&](const Request& request, Response* response, Done done) {                               \
          Handle##Method(context, &request, response, std::move(done));                            \
        },                                                                                         \
        [this](grpc::ServerUnaryReactor* reactor, const absl::Status& status) {                    \
          Finish(reactor, status);                                                                 \
        });                                                                                        \
  }
DLRM_PS_RAW_UNARY(LoadJob, dlrm::v1::LoadJobRequest, dlrm::v1::LoadJobResponse)
DLRM_PS_RAW_UNARY(UnloadJob, dlrm::v1::UnloadJobRequest, dlrm::v1::UnloadJobResponse)
DLRM_PS_RAW_UNARY(ReadRows, dlrm::v1::ReadRowsRequest, dlrm::v1::ReadRowsResponse)
DLRM_PS_RAW_UNARY(WriteRows, dlrm::v1::WriteRowsRequest, dlrm::v1::WriteRowsResponse)
DLRM_PS_RAW_UNARY(GetStats, dlrm::v1::GetStatsRequest, dlrm::v1::GetStatsResponse)
DLRM_PS_RAW_UNARY(Checkpoint, dlrm::v1::CheckpointRequest, dlrm::v1::CheckpointResponse)
#undef DLRM_PS_RAW_UNARY

// ---- LoadJob / UnloadJob ----

absl::StatusOr<dlrm::v1::LoadJobResponse> PsService::DoLoadJob(
    const dlrm::v1::LoadJobRequest& request, bool granted) {
  DLRM_RETURN_IF_ERROR(ValidateLoadRequest(request));
  absl::MutexLock load_lock(&load_mu_);
  RemoveReleasedJobFoldersLocked();
  std::shared_ptr<PsJob> existing;
  int64_t reserved = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end()) existing = it->second;
    for (const auto& [id, job] : jobs_) reserved += job->memory_budget_bytes();
  }
  dlrm::v1::LoadJobResponse response;
  // A restart from a caller without the grant (not rank 0) moves the job to its epoch below and
  // leaves its rows for rank 0's LoadJob of that epoch to drop.
  bool drop = false, defer = false;
  if (existing != nullptr && request.restart()) {
    auto pending = pending_restarts_.find(request.job_id());
    const bool newer = request.job_epoch() > existing->epoch();
    const bool waiting =
        pending != pending_restarts_.end() && pending->second == request.job_epoch();
    drop = granted && (newer || waiting);
    defer = !granted && newer;
  }
  if (drop) {
    // A recovery: the job starts over from its checkpoint, so the older epoch's rows go.
    DLRM_LOG(INFO) << "job " << request.job_id() << " restarts at epoch " << request.job_epoch()
                   << " (loaded at " << existing->epoch() << "); its tables are created anew";
    existing.reset();
    pending_restarts_.erase(request.job_id());
    DLRM_RETURN_IF_ERROR(UnloadLocked(request.job_id(), std::numeric_limits<int64_t>::max(),
                                      /*wait_for_close=*/false));
    absl::MutexLock lock(&mu_);
    reserved = 0;
    for (const auto& [id, job] : jobs_) reserved += job->memory_budget_bytes();
  }
  if (existing != nullptr) {
    if (!existing->SameParameters(request)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", request.job_id(), " is already loaded with other parameters (shard ",
          existing->shard_index(), " of ", existing->shard_count(), "); unload it first"));
    }
    const int64_t loaded = existing->epoch();
    if (request.job_epoch() < loaded) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", request.job_id(), ": epoch ", request.job_epoch(),
                       " is older than the loaded epoch ", loaded));
    }
    existing->AdvanceEpoch(request.job_epoch());
    if (defer) pending_restarts_[request.job_id()] = request.job_epoch();
    response.set_rows_resident(existing->stats().memory_rows);
    return response;
  }
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(jobs_.size()) >= common::kMaxJobsPerPs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "LoadJob ", request.job_id(), ": this parameter server holds ", jobs_.size(),
          " jobs, the most it loads (kMaxJobsPerPs); jobs that ended are unloaded by the "
          "coordinator"));
    }
  }
  PsJobOptions job_options;
  job_options.spec = request;
  job_options.data_dir = options_.data_dir;
  job_options.memory_budget_bytes = std::max<int64_t>(0, options_.memory_budget_bytes - reserved);
  job_options.rocksdb_wal = options_.rocksdb_wal;
  job_options.timers = options_.timers;
  DLRM_RETURN_IF_ERROR(WaitForStoreClosedLocked(
      PsJob::StorePath(options_.data_dir, request.job_id(), request.shard_index())));
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<PsJob> created, PsJob::Create(job_options));
  auto closed = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<PsJob> job = JobReaper::Own(reaper_, std::move(created), closed);
  closed_flags_[request.job_id()] = std::move(closed);
  absl::Status closing;
  {
    absl::MutexLock lock(&mu_);
    jobs_[request.job_id()] = job;
    metrics_->jobs_loaded.Set(static_cast<double>(jobs_.size()));
    closing = gates_closed_;
  }
  // Loaded while the server shuts down: its lookups fail rather than wait out their deadlines.
  if (!closing.ok()) job->CloseGates(closing);
  response.set_rows_resident(job->stats().memory_rows);
  return response;
}

absl::Status PsService::DoUnloadJob(const std::string& job_id, int64_t max_epoch) {
  absl::MutexLock load_lock(&load_mu_);
  return UnloadLocked(job_id, max_epoch, /*wait_for_close=*/true);
}

absl::Status PsService::UnloadLocked(const std::string& job_id, int64_t max_epoch,
                                     bool wait_for_close) {
  std::shared_ptr<PsJob> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("job '", Shown(job_id), "' is not loaded on this parameter server"));
    }
    if (it->second->epoch() > max_epoch) {
      return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' is loaded at epoch ",
                                                        it->second->epoch(), ", newer than ",
                                                        max_epoch, "; kept"));
    }
    job = std::move(it->second);
    jobs_.erase(it);
    pending_restarts_.erase(job_id);
    const embedding::TieredStoreStats s = job->stats();
    unloaded_.reads += s.rocksdb_reads;
    unloaded_.hits += s.rocksdb_hits;
    unloaded_.created += s.rows_created;
    unloaded_.writes += s.rocksdb_writes;
    metrics_->jobs_loaded.Set(static_cast<double>(jobs_.size()));
  }
  job->CloseGates(absl::AbortedError(absl::StrCat("job ", job_id, " was unloaded")));
  UpdateStoreMetrics();
  // Calls in flight hold their own references; the store closes with the last one, on the
  // reaper's thread. The folders (store and snapshots) go once it has: at a later sweep.
  std::shared_ptr<std::atomic<bool>> closed = std::move(closed_flags_[job_id]);
  closed_flags_.erase(job_id);
  if (closed == nullptr) closed = std::make_shared<std::atomic<bool>>(true);
  held_at_unload_.push_back({closed, job->path(), job->snapshots_path()});
  const std::string path = job->path();
  const bool last = job.use_count() == 1;
  job.reset();
  if (wait_for_close && last) {
    // Nobody else held it: its store is closing on the reaper; its folders go when it has.
    (void)WaitForStoreClosedLocked(path);
  }
  RemoveReleasedJobFoldersLocked();
  return absl::OkStatus();
}

absl::Status PsService::WaitForStoreClosedLocked(const std::string& path) {
  const absl::Time deadline = absl::Now() + options_.store_close_wait;
  while (true) {
    RemoveReleasedJobFoldersLocked();
    auto open = std::find_if(held_at_unload_.begin(), held_at_unload_.end(),
                             [&](const UnloadedJob& u) { return u.path == path; });
    if (open == held_at_unload_.end()) return absl::OkStatus();
    if (!reaper_->AwaitClosed(*open->closed, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("the store at ", path,
                       " of this job's earlier load is still closing (a call of that "
                       "load holds it); try again"));
    }
  }
}

absl::Status PsService::TryUnloadJob(const std::string& job_id, int64_t max_epoch) {
  if (!load_mu_.TryLock()) {
    return absl::UnavailableError(
        absl::StrCat("unloading job ", job_id, ": a load or unload is under way"));
  }
  absl::Status status = UnloadLocked(job_id, max_epoch, /*wait_for_close=*/false);
  load_mu_.Unlock();
  return status;
}

int PsService::RemoveReleasedJobFolders() {
  if (!load_mu_.TryLock()) return 0;
  const int removed = RemoveReleasedJobFoldersLocked();
  load_mu_.Unlock();
  return removed;
}

int PsService::RemoveReleasedJobFoldersLocked() {
  std::set<std::string> in_use;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) {
      in_use.insert(job->path());
      in_use.insert(job->snapshots_path());
    }
  }
  int removed = 0;
  std::erase_if(held_at_unload_, [&](const UnloadedJob& unloaded) {
    // A call still reads or writes its store, or the reaper is closing it.
    if (!unloaded.closed->load()) return false;
    std::error_code ec;
    if (!in_use.contains(unloaded.path)) std::filesystem::remove_all(unloaded.path, ec);
    if (!in_use.contains(unloaded.snapshots_path)) {
      std::filesystem::remove_all(unloaded.snapshots_path, ec);
    }
    // <data>/<job>, which held them: only when nothing else is in it.
    std::filesystem::remove(std::filesystem::path(unloaded.path).parent_path(), ec);
    ++removed;
    return true;
  });
  return removed;
}

void PsService::HandleLoadJob(grpc::CallbackServerContext* context,
                              const dlrm::v1::LoadJobRequest* request,
                              dlrm::v1::LoadJobResponse* response, Done done) {
  if (absl::Status denied = AuthorizeMember(*context, "ParameterServer.LoadJob", request->job_id(),
                                            request->job_epoch());
      !denied.ok()) {
    return done(denied);
  }
  if (absl::Status denied = AuthorizeLoad(*context, *request); !denied.ok()) return done(denied);
  const Grant grant = CheckGrant(*context, request->job_id());
  const bool granted = grant == Grant::kGiven || grant == Grant::kTrusted;
  AdminPool()->Submit([this, context, request, response, done, granted] {
    // A caller that gave up while this call waited for the pool (another load held it) gets
    // nothing from the work: it is skipped.
    if (context->IsCancelled()) return done(absl::CancelledError("LoadJob: the caller gave up"));
    absl::StatusOr<dlrm::v1::LoadJobResponse> result = DoLoadJob(*request, granted);
    if (result.ok()) *response = std::move(*result);
    done(result.status());
  });
}

void PsService::SetGrantKey(std::string key) {
  absl::MutexLock lock(&grant_mu_);
  grant_key_ = std::move(key);
}

template <typename IsGrant>
PsService::Grant PsService::CheckGrantWith(const grpc::CallbackServerContext& context,
                                           const char* metadata, IsGrant is_grant) const {
  std::string key;
  {
    absl::MutexLock lock(&grant_mu_);
    key = grant_key_;
  }
  if (key.empty()) return common::OverTls(context) ? Grant::kNoKeyYet : Grant::kTrusted;
  const auto& all = context.client_metadata();
  auto it = all.find(metadata);
  if (it == all.end() || it->second.empty()) return Grant::kMissing;
  return is_grant(key, absl::string_view(it->second.data(), it->second.size())) ? Grant::kGiven
                                                                                : Grant::kWrong;
}

PsService::Grant PsService::CheckGrant(const grpc::CallbackServerContext& context,
                                       const std::string& job_id) const {
  return CheckGrantWith(context, common::kJobGrantMetadata,
                        [&](absl::string_view key, absl::string_view given) {
                          return common::IsJobAdminGrant(key, job_id, given);
                        });
}

PsService::Grant PsService::CheckMemberGrant(const grpc::CallbackServerContext& context,
                                             const std::string& job_id, int64_t epoch) const {
  return CheckGrantWith(context, common::kMemberGrantMetadata,
                        [&](absl::string_view key, absl::string_view given) {
                          return common::IsJobMemberGrant(key, job_id, epoch, given);
                        });
}

std::optional<absl::Status> PsService::Allowed(Grant grant, absl::string_view method) {
  switch (grant) {
    case Grant::kGiven:
    case Grant::kTrusted:
      return absl::OkStatus();
    case Grant::kNoKeyYet:
      return absl::UnavailableError(
          absl::StrCat(method,
                       ": this parameter server has not registered with a coordinator yet, "
                       "so it cannot check the job's grant"));
    case Grant::kMissing:
    case Grant::kWrong:
      break;
  }
  return std::nullopt;
}

absl::Status PsService::AuthorizeMember(const grpc::CallbackServerContext& context,
                                        absl::string_view method, const std::string& job_id,
                                        int64_t epoch) const {
  const Grant grant = CheckMemberGrant(context, job_id, epoch);
  if (std::optional<absl::Status> decided = Allowed(grant, method)) return *decided;
  return absl::PermissionDeniedError(
      absl::StrCat(method, " of job '", job_id.substr(0, common::kMaxNameBytes), "' at epoch ",
                   epoch, " needs the coordinator's grant for the job's ranks at that epoch",
                   grant == Grant::kMissing ? "" : "; the one given is not it",
                   " (every worker the coordinator gave the job holds it)"));
}

absl::Status PsService::AuthorizeLoad(const grpc::CallbackServerContext& context,
                                      const dlrm::v1::LoadJobRequest& request) const {
  const std::string signed_bytes = LoadJobRequestBytes(request);
  const Grant grant = CheckGrantWith(context, common::kLoadGrantMetadata,
                                     [&](absl::string_view key, absl::string_view given) {
                                       return common::IsJobLoadGrant(key, signed_bytes, given);
                                     });
  if (std::optional<absl::Status> decided = Allowed(grant, "ParameterServer.LoadJob")) {
    return *decided;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "ParameterServer.LoadJob of job '", request.job_id().substr(0, common::kMaxNameBytes),
      "' at epoch ", request.job_epoch(), " (shard ", request.shard_index(), " of ",
      request.shard_count(), ", ", request.tables_size(),
      " tables) needs the coordinator's load grant for that very request",
      grant == Grant::kMissing ? ", and it carries none"
                               : "; the one given is not it: the tables or parameters differ "
                                 "from the job spec's",
      " (every worker the coordinator gave the job holds it)"));
}

absl::Status PsService::AuthorizeAdmin(const grpc::CallbackServerContext& context,
                                       absl::string_view method, const std::string& job_id) const {
  const Grant grant = CheckGrant(context, job_id);
  if (std::optional<absl::Status> decided = Allowed(grant, method)) return *decided;
  return absl::PermissionDeniedError(absl::StrCat(
      method, " of job '", job_id.substr(0, common::kMaxNameBytes), "' needs ",
      grant == Grant::kMissing ? "the coordinator's grant for the job"
                               : "the coordinator's grant for the job; the one given is not it",
      " (rank 0 of the job holds it)"));
}

void PsService::HandleUnloadJob(grpc::CallbackServerContext* context,
                                const dlrm::v1::UnloadJobRequest* request,
                                dlrm::v1::UnloadJobResponse* /*response*/, Done done) {
  if (absl::Status denied =
          AuthorizeAdmin(*context, "ParameterServer.UnloadJob", request->job_id());
      !denied.ok()) {
    return done(denied);
  }
  AdminPool()->Submit([this, request, done] { done(DoUnloadJob(request->job_id())); });
}

// ---- GetStats ----

absl::StatusOr<dlrm::v1::GetStatsResponse> PsService::DoGetStats(const std::string& job_id) const {
  std::vector<std::shared_ptr<PsJob>> jobs;
  if (!job_id.empty()) {
    DLRM_ASSIGN_OR_RETURN(std::shared_ptr<PsJob> job, FindJob(job_id));
    jobs.push_back(std::move(job));
  } else {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  dlrm::v1::GetStatsResponse r;
  r.set_memory_budget_bytes(options_.memory_budget_bytes);
  r.set_lookups(lookups_.load());
  r.set_rows_looked_up(rows_looked_up_.load());
  r.set_pushes(pushes_.load());
  r.set_rows_pushed(rows_pushed_.load());
  for (const auto& job : jobs) {
    const embedding::TieredStoreStats s = job->stats();
    r.set_memory_rows(r.memory_rows() + s.memory_rows);
    r.set_memory_bytes(r.memory_bytes() + s.memory_bytes);
    r.set_rocksdb_reads(r.rocksdb_reads() + s.rocksdb_reads);
    r.set_rocksdb_hits(r.rocksdb_hits() + s.rocksdb_hits);
    r.set_rows_created(r.rows_created() + s.rows_created);
    r.set_rocksdb_writes(r.rocksdb_writes() + s.rocksdb_writes);
    r.set_shard_index(job->shard_index());
    r.set_shard_count(job->shard_count());
    for (int t = 0; t < static_cast<int>(job->store().tables().size()); ++t) {
      dlrm::v1::TableStats* ts = r.add_tables();
      ts->set_job_id(job->job_id());
      ts->set_table(t);
    }
  }
  if (!job_id.empty()) r.set_memory_budget_bytes(jobs[0]->memory_budget_bytes());
  return r;
}

void PsService::HandleGetStats(grpc::CallbackServerContext* context,
                               const dlrm::v1::GetStatsRequest* request,
                               dlrm::v1::GetStatsResponse* response, Done done) {
  // Counts only (rows, bytes, budget): the caller's role (worker or admin, checked before the
  // request was parsed) is enough; no job grant is asked.
  (void)context;
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<dlrm::v1::GetStatsResponse> r = DoGetStats(request->job_id());
    if (r.ok()) *response = std::move(*r);
    done(r.status());
  });
}

}  // namespace dlrm::server
