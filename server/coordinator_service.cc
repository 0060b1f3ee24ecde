#include "server/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/version.h"

namespace dlrm::server {
namespace {

using common::ToGrpcStatus;

// Finishes a unary call answered synchronously.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, RpcCounter* rpcs,
                                    const char* method, const absl::Status& status) {
  grpc::Status s = ToGrpcStatus(status);
  rpcs->Record(method, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(s);
  return reactor;
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

absl::Status CheckRegister(const dlrm::v1::RegisterRequest& r) {
  for (absl::Status s : {
           CheckLength("Register: name", r.name(), common::kMaxNameBytes, "kMaxNameBytes"),
           CheckLength("Register: address", r.address(), common::kMaxAddressBytes,
                       "kMaxAddressBytes"),
           CheckLength("Register: metrics_address", r.metrics_address(), common::kMaxAddressBytes,
                       "kMaxAddressBytes"),
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

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Reply(grpc::CallbackServerContext* context,
                                                        const char* method,
                                                        const absl::Status& status) {
  return FinishNow(context, rpcs_, method, status);
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Register(grpc::CallbackServerContext* context,
                                                           const dlrm::v1::RegisterRequest* request,
                                                           dlrm::v1::RegisterResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.Register"); !denied.ok()) {
    return Reply(context, "Register", denied);
  }
  if (absl::Status s = CheckRegister(*request); !s.ok()) return Reply(context, "Register", s);
  // A certificate of one role cannot register a member of another (a worker posing as a PS).
  const char* role = request->role() == dlrm::v1::ROLE_PS ? "ps" : "worker";
  if (absl::Status denied = common::AuthorizeRole(*context, role); !denied.ok()) {
    return Reply(context, "Register", denied);
  }
  auto result = state_->Register(*request, absl::Now());
  if (result.ok()) *response = std::move(*result);
  return Reply(context, "Register", result.status());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Heartbeat(
    grpc::CallbackServerContext* context, const dlrm::v1::HeartbeatRequest* request,
    dlrm::v1::HeartbeatResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.Heartbeat"); !denied.ok()) {
    return Reply(context, "Heartbeat", denied);
  }
  auto result = state_->Heartbeat(request->member_id(), absl::Now());
  if (result.ok()) *response = std::move(*result);
  return Reply(context, "Heartbeat", result.status());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetClusterView(
    grpc::CallbackServerContext* context, const dlrm::v1::GetClusterViewRequest* /*request*/,
    dlrm::v1::GetClusterViewResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.GetClusterView");
      !denied.ok()) {
    return Reply(context, "GetClusterView", denied);
  }
  *response = state_->ClusterView();
  response->set_server_version(common::kVersion);
  return Reply(context, "GetClusterView", absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Leave(grpc::CallbackServerContext* context,
                                                        const dlrm::v1::LeaveRequest* request,
                                                        dlrm::v1::LeaveResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.Leave"); !denied.ok()) {
    return Reply(context, "Leave", denied);
  }
  auto result = state_->Leave(request->member_id(), absl::Now());
  if (result.ok()) response->set_epoch(*result);
  return Reply(context, "Leave", result.status());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::KvSet(grpc::CallbackServerContext* context,
                                                        const dlrm::v1::KvSetRequest* request,
                                                        dlrm::v1::KvSetResponse* /*response*/) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.KvSet"); !denied.ok()) {
    return Reply(context, "KvSet", denied);
  }
  return Reply(context, "KvSet", kv_->Set(request->key(), request->value()));
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::KvGet(grpc::CallbackServerContext* context,
                                                        const dlrm::v1::KvGetRequest* request,
                                                        dlrm::v1::KvGetResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.KvGet"); !denied.ok()) {
    return Reply(context, "KvGet", denied);
  }
  absl::Duration wait = absl::Milliseconds(request->wait_timeout_ms());
  // Never wait past the caller's own deadline: it would not hear the answer.
  const absl::Duration until_deadline = absl::FromChrono(context->deadline()) - absl::Now();
  if (wait > absl::ZeroDuration() && until_deadline < wait) {
    wait = std::max(absl::ZeroDuration(), until_deadline);
    if (wait == absl::ZeroDuration()) wait = absl::Milliseconds(1);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RpcCounter* rpcs = rpcs_;
  // The store calls back exactly once, possibly right here, possibly on the timer thread or on
  // the thread of a KvSet; the reactor and response live until Finish.
  kv_->Get(request->key(), wait, [reactor, response, rpcs](absl::StatusOr<std::string> value) {
    if (value.ok()) response->set_value(std::move(*value));
    grpc::Status s = ToGrpcStatus(value.status());
    rpcs->Record("KvGet", s);
    reactor->Finish(s);
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::KvDelete(grpc::CallbackServerContext* context,
                                                           const dlrm::v1::KvDeleteRequest* request,
                                                           dlrm::v1::KvDeleteResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.KvDelete"); !denied.ok()) {
    return Reply(context, "KvDelete", denied);
  }
  if (request->key().empty() && !request->prefix()) {
    return Reply(context, "KvDelete", absl::InvalidArgumentError("rendezvous key is empty"));
  }
  if (absl::Status s =
          CheckLength("KvDelete: key", request->key(), common::kMaxKvKeyBytes, "kMaxKvKeyBytes");
      !s.ok()) {
    return Reply(context, "KvDelete", s);
  }
  response->set_deleted(kv_->Delete(request->key(), request->prefix()));
  return Reply(context, "KvDelete", absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::KvAdd(grpc::CallbackServerContext* context,
                                                        const dlrm::v1::KvAddRequest* request,
                                                        dlrm::v1::KvAddResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.KvAdd"); !denied.ok()) {
    return Reply(context, "KvAdd", denied);
  }
  auto result = kv_->Add(request->key(), request->delta());
  if (result.ok()) response->set_value(*result);
  return Reply(context, "KvAdd", result.status());
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ReportProgress(
    grpc::CallbackServerContext* context, const dlrm::v1::ReportProgressRequest* request,
    dlrm::v1::ReportProgressResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Coordinator.ReportProgress");
      !denied.ok()) {
    return Reply(context, "ReportProgress", denied);
  }
  if (absl::Status s = CheckReport(*request); !s.ok()) return Reply(context, "ReportProgress", s);
  auto result = state_->ReportProgress(*request, absl::Now());
  if (result.ok()) response->set_state(*result);
  return Reply(context, "ReportProgress", result.status());
}

grpc::ServerUnaryReactor* JobsServiceImpl::Reply(grpc::CallbackServerContext* context,
                                                 const char* method, const absl::Status& status) {
  return FinishNow(context, rpcs_, method, status);
}

grpc::ServerUnaryReactor* JobsServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                     const dlrm::v1::SubmitJobRequest* request,
                                                     dlrm::v1::SubmitJobResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.SubmitJob"); !denied.ok()) {
    return Reply(context, "SubmitJob", denied);
  }
  // Before parsing: a huge spec costs the parser far more than its bytes.
  if (absl::Status s = CheckLength("SubmitJob: spec_yaml", request->spec_yaml(),
                                   common::kMaxSpecBytes, "kMaxSpecBytes");
      !s.ok()) {
    return Reply(context, "SubmitJob", s);
  }
  auto result = state_->Submit(*request, absl::Now());
  if (result.ok()) *response->mutable_job() = std::move(*result);
  return Reply(context, "SubmitJob", result.status());
}

grpc::ServerUnaryReactor* JobsServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                  const dlrm::v1::GetJobRequest* request,
                                                  dlrm::v1::Job* response) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.GetJob"); !denied.ok()) {
    return Reply(context, "GetJob", denied);
  }
  auto result = state_->GetJob(request->job_id());
  if (result.ok()) *response = std::move(*result);
  return Reply(context, "GetJob", result.status());
}

grpc::ServerUnaryReactor* JobsServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                    const dlrm::v1::ListJobsRequest* request,
                                                    dlrm::v1::ListJobsResponse* response) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.ListJobs"); !denied.ok()) {
    return Reply(context, "ListJobs", denied);
  }
  if (!dlrm::v1::JobState_IsValid(request->state())) {
    return Reply(
        context, "ListJobs",
        absl::InvalidArgumentError(absl::StrCat(
            "job state filter ", static_cast<int>(request->state()), " is not a JobState")));
  }
  for (auto& job : state_->ListJobs(request->state())) *response->add_jobs() = std::move(job);
  return Reply(context, "ListJobs", absl::OkStatus());
}

grpc::ServerUnaryReactor* JobsServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                     const dlrm::v1::CancelJobRequest* request,
                                                     dlrm::v1::Job* response) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.CancelJob"); !denied.ok()) {
    return Reply(context, "CancelJob", denied);
  }
  if (absl::Status s = CheckLength("CancelJob: reason", request->reason(), common::kMaxMessageBytes,
                                   "kMaxMessageBytes");
      !s.ok()) {
    return Reply(context, "CancelJob", s);
  }
  auto result = state_->Cancel(request->job_id(), request->reason(), absl::Now());
  if (result.ok()) *response = std::move(*result);
  return Reply(context, "CancelJob", result.status());
}

grpc::ServerUnaryReactor* JobsServiceImpl::CheckpointJob(
    grpc::CallbackServerContext* context, const dlrm::v1::CheckpointJobRequest* request,
    dlrm::v1::Job* response) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.CheckpointJob"); !denied.ok()) {
    return Reply(context, "CheckpointJob", denied);
  }
  auto result = state_->RequestCheckpoint(request->job_id(), absl::Now());
  if (result.ok()) *response = std::move(*result);
  return Reply(context, "CheckpointJob", result.status());
}

grpc::ServerWriteReactor<dlrm::v1::JobEvent>* JobsServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const dlrm::v1::WatchJobRequest* request) {
  if (absl::Status denied = common::Authorize(*context, "Jobs.WatchJob"); !denied.ok()) {
    const grpc::Status refused = common::ToGrpcStatus(denied);
    rpcs_->Record("WatchJob", refused);
    return watchers_->Refuse(refused);
  }
  rpcs_->Record("WatchJob", grpc::Status::OK);
  return watchers_->Start(request->job_id(), *state_);
}

}  // namespace dlrm::server
