#include "server/ps_service.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/raw_unary.h"
#include "common/rpc_bytes.h"
#include "common/status.h"
#include "embedding/checkpoint_snapshot.h"
#include "proto/lookup_wire.h"

namespace dlrm::server {

struct PsService::Metrics {
  explicit Metrics(common::MetricsRegistry& r)
      : lookup_seconds(r.Histogram("ps_lookup_seconds",
                                   "Time a parameter server spends serving one Lookup.",
                                   common::MetricsRegistry::LatencyBuckets())),
        lookup_wait_seconds(r.Histogram(
            "ps_lookup_wait_seconds",
            "Time a Lookup was parked waiting for the staleness bound (only lookups that waited).",
            common::MetricsRegistry::LatencyBuckets())),
        push_seconds(r.Histogram("ps_push_seconds",
                                 "Time a parameter server spends applying one PushGradients.",
                                 common::MetricsRegistry::LatencyBuckets())),
        lookup_rows(r.Counter("ps_lookup_rows_total", "Embedding rows served by Lookup.")),
        push_rows(r.Counter("ps_push_rows_total", "Embedding rows updated by PushGradients.")),
        memory_rows(r.Gauge("ps_memory_rows", "Rows resident in the memory tier.")),
        memory_bytes(r.Gauge("ps_memory_bytes", "Accounted bytes of the memory tier.")),
        memory_budget_bytes(
            r.Gauge("ps_memory_budget_bytes", "Byte budget of the memory tier (all jobs).")),
        rocksdb_reads(r.Counter("ps_rocksdb_reads_total",
                                "Rows asked of the RocksDB tier (memory-tier misses).")),
        rocksdb_writes(r.Counter("ps_rocksdb_writes_total", "Rows written to the RocksDB tier.")),
        jobs_loaded(r.Gauge("ps_jobs_loaded", "Jobs loaded on this parameter server.")),
        rpc_errors(r.Counter("ps_rpc_errors_total", "Parameter-server calls that failed.")) {}

  prometheus::Histogram& lookup_seconds;
  prometheus::Histogram& lookup_wait_seconds;
  prometheus::Histogram& push_seconds;
  prometheus::Counter& lookup_rows;
  prometheus::Counter& push_rows;
  prometheus::Gauge& memory_rows;
  prometheus::Gauge& memory_bytes;
  prometheus::Gauge& memory_budget_bytes;
  prometheus::Counter& rocksdb_reads;
  prometheus::Counter& rocksdb_writes;
  prometheus::Gauge& jobs_loaded;
  prometheus::Counter& rpc_errors;
};

PsService::PsService(const PsServiceOptions& options)
    : options_(options),
      metrics_(std::make_unique<Metrics>(*options.metrics)),
      lookup_requests_(std::make_shared<proto::MessagePool<dlrm::v1::LookupRequest>>()) {
  metrics_->memory_budget_bytes.Set(static_cast<double>(options.memory_budget_bytes));
}

PsService::~PsService() {
  FailParkedLookups(absl::UnavailableError("parameter server is shutting down"));
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
        absl::StrCat("job '", job_id, "' is not loaded on this parameter server"));
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
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const auto& job : jobs) job->gate()->Close(status);
}

