// gRPC front ends of the coordinator: the Coordinator service (membership, rendezvous, progress)
// and the Jobs service. Callback API; no handler blocks: KvGet with a wait completes from the
// rendezvous store's callback, WatchJob streams are driven by job changes (job_watch.h).
// Each handler validates its request and answers with CoordinatorState's status codes.
#pragma once

#include "common/metrics.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/jobs.grpc.pb.h"
#include "server/coordinator_state.h"
#include "server/job_watch.h"
#include "server/rendezvous_store.h"

namespace dlrm::server {

// Counts RPCs by method and status code (dlrm_coordinator_rpcs_total). `metrics` may be null.
class RpcCounter {
 public:
  explicit RpcCounter(common::MetricsRegistry* metrics) : metrics_(metrics) {}
  void Record(const char* method, const grpc::Status& status);

 private:
  common::MetricsRegistry* metrics_;
};

// None of the pointers is owned; all must outlive the service.
class CoordinatorServiceImpl final : public dlrm::v1::Coordinator::CallbackService {
 public:
  CoordinatorServiceImpl(CoordinatorState* state, RendezvousStore* kv, RpcCounter* rpcs)
      : state_(state), kv_(kv), rpcs_(rpcs) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const dlrm::v1::RegisterRequest* request,
                                     dlrm::v1::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const dlrm::v1::HeartbeatRequest* request,
                                      dlrm::v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* GetClusterView(grpc::CallbackServerContext* context,
                                           const dlrm::v1::GetClusterViewRequest* request,
                                           dlrm::v1::GetClusterViewResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const dlrm::v1::LeaveRequest* request,
                                  dlrm::v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const dlrm::v1::KvSetRequest* request,
                                  dlrm::v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const dlrm::v1::KvGetRequest* request,
                                  dlrm::v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* context,
                                     const dlrm::v1::KvDeleteRequest* request,
                                     dlrm::v1::KvDeleteResponse* response) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* context,
                                  const dlrm::v1::KvAddRequest* request,
                                  dlrm::v1::KvAddResponse* response) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* context,
                                           const dlrm::v1::ReportProgressRequest* request,
                                           dlrm::v1::ReportProgressResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status);

  CoordinatorState* state_;
  RendezvousStore* kv_;
  RpcCounter* rpcs_;
};

class JobsServiceImpl final : public dlrm::v1::Jobs::CallbackService {
 public:
  JobsServiceImpl(CoordinatorState* state, JobWatchers* watchers, RpcCounter* rpcs)
      : state_(state), watchers_(watchers), rpcs_(rpcs) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const dlrm::v1::SubmitJobRequest* request,
                                      dlrm::v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const dlrm::v1::GetJobRequest* request,
                                   dlrm::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const dlrm::v1::ListJobsRequest* request,
                                     dlrm::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const dlrm::v1::CancelJobRequest* request,
                                      dlrm::v1::Job* response) override;
  grpc::ServerUnaryReactor* CheckpointJob(grpc::CallbackServerContext* context,
                                          const dlrm::v1::CheckpointJobRequest* request,
                                          dlrm::v1::Job* response) override;
  grpc::ServerWriteReactor<dlrm::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* context, const dlrm::v1::WatchJobRequest* request) override;

 private:
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status);

  CoordinatorState* state_;
  JobWatchers* watchers_;
  RpcCounter* rpcs_;
};

}  // namespace dlrm::server
