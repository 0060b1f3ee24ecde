#include "server/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/raw_unary.h"
#include "common/status.h"
#include "common/version.h"
#include "server/ps_load_request.h"

namespace dlrm::server {
namespace {

using common::ToGrpcStatus;

// The largest request of a call that waits (KvGet, WatchJob): its key or job id, a wait, framing.
constexpr int64_t kMaxParkedRequestBytes = common::kMaxKvKeyBytes + 64;

// Counts a unary call by method and code, and finishes it.
auto Counted(RpcCounter* rpcs, const char* method) {
  return [rpcs, method](grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
    grpc::Status s = ToGrpcStatus(status);
    rpcs->Record(method, s);
    reactor->Finish(s);
  };
}

// INVALID_ARGUMENT naming the field, its length and the limit when `text` is longer than
// `limit` bytes. Checked at the RPC edge, before the state stores anything.
absl::Status CheckLength(const char* field, const std::string& text, int64_t limit,
                         const char* limit_name) {
  if (static_cast<int64_t>(text.size()) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " of ", text.size(),
                                                 " bytes is over the limit of ", limit, " (",
                                                 limit_name, " in common/limits.h)"));
}

// INVALID_ARGUMENT naming the field and the byte's offset when `text` holds a control character
// (below 0x20, or 0x7f): a member's name and addresses are printed in `dlrmctl members`, logs and
// metrics labels, where an escape sequence would reach the reader's terminal.
absl::Status CheckPrintable(const char* field, const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": control character 0x", absl::Hex(c, absl::kZeroPad2), " at byte ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRegister(const dlrm::v1::RegisterRequest& r) {
  for (absl::Status s : {
           CheckLength("Register: name", r.name(), common::kMaxNameBytes, "kMaxNameBytes"),
           CheckLength("Register: address", r.address(), common::kMaxAddressBytes,
                       "kMaxAddressBytes"),
           CheckLength("Register: metrics_address", r.metrics_address(), common::kMaxAddressBytes,
                       "kMaxAddressBytes"),
           CheckPrintable("Register: name", r.name()),
           CheckPrintable("Register: address", r.address()),
           CheckPrintable("Register: metrics_address", r.metrics_address()),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckReport(const dlrm::v1::ReportProgressRequest& r) {
  if (absl::Status s = CheckLength("ReportProgress: message", r.message(), common::kMaxMessageBytes,
                                   "kMaxMessageBytes");
      !s.ok()) {
    return s;
  }
  // Printed by `dlrmctl describe`.
  for (absl::Status s : {CheckLength("ReportProgress: restored_from", r.restored_from(),
                                     common::kMaxPathBytes, "kMaxPathBytes"),
                         CheckPrintable("ReportProgress: restored_from", r.restored_from())}) {
    if (!s.ok()) return s;
  }
  if (r.metrics_size() > common::kMaxReportMetrics) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportProgress: ", r.metrics_size(), " metrics is over the limit of ",
                     common::kMaxReportMetrics, " (kMaxReportMetrics in common/limits.h)"));
  }
  for (const auto& [name, value] : r.metrics()) {
    if (absl::Status s = CheckLength("ReportProgress: a metric name", name, common::kMaxNameBytes,
                                     "kMaxNameBytes");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RpcCounter::Record(const char* method, const grpc::Status& status) {
  if (metrics_ == nullptr) return;
  metrics_
      ->Counter("coordinator_rpcs_total", "RPCs served by the coordinator, by method and code.",
                {{"method", method},
                 {"code", std::string(absl::StatusCodeToString(
                              static_cast<absl::StatusCode>(status.error_code())))}})
      .Increment();
}

// Every unary method: parse (INVALID_ARGUMENT for bytes that are no request), run Do<Method>,
// count the call, answer. ProtoService: "/dlrm.v1.Coordinator/", the prefix of the full name.
#define DLRM_RAW_UNARY(Service, ProtoService, Method, Request, Response)                         \
  grpc::ServerUnaryReactor* Service::Method(grpc::CallbackServerContext* context,                \
                                            const grpc::ByteBuffer* in, grpc::ByteBuffer* out) { \
    return common::ServeRawUnary<Request, Response>(                                             \
        context, in, out, ProtoService #Method,                                                  \
        [&](const Request& request, Response* response, auto done) {                             \
          done(Do##Method(context, &request, response));                                         \
        },                                                                                       \
        Counted(rpcs_, #Method));                                                                \
  }

DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", Register, dlrm::v1::RegisterRequest,
               dlrm::v1::RegisterResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", Heartbeat,
               dlrm::v1::HeartbeatRequest, dlrm::v1::HeartbeatResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", GetClusterView,
               dlrm::v1::GetClusterViewRequest, dlrm::v1::GetClusterViewResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", Leave, dlrm::v1::LeaveRequest,
               dlrm::v1::LeaveResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", KvSet, dlrm::v1::KvSetRequest,
               dlrm::v1::KvSetResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", KvDelete, dlrm::v1::KvDeleteRequest,
               dlrm::v1::KvDeleteResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", KvAdd, dlrm::v1::KvAddRequest,
               dlrm::v1::KvAddResponse)
DLRM_RAW_UNARY(CoordinatorServiceImpl, "/dlrm.v1.Coordinator/", ReportProgress,
               dlrm::v1::ReportProgressRequest, dlrm::v1::ReportProgressResponse)
DLRM_RAW_UNARY(JobsServiceImpl, "/dlrm.v1.Jobs/", SubmitJob, dlrm::v1::SubmitJobRequest,
               dlrm::v1::SubmitJobResponse)
DLRM_RAW_UNARY(JobsServiceImpl, "/dlrm.v1.Jobs/", GetJob, dlrm::v1::GetJobRequest, dlrm::v1::Job)
DLRM_RAW_UNARY(JobsServiceImpl, "/dlrm.v1.Jobs/", ListJobs, dlrm::v1::ListJobsRequest,
               dlrm::v1::ListJobsResponse)
DLRM_RAW_UNARY(JobsServiceImpl, "/dlrm.v1.Jobs/", CancelJob, dlrm::v1::CancelJobRequest,
               dlrm::v1::Job)
DLRM_RAW_UNARY(JobsServiceImpl, "/dlrm.v1.Jobs/", CheckpointJob, dlrm::v1::CheckpointJobRequest,
               dlrm::v1::Job)
#undef DLRM_RAW_UNARY

// KvGet answers later (when the key is set or the wait ends).
grpc::ServerUnaryReactor* CoordinatorServiceImpl::KvGet(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
  // A KvGet may wait up to kMaxWait, and gRPC keeps its request (and the parse keeps its unknown
  // fields) until it is answered: one larger than a key and a wait need is refused before it waits.
  const bool oversized = static_cast<int64_t>(in->Length()) > kMaxParkedRequestBytes;
  return common::ServeRawUnary<dlrm::v1::KvGetRequest, dlrm::v1::KvGetResponse>(
      context, in, out, "/dlrm.v1.Coordinator/KvGet",
      [&](const dlrm::v1::KvGetRequest& request, dlrm::v1::KvGetResponse* response, auto done) {
        if (oversized) {
          return done(absl::InvalidArgumentError(
              absl::StrCat("KvGet: a request of ", in->Length(), " bytes is over the ",
                           kMaxParkedRequestBytes, " bytes a key and a wait take")));
        }
        DoKvGet(context, &request, response, std::move(done));
      },
      Counted(rpcs_, "KvGet"));
}

absl::Status CoordinatorServiceImpl::CheckMemberKey(const char* method,
                                                    const std::string& member_id,
                                                    const std::string& key) const {
  if (member_id.empty()) return absl::InvalidArgumentError(absl::StrCat(method, ": no member_id"));
  if (keys_->IsMemberKey(member_id, key)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      method, ": the member key is not that of member '",
      member_id.substr(0, common::kMaxNameBytes), "' (Register answers a member its key)"));
}

absl::Status CoordinatorServiceImpl::DoRegister(grpc::CallbackServerContext* context,
                                                const dlrm::v1::RegisterRequest* request,
                                                dlrm::v1::RegisterResponse* response) {
  if (absl::Status s = CheckRegister(*request); !s.ok()) return s;
  if (absl::Status s = CheckRegisterRole(*request); !s.ok()) return s;
  // A certificate of one role cannot register a member of another (a worker posing as a PS).
  const char* role = request->role() == dlrm::v1::ROLE_PS ? "ps" : "worker";
  if (absl::Status denied = common::AuthorizeRole(*context, role); !denied.ok()) {
    return denied;
  }
  auto result = state_->Register(*request, absl::Now());
  if (result.ok()) {
    *response = std::move(*result);
    response->set_member_key(keys_->MemberKey(response->member_id()));
    if (request->role() == dlrm::v1::ROLE_PS) {
      response->set_ps_grant_key(keys_->PsGrantKey(response->member_id()));
    }
  }
  return result.status();
}

absl::Status CoordinatorServiceImpl::DoHeartbeat(grpc::CallbackServerContext* /*context*/,
                                                 const dlrm::v1::HeartbeatRequest* request,
                                                 dlrm::v1::HeartbeatResponse* response) {
  if (absl::Status s = CheckMemberKey("Heartbeat", request->member_id(), request->member_key());
      !s.ok()) {
    return s;
  }
  auto result = state_->Heartbeat(request->member_id(), absl::Now());
  if (result.ok()) {
    *response = std::move(*result);
    // Every rank of a job may make its data calls to the job's parameter servers at its epoch;
    // rank 0 also acts for the coordinator on them (common/grants.h).
    // Every rank may load the job on them, with its spec's tables and parameters only.
    if (response->has_worker() && response->worker().has_job()) {
      dlrm::v1::WorkerAssignment* worker = response->mutable_worker();
      const dlrm::v1::JobAssignment& job = worker->job();
      absl::StatusOr<std::vector<std::string>> loads = LoadRequests(job);
      if (!loads.ok()) {
        // Specs are checked at submission, so this is a bug; the job's LoadJob calls will be
        // refused for want of a grant, naming it.
        DLRM_LOG(ERROR) << "job " << job.job_id() << ": no load grants: " << loads.status();
      }
      for (int s = 0; s < job.ps_member_ids_size(); ++s) {
        const std::string key = keys_->PsGrantKey(job.ps_member_ids(s));
        worker->add_member_grants(common::JobMemberGrant(key, job.job_id(), job.job_epoch()));
        if (worker->rank() == 0) worker->add_job_grants(common::JobAdminGrant(key, job.job_id()));
        if (loads.ok()) worker->add_load_grants(common::JobLoadGrant(key, (*loads)[s]));
      }
    }
  }
  return result.status();
}

absl::StatusOr<std::vector<std::string>> CoordinatorServiceImpl::LoadRequests(
    const dlrm::v1::JobAssignment& job) {
  const int shards = job.ps_member_ids_size();
  const std::string start =
      absl::StrCat(job.job_epoch(), "/", job.recovery(), "/", job.world_size(), "/", shards);
  {
    absl::MutexLock lock(&load_mu_);
    auto it = load_requests_.find(job.job_id());
    if (it != load_requests_.end() && it->second.start == start) return it->second.requests;
  }
  DLRM_ASSIGN_OR_RETURN(const common::JobSpec spec,
                        common::ParseJobSpec(job.job_spec_yaml(), job.job_id()));
  DLRM_ASSIGN_OR_RETURN(const PsJobParams params,
                        PsJobParamsFromSpec(spec, job.world_size(), job.recovery() > 0));
  const std::vector<embedding::TableConfig> tables = TableConfigsFromSpec(spec);
  std::vector<std::string> requests;
  for (int s = 0; s < shards; ++s) {
    requests.push_back(LoadJobRequestBytes(
        MakeLoadJobRequest(job.job_id(), job.job_epoch(), tables, params, s, shards)));
  }
  absl::MutexLock lock(&load_mu_);
  // Entries of finished jobs are not removed one by one: the map is emptied when it grows past
  // the jobs a coordinator runs at once.
  if (load_requests_.size() >= 256) load_requests_.clear();
  load_requests_[job.job_id()] = {.start = start, .requests = requests};
  return requests;
}

absl::Status CoordinatorServiceImpl::DoGetClusterView(
    grpc::CallbackServerContext* /*context*/, const dlrm::v1::GetClusterViewRequest* /*request*/,
    dlrm::v1::GetClusterViewResponse* response) {
  *response = state_->ClusterView();
  response->set_server_version(common::kVersion);
  return absl::OkStatus();
}

absl::Status CoordinatorServiceImpl::DoLeave(grpc::CallbackServerContext* /*context*/,
                                             const dlrm::v1::LeaveRequest* request,
                                             dlrm::v1::LeaveResponse* response) {
  if (absl::Status s = CheckMemberKey("Leave", request->member_id(), request->member_key());
      !s.ok()) {
    return s;
  }
  auto result = state_->Leave(request->member_id(), absl::Now());
  if (result.ok()) response->set_epoch(*result);
  return result.status();
}

absl::Status CoordinatorServiceImpl::DoKvSet(grpc::CallbackServerContext* /*context*/,
                                             const dlrm::v1::KvSetRequest* request,
                                             dlrm::v1::KvSetResponse* /*response*/) {
  return kv_->Set(request->key(), request->value());
}

void CoordinatorServiceImpl::DoKvGet(grpc::CallbackServerContext* context,
                                     const dlrm::v1::KvGetRequest* request,
                                     dlrm::v1::KvGetResponse* response,
                                     std::function<void(absl::Status)> done) {
  absl::Duration wait = absl::Milliseconds(request->wait_timeout_ms());
  if (wait > RendezvousStore::kMaxWait) {
    // Refused as the store refuses a negative one, also when the caller's deadline is sooner.
    return done(absl::InvalidArgumentError(
        absl::StrCat("KvGet: wait ", absl::FormatDuration(wait), " is outside [0, ",
                     absl::FormatDuration(RendezvousStore::kMaxWait), "]")));
  }
  // Never wait past the caller's own deadline: it would not hear the answer.
  const absl::Duration until_deadline = absl::FromChrono(context->deadline()) - absl::Now();
  if (wait > absl::ZeroDuration() && until_deadline < wait) {
    wait = std::max(absl::ZeroDuration(), until_deadline);
    if (wait == absl::ZeroDuration()) wait = absl::Milliseconds(1);
  }
  // The store calls back exactly once, possibly right here, possibly on the timer thread or on
  // the thread of a KvSet; the response lives until done.
  kv_->Get(request->key(), wait,
           [response, done = std::move(done)](absl::StatusOr<std::string> value) {
             if (value.ok()) response->set_value(std::move(*value));
             done(value.status());
           });
}

absl::Status CoordinatorServiceImpl::DoKvDelete(grpc::CallbackServerContext* /*context*/,
                                                const dlrm::v1::KvDeleteRequest* request,
                                                dlrm::v1::KvDeleteResponse* response) {
  if (request->key().empty()) {
    // An empty prefix would delete every job's keys.
    return absl::InvalidArgumentError(request->prefix() ? "rendezvous key prefix is empty"
                                                        : "rendezvous key is empty");
  }
  if (absl::Status s =
          CheckLength("KvDelete: key", request->key(), common::kMaxKvKeyBytes, "kMaxKvKeyBytes");
      !s.ok()) {
    return s;
  }
  response->set_deleted(kv_->Delete(request->key(), request->prefix()));
  return absl::OkStatus();
}

absl::Status CoordinatorServiceImpl::DoKvAdd(grpc::CallbackServerContext* /*context*/,
                                             const dlrm::v1::KvAddRequest* request,
                                             dlrm::v1::KvAddResponse* response) {
  auto result = kv_->Add(request->key(), request->delta());
  if (result.ok()) response->set_value(*result);
  return result.status();
}

absl::Status CoordinatorServiceImpl::DoReportProgress(
    grpc::CallbackServerContext* /*context*/, const dlrm::v1::ReportProgressRequest* request,
    dlrm::v1::ReportProgressResponse* response) {
  if (absl::Status s = CheckReport(*request); !s.ok()) return s;
  // The key proves the caller is member_id; the state then checks that member holds the rank.
  if (absl::Status s =
          CheckMemberKey("ReportProgress", request->member_id(), request->member_key());
      !s.ok()) {
    return s;
  }
  auto result = state_->ReportProgress(*request, absl::Now());
  if (result.ok()) response->set_state(*result);
  return result.status();
}

absl::Status JobsServiceImpl::DoSubmitJob(grpc::CallbackServerContext* /*context*/,
                                          const dlrm::v1::SubmitJobRequest* request,
                                          dlrm::v1::SubmitJobResponse* response) {
  // Before parsing: a huge spec costs the parser far more than its bytes.
  if (absl::Status s = CheckLength("SubmitJob: spec_yaml", request->spec_yaml(),
                                   common::kMaxSpecBytes, "kMaxSpecBytes");
      !s.ok()) {
    return s;
  }
  auto result = state_->Submit(*request, absl::Now());
  if (result.ok()) *response->mutable_job() = std::move(*result);
  return result.status();
}

absl::Status JobsServiceImpl::DoGetJob(grpc::CallbackServerContext* /*context*/,
                                       const dlrm::v1::GetJobRequest* request,
                                       dlrm::v1::Job* response) {
  auto result = state_->GetJob(request->job_id());
  if (result.ok()) *response = std::move(*result);
  return result.status();
}

absl::Status JobsServiceImpl::DoListJobs(grpc::CallbackServerContext* /*context*/,
                                         const dlrm::v1::ListJobsRequest* request,
                                         dlrm::v1::ListJobsResponse* response) {
  if (!dlrm::v1::JobState_IsValid(request->state())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job state filter ", static_cast<int>(request->state()), " is not a JobState"));
  }
  if (request->page_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ListJobs: page_size ", request->page_size(),
                                                   " < 0 (0: the default, ", common::kMaxJobsPage,
                                                   ")"));
  }
  const int64_t page_size = request->page_size() == 0
                                ? common::kMaxJobsPage
                                : std::min<int64_t>(request->page_size(), common::kMaxJobsPage);
  DLRM_ASSIGN_OR_RETURN(
      std::vector<dlrm::v1::Job> jobs,
      state_->ListJobsPage(request->state(), request->page_token(), page_size,
                           common::kMaxListPageBytes, response->mutable_next_page_token()));
  for (auto& job : jobs) *response->add_jobs() = std::move(job);
  return absl::OkStatus();
}

absl::Status JobsServiceImpl::DoCancelJob(grpc::CallbackServerContext* /*context*/,
                                          const dlrm::v1::CancelJobRequest* request,
                                          dlrm::v1::Job* response) {
  if (absl::Status s = CheckLength("CancelJob: reason", request->reason(), common::kMaxMessageBytes,
                                   "kMaxMessageBytes");
      !s.ok()) {
    return s;
  }
  auto result = state_->Cancel(request->job_id(), request->reason(), absl::Now());
  if (result.ok()) *response = std::move(*result);
  return result.status();
}

absl::Status JobsServiceImpl::DoCheckpointJob(grpc::CallbackServerContext* /*context*/,
                                              const dlrm::v1::CheckpointJobRequest* request,
                                              dlrm::v1::Job* response) {
  auto result = state_->RequestCheckpoint(request->job_id(), absl::Now());
  if (result.ok()) *response = std::move(*result);
  return result.status();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobsServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.WatchJob"); !denied.ok()) {
    const grpc::Status refused = common::ToGrpcStatus(denied);
    rpcs_->Record("WatchJob", refused);
    return watchers_->Refuse(refused);
  }
  // Registered raw like the unary methods, so that bytes which are no request are named.
  dlrm::v1::WatchJobRequest parsed;
  grpc::ByteBuffer bytes(*request);
  if (!grpc::SerializationTraits<dlrm::v1::WatchJobRequest>::Deserialize(&bytes, &parsed).ok()) {
    const grpc::Status malformed(grpc::StatusCode::INVALID_ARGUMENT,
                                 "WatchJob: malformed WatchJobRequest");
    rpcs_->Record("WatchJob", malformed);
    return watchers_->Refuse(malformed);
  }
  // The stream keeps its request until it ends (up to kMaxWatchStreams of them): a job id needs
  // no more than a few hundred bytes, not the 4 MiB a coordinator request may have.
  if (static_cast<int64_t>(request->Length()) > kMaxParkedRequestBytes) {
    const grpc::Status oversized(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("WatchJob: a request of ", request->Length(), " bytes is over the ",
                     kMaxParkedRequestBytes, " bytes a job id takes"));
    rpcs_->Record("WatchJob", oversized);
    return watchers_->Refuse(oversized);
  }
  rpcs_->Record("WatchJob", grpc::Status::OK);
  return watchers_->Start(parsed.job_id(), *state_);
}

}  // namespace dlrm::server