void PsService::UpdateStoreMetrics(bool wait) {
  int64_t rows = 0, bytes = 0, reads = 0, writes = 0;
  if (wait) {
    mu_.Lock();
  } else if (!mu_.TryLock()) {
    return;
  }
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&mu_};
  for (const auto& [id, job] : jobs_) {
    const embedding::TieredStoreStats s = job->stats();
    rows += s.memory_rows;
    bytes += s.memory_bytes;
    reads += s.rocksdb_reads;
    writes += s.rocksdb_writes;
  }
  reads += unloaded_reads_;
  writes += unloaded_writes_;
  metrics_->memory_rows.Set(static_cast<double>(rows));
  metrics_->memory_bytes.Set(static_cast<double>(bytes));
  if (reads > reported_reads_) {
    metrics_->rocksdb_reads.Increment(static_cast<double>(reads - reported_reads_));
    reported_reads_ = reads;
  }
  if (writes > reported_writes_) {
    metrics_->rocksdb_writes.Increment(static_cast<double>(writes - reported_writes_));
    reported_writes_ = writes;
  }
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
    const dlrm::v1::LoadJobRequest& request) {
  DLRM_RETURN_IF_ERROR(ValidateLoadRequest(request));
  absl::MutexLock load_lock(&load_mu_);
  std::shared_ptr<PsJob> existing;
  int64_t reserved = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end()) existing = it->second;
    for (const auto& [id, job] : jobs_) reserved += job->memory_budget_bytes();
  }
  dlrm::v1::LoadJobResponse response;
  if (existing != nullptr && request.restart() && request.job_epoch() > existing->epoch()) {
    // A recovery: the job starts over from its checkpoint, so the older epoch's rows go.
    DLRM_LOG(INFO) << "job " << request.job_id() << " restarts at epoch " << request.job_epoch()
                   << " (loaded at " << existing->epoch() << "); its tables are created anew";
    existing.reset();
    DLRM_RETURN_IF_ERROR(UnloadLocked(request.job_id(), std::numeric_limits<int64_t>::max()));
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
    response.set_rows_resident(existing->stats().memory_rows);
    return response;
  }
  PsJobOptions job_options;
  job_options.spec = request;
  job_options.data_dir = options_.data_dir;
  job_options.memory_budget_bytes = std::max<int64_t>(0, options_.memory_budget_bytes - reserved);
  job_options.rocksdb_wal = options_.rocksdb_wal;
  job_options.timers = options_.timers;
  DLRM_ASSIGN_OR_RETURN(std::shared_ptr<PsJob> job, PsJob::Create(job_options));
  {
    absl::MutexLock lock(&mu_);
    jobs_[request.job_id()] = job;
    metrics_->jobs_loaded.Set(static_cast<double>(jobs_.size()));
  }
  response.set_rows_resident(job->stats().memory_rows);
  return response;
}

absl::Status PsService::DoUnloadJob(const std::string& job_id, int64_t max_epoch) {
  absl::MutexLock load_lock(&load_mu_);
  return UnloadLocked(job_id, max_epoch);
}

absl::Status PsService::UnloadLocked(const std::string& job_id, int64_t max_epoch) {
  std::shared_ptr<PsJob> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("job '", job_id, "' is not loaded on this parameter server"));
    }
    if (it->second->epoch() > max_epoch) {
      return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' is loaded at epoch ",
                                                        it->second->epoch(), ", newer than ",
                                                        max_epoch, "; kept"));
    }
    job = std::move(it->second);
    jobs_.erase(it);
    const embedding::TieredStoreStats s = job->stats();
    unloaded_reads_ += s.rocksdb_reads;
    unloaded_writes_ += s.rocksdb_writes;
    metrics_->jobs_loaded.Set(static_cast<double>(jobs_.size()));
  }
  job->gate()->Close(absl::AbortedError(absl::StrCat("job ", job_id, " was unloaded")));
  UpdateStoreMetrics();
  // Calls in flight hold their own references; the store closes with the last one. The folder
  // is removed now only if nobody else holds the job (else a later LoadJob clears it).
  const std::string path = job->path();
  if (job.use_count() == 1) {
    job.reset();
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  return absl::OkStatus();
}

void PsService::HandleLoadJob(grpc::CallbackServerContext* context,
                              const dlrm::v1::LoadJobRequest* request,
                              dlrm::v1::LoadJobResponse* response, Done done) {
  if (absl::Status denied = common::Authorize(*context, "ParameterServer.LoadJob"); !denied.ok()) {
    return done(denied);
  }
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<dlrm::v1::LoadJobResponse> result = DoLoadJob(*request);
    if (result.ok()) *response = std::move(*result);
    done(result.status());
  });
}

void PsService::SetGrantKey(std::string key) {
  absl::MutexLock lock(&grant_mu_);
  grant_key_ = std::move(key);
}

absl::Status PsService::AuthorizeAdmin(const grpc::CallbackServerContext& context,
                                       absl::string_view method, const std::string& job_id) const {
  DLRM_RETURN_IF_ERROR(common::Authorize(context, method));
  std::string key;
  {
    absl::MutexLock lock(&grant_mu_);
    key = grant_key_;
  }
  if (key.empty()) {
    if (!common::OverTls(context)) return absl::OkStatus();  // plaintext trusts the network
    return absl::UnavailableError(
        absl::StrCat(method,
                     ": this parameter server has not registered with a coordinator yet, "
                     "so it cannot check the job's grant"));
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(common::kJobGrantMetadata);
  const absl::string_view grant = it == metadata.end()
                                      ? absl::string_view()
                                      : absl::string_view(it->second.data(), it->second.size());
  if (common::IsJobAdminGrant(key, job_id, grant)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(method, " of job '", job_id.substr(0, common::kMaxNameBytes), "' needs ",
                   grant.empty() ? "the coordinator's grant for the job"
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
  options_.pool->Submit([this, request, done] { done(DoUnloadJob(request->job_id())); });
}

// ---- Lookup ----

// One Lookup being served, shared by its parts (contiguous groups of tables served on different
// threads); the last part to finish answers the call.
struct PsService::LookupCall {
  LookupCall(std::shared_ptr<proto::MessagePool<dlrm::v1::LookupRequest>> pool,
             grpc::ByteBuffer* response_in, grpc::ServerUnaryReactor* reactor_in)
      : requests(std::move(pool)),
        request(requests->Take()),
        response(response_in),
        reactor(reactor_in) {}
  ~LookupCall() { requests->Return(std::move(request)); }

  const std::shared_ptr<proto::MessagePool<dlrm::v1::LookupRequest>> requests;
  std::unique_ptr<dlrm::v1::LookupRequest> request;
  grpc::ByteBuffer* const response;
  grpc::ServerUnaryReactor* const reactor;
  common::RpcMethodCounters* bytes = nullptr;  // server-side byte counts of Lookup
  std::shared_ptr<PsJob> job;
  proto::LookupAnswer answer;  // the rows, written in place and sent without a copy
  absl::Time start;
  std::atomic<int> parts_left{0};
  std::atomic<int64_t> rows{0};
  absl::Mutex mu;
  absl::Status status ABSL_GUARDED_BY(mu);
};

grpc::ServerUnaryReactor* PsService::Lookup(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request_bytes,
                                            grpc::ByteBuffer* response) {
  common::RpcMethodCounters* tally =
      &common::RpcByteCounters::ProcessServer().ForMethod(proto::kLookupMethod);
  tally->AddCall();
  tally->AddReceived(common::GrpcMessageBytes(static_cast<int64_t>(request_bytes->Length())));
  if (absl::Status denied = common::Authorize(*context, "ParameterServer.Lookup"); !denied.ok()) {
    grpc::ServerUnaryReactor* refused = context->DefaultReactor();
    Finish(refused, denied);
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_shared<LookupCall>(lookup_requests_, response, reactor);
  call->bytes = tally;
  grpc::ByteBuffer bytes(*request_bytes);  // shares the slices; parsing consumes the copy
  if (!grpc::SerializationTraits<dlrm::v1::LookupRequest>::Deserialize(&bytes, call->request.get())
           .ok()) {
    Finish(reactor, absl::InvalidArgumentError("Lookup: malformed LookupRequest"));
    return reactor;
  }
  if (TryLookupInline(call)) return reactor;
  options_.pool->Submit([this, context, call] {
    const dlrm::v1::LookupRequest& request = *call->request;
    absl::StatusOr<std::shared_ptr<PsJob>> job = FindJob(request.job_id());
    if (!job.ok()) return Finish(call->reactor, job.status());
    absl::Status valid = (*job)->ValidateLookup(request);
    if (!valid.ok()) return Finish(call->reactor, valid);
    std::shared_ptr<StepGate> gate = (*job)->gate();
    if (gate->Ready(request.step())) return RunLookup(std::move(*job), call);
    // Park: resumed on the pool by the push that satisfies the bound, or failed at the deadline.
    const absl::Time parked_at = absl::Now();
    gate->WhenVisible(
        request.step(), request.worker_rank(), absl::FromChrono(context->deadline()),
        [this, job = std::move(*job), call, parked_at](absl::Status s) {
          metrics_->lookup_wait_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - parked_at));
          if (!s.ok()) return Finish(call->reactor, s);
          options_.pool->Submit([this, job, call] { RunLookup(job, call); });
        });
  });
  return reactor;
}

namespace {

// Requests with at least this many ids have their tables split over the pool's threads.
constexpr int64_t kParallelLookupIds = 4096;

// Bounds of contiguous groups of tables with about equal id counts, one per thread (one group
// for a small request): part p is tables [bounds[p], bounds[p + 1]).
std::vector<int> LookupParts(const dlrm::v1::LookupRequest& request, int threads) {
  const int n = request.tables_size();
  int64_t total_ids = 0;
  for (const auto& t : request.tables()) total_ids += static_cast<int64_t>(t.ids().size() / 8);
  const int parts = total_ids >= kParallelLookupIds ? std::min(n, threads) : 1;
  std::vector<int> bounds = {0};
  int64_t seen = 0;
  for (int i = 0; i < n; ++i) {
    seen += static_cast<int64_t>(request.tables(i).ids().size() / 8);
    const int next_part = static_cast<int>(bounds.size());
    if (next_part < parts && seen * parts >= total_ids * next_part && i + 1 < n) {
      bounds.push_back(i + 1);
    }
  }
  bounds.push_back(std::max(n, 0));
  return bounds;
}

}  // namespace

void PsService::FinishLookupPart(const std::shared_ptr<LookupCall>& call,
                                 const absl::StatusOr<int64_t>& rows, bool on_reactor) {
  if (rows.ok()) {
    call->rows += *rows;
  } else {
    absl::MutexLock lock(&call->mu);
    if (call->status.ok()) call->status = rows.status();
  }
  if (--call->parts_left > 0) return;
  absl::Status status;
  {
    absl::MutexLock lock(&call->mu);
    status = call->status;
  }
  if (status.ok()) {
    lookups_.fetch_add(1, std::memory_order_relaxed);
    rows_looked_up_.fetch_add(call->rows.load(), std::memory_order_relaxed);
    metrics_->lookup_rows.Increment(static_cast<double>(call->rows.load()));
    *call->response = call->answer.Release();
    call->bytes->AddSent(common::GrpcMessageBytes(static_cast<int64_t>(call->response->Length())));
  }
  metrics_->lookup_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - call->start));
  UpdateStoreMetrics(/*wait=*/!on_reactor);
  Finish(call->reactor, status);
  // The answer is out: now the frequency counts the lookup deferred.
  if (call->job->ClaimAccessCounting()) {
    options_.pool->Submit([job = call->job] { job->CountPendingAccesses(); });
  }
}

void PsService::RunLookupPart(const std::shared_ptr<LookupCall>& call, int begin, int end) {
  FinishLookupPart(call, call->job->LookupTables(*call->request, begin, end, &call->answer),
                   /*on_reactor=*/false);
}

std::vector<int> PsService::StartLookup(std::shared_ptr<PsJob> job,
                                        const std::shared_ptr<LookupCall>& call) {
  call->job = std::move(job);
  call->start = absl::Now();
  call->job->PrepareLookup(*call->request, &call->answer);
  std::vector<int> bounds = LookupParts(*call->request, options_.pool->num_threads());
  call->parts_left = static_cast<int>(bounds.size()) - 1;
  for (size_t p = 1; p + 1 < bounds.size(); ++p) {
    options_.pool->Submit(
        [this, call, b = bounds[p], e = bounds[p + 1]] { RunLookupPart(call, b, e); });
  }
  return bounds;
}

bool PsService::TryLookupInline(const std::shared_ptr<LookupCall>& call) {
  if (options_.injected_delay > absl::ZeroDuration()) return false;
  const dlrm::v1::LookupRequest& request = *call->request;
  std::shared_ptr<PsJob> job;
  if (!mu_.TryLock()) return false;
  auto it = jobs_.find(request.job_id());
  if (it != jobs_.end()) job = it->second;
  mu_.Unlock();
  if (job == nullptr) return false;  // the pool answers NOT_FOUND
  absl::Status valid = job->ValidateLookup(request);
  if (!valid.ok()) {
    Finish(call->reactor, valid);
    return true;
  }
  if (!job->gate()->Ready(request.step())) return false;
  // The other parts go to the pool; the first is served here while its tables are resident, and
  // what is left of it goes to the pool too.
  const std::vector<int> bounds = StartLookup(std::move(job), call);
  int64_t rows = 0;
  absl::StatusOr<int> served =
      call->job->LookupTablesResident(request, bounds[0], bounds[1], &call->answer, &rows);
  if (served.ok() && *served < bounds[1]) {
    call->rows += rows;
    options_.pool->Submit([this, call, b = *served, e = bounds[1]] { RunLookupPart(call, b, e); });
    return true;
  }
  FinishLookupPart(call, served.ok() ? absl::StatusOr<int64_t>(rows) : served.status(),
                   /*on_reactor=*/true);
  return true;
}

void PsService::RunLookup(std::shared_ptr<PsJob> job, const std::shared_ptr<LookupCall>& call) {
  if (options_.injected_delay > absl::ZeroDuration()) absl::SleepFor(options_.injected_delay);
  const std::vector<int> bounds = StartLookup(std::move(job), call);
  RunLookupPart(call, bounds[0], bounds[1]);
}

// ---- PushGradients ----

grpc::ServerUnaryReactor* PsService::PushGradients(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request_bytes,
                                                   grpc::ByteBuffer* response_bytes) {
  common::RpcMethodCounters* tally =
      &common::RpcByteCounters::ProcessServer().ForMethod("/dlrm.v1.ParameterServer/PushGradients");
  tally->AddCall();
  tally->AddReceived(common::GrpcMessageBytes(static_cast<int64_t>(request_bytes->Length())));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status denied = common::Authorize(*context, "ParameterServer.PushGradients");
      !denied.ok()) {
    Finish(reactor, denied);
    return reactor;
  }
  auto request = std::make_shared<dlrm::v1::PushGradientsRequest>();
  grpc::ByteBuffer bytes(*request_bytes);  // shares the slices; parsing consumes the copy
  if (!grpc::SerializationTraits<dlrm::v1::PushGradientsRequest>::Deserialize(&bytes, request.get())
           .ok()) {
    Finish(reactor, absl::InvalidArgumentError("PushGradients: malformed PushGradientsRequest"));
    return reactor;
  }
  options_.pool->Submit([this, request, response_bytes, reactor, tally] {
    dlrm::v1::PushGradientsResponse response;
    absl::Status status = RunPush(*request, &response);
    if (status.ok()) {
      bool own_buffer = false;
      grpc::Status serialized =
          grpc::SerializationTraits<dlrm::v1::PushGradientsResponse>::Serialize(
              response, response_bytes, &own_buffer);
      status = common::FromGrpcStatus(serialized);
      if (status.ok()) {
        tally->AddSent(common::GrpcMessageBytes(static_cast<int64_t>(response_bytes->Length())));
      }
    }
    Finish(reactor, status);
  });
  return reactor;
}

absl::Status PsService::RunPush(const dlrm::v1::PushGradientsRequest& request,
                                dlrm::v1::PushGradientsResponse* response) {
  DLRM_ASSIGN_OR_RETURN(std::shared_ptr<PsJob> job, FindJob(request.job_id()));
  DLRM_RETURN_IF_ERROR(job->ValidatePush(request));
  const absl::Time start = absl::Now();
  if (options_.injected_delay > absl::ZeroDuration()) absl::SleepFor(options_.injected_delay);
  bool duplicate = false;
  absl::StatusOr<int64_t> rows = job->Push(request, &duplicate);
  metrics_->push_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (duplicate) {
    // A retry whose first copy was applied (its answer was lost): OK, counted once.
    DLRM_LOG(INFO) << "job " << request.job_id() << ": push " << request.sequence() << " of worker "
                   << request.worker_rank() << " (step " << request.step()
                   << ") was applied already; not applied again";
  } else if (rows.ok()) {
    response->set_rows_updated(*rows);
    pushes_.fetch_add(1, std::memory_order_relaxed);
    rows_pushed_.fetch_add(*rows, std::memory_order_relaxed);
    metrics_->push_rows.Increment(static_cast<double>(*rows));
  }
  UpdateStoreMetrics();
  return rows.status();
}

// ---- ReadRows / WriteRows ----

void PsService::HandleReadRows(grpc::CallbackServerContext* context,
                               const dlrm::v1::ReadRowsRequest* request,
                               dlrm::v1::ReadRowsResponse* response, Done done) {
  if (absl::Status denied = common::Authorize(*context, "ParameterServer.ReadRows"); !denied.ok()) {
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

// ---- GetStats / Checkpoint ----

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
  if (absl::Status denied = common::Authorize(*context, "ParameterServer.GetStats"); !denied.ok()) {
    return done(denied);
  }
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<dlrm::v1::GetStatsResponse> r = DoGetStats(request->job_id());
    if (r.ok()) *response = std::move(*r);
    done(r.status());
  });
}

absl::StatusOr<dlrm::v1::CheckpointResponse> PsService::DoCheckpoint(
    const dlrm::v1::CheckpointRequest& request) {
  DLRM_ASSIGN_OR_RETURN(std::shared_ptr<PsJob> job, FindJob(request.job_id()));
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", request.step(), " < 0"));
  }
  const int64_t epoch = request.job_epoch();
  if (epoch > 0) DLRM_RETURN_IF_ERROR(job->CheckEpoch(epoch));
  namespace fs = std::filesystem;
  // The snapshot lives in this server's data folder, named by job and step only.
  const fs::path snapshot = fs::path(options_.data_dir) / "snapshots" /
                            absl::StrCat(job->shard_index(), "-", request.step());
  std::error_code ec;
  dlrm::v1::CheckpointResponse response;
  if (request.phase() == dlrm::v1::CheckpointRequest::SNAPSHOT) {
    fs::remove_all(snapshot, ec);
    fs::create_directories(snapshot.parent_path(), ec);
    if (ec) return absl::UnavailableError(absl::StrCat(snapshot.string(), ": ", ec.message()));
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
  options_.pool->Submit([this, request, response, done] {
    absl::StatusOr<dlrm::v1::CheckpointResponse> r = DoCheckpoint(*request);
    if (r.ok()) *response = std::move(*r);
    UpdateStoreMetrics();
    done(r.status());
  });
}

}  // namespace dlrm::server
