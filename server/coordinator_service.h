// gRPC front ends of the coordinator: the Coordinator service (membership, rendezvous, progress)
// and the Jobs service. Callback API; no handler blocks: KvGet with a wait completes from the
// rendezvous store's callback, WatchJob streams are driven by job changes (job_watch.h).
// Each handler validates its request and answers with CoordinatorState's status codes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/grants.h"
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

// Every unary method is registered raw (common/raw_unary.h): bytes that are no request are
// INVALID_ARGUMENT naming the message. Do<Method> is each method's typed work.
using CoordinatorRawService = dlrm::v1::Coordinator::WithRawCallbackMethod_Register<
    dlrm::v1::Coordinator::WithRawCallbackMethod_Heartbeat<
        dlrm::v1::Coordinator::WithRawCallbackMethod_GetClusterView<
            dlrm::v1::Coordinator::WithRawCallbackMethod_Leave<
                dlrm::v1::Coordinator::WithRawCallbackMethod_KvSet<
                    dlrm::v1::Coordinator::WithRawCallbackMethod_KvDelete<
                        dlrm::v1::Coordinator::WithRawCallbackMethod_KvAdd<
                            dlrm::v1::Coordinator::WithRawCallbackMethod_ReportProgress<
                                dlrm::v1::Coordinator::WithRawCallbackMethod_KvGet<
                                    dlrm::v1::Coordinator::CallbackService>>>>>>>>>;
using JobsRawService = dlrm::v1::Jobs::WithRawCallbackMethod_SubmitJob<
    dlrm::v1::Jobs::WithRawCallbackMethod_GetJob<dlrm::v1::Jobs::WithRawCallbackMethod_ListJobs<
        dlrm::v1::Jobs::WithRawCallbackMethod_CancelJob<
            dlrm::v1::Jobs::WithRawCallbackMethod_CheckpointJob<
                dlrm::v1::Jobs::WithRawCallbackMethod_WatchJob<
                    dlrm::v1::Jobs::CallbackService>>>>>>;

// None of the pointers is owned; all must outlive the service.
class CoordinatorServiceImpl final : public CoordinatorRawService {
 public:
  // `keys` derive the member keys (and the PS grant key) Register answers and the other
  // member methods check (common/grants.h).
  CoordinatorServiceImpl(CoordinatorState* state, RendezvousStore* kv, RpcCounter* rpcs,
                         const common::GrantKeys* keys)
      : state_(state), kv_(kv), rpcs_(rpcs), keys_(keys) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetClusterView(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;

 private:
  absl::Status DoRegister(grpc::CallbackServerContext* context,
                          const dlrm::v1::RegisterRequest* request,
                          dlrm::v1::RegisterResponse* response);
  absl::Status DoHeartbeat(grpc::CallbackServerContext* context,
                           const dlrm::v1::HeartbeatRequest* request,
                           dlrm::v1::HeartbeatResponse* response);
  absl::Status DoGetClusterView(grpc::CallbackServerContext* context,
                                const dlrm::v1::GetClusterViewRequest* request,
                                dlrm::v1::GetClusterViewResponse* response);
  absl::Status DoLeave(grpc::CallbackServerContext* context, const dlrm::v1::LeaveRequest* request,
                       dlrm::v1::LeaveResponse* response);
  absl::Status DoKvSet(grpc::CallbackServerContext* context, const dlrm::v1::KvSetRequest* request,
                       dlrm::v1::KvSetResponse* response);
  absl::Status DoKvDelete(grpc::CallbackServerContext* context,
                          const dlrm::v1::KvDeleteRequest* request,
                          dlrm::v1::KvDeleteResponse* response);
  absl::Status DoKvAdd(grpc::CallbackServerContext* context, const dlrm::v1::KvAddRequest* request,
                       dlrm::v1::KvAddResponse* response);
  absl::Status DoReportProgress(grpc::CallbackServerContext* context,
                                const dlrm::v1::ReportProgressRequest* request,
                                dlrm::v1::ReportProgressResponse* response);
  // Answers through `done`, when the key is set or the wait ends.
  void DoKvGet(grpc::CallbackServerContext* context, const dlrm::v1::KvGetRequest* request,
               dlrm::v1::KvGetResponse* response, std::function<void(absl::Status)> done);
  // OK when `key` is member_id's member key; PERMISSION_DENIED otherwise.
  absl::Status CheckMemberKey(const char* method, const std::string& member_id,
                              const std::string& key) const;

  // The LoadJob request of each of `job`'s servers, in shard order, as LoadJobRequestBytes
  // (server/ps_load_request.h): what its load grants sign. Built from the job's spec once per
  // start of the job (its epoch, recovery, workers and servers), then taken from load_requests_.
  absl::StatusOr<std::vector<std::string>> LoadRequests(const dlrm::v1::JobAssignment& job);

  CoordinatorState* state_;
  RendezvousStore* kv_;
  RpcCounter* rpcs_;
  const common::GrantKeys* keys_;
  struct JobLoadRequests {
    std::string start;  // epoch, recovery, workers and servers of the job's start they are for
    std::vector<std::string> requests;
  };
  absl::Mutex load_mu_;
  absl::flat_hash_map<std::string, JobLoadRequests> load_requests_ ABSL_GUARDED_BY(load_mu_);
};

class JobsServiceImpl final : public JobsRawService {
 public:
  JobsServiceImpl(CoordinatorState* state, JobWatchers* watchers, RpcCounter* rpcs)
      : state_(state), watchers_(watchers), rpcs_(rpcs) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CheckpointJob(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;

 private:
  absl::Status DoSubmitJob(grpc::CallbackServerContext* context,
                           const dlrm::v1::SubmitJobRequest* request,
                           dlrm::v1::SubmitJobResponse* response);
  absl::Status DoGetJob(grpc::CallbackServerContext* context,
                        const dlrm::v1::GetJobRequest* request, dlrm::v1::Job* response);
  absl::Status DoListJobs(grpc::CallbackServerContext* context,
                          const dlrm::v1::ListJobsRequest* request,
                          dlrm::v1::ListJobsResponse* response);
  absl::Status DoCancelJob(grpc::CallbackServerContext* context,
                           const dlrm::v1::CancelJobRequest* request, dlrm::v1::Job* response);
  absl::Status DoCheckpointJob(grpc::CallbackServerContext* context,
                               const dlrm::v1::CheckpointJobRequest* request,
                               dlrm::v1::Job* response);

  CoordinatorState* state_;
  JobWatchers* watchers_;
  RpcCounter* rpcs_;
};

}  // namespace dlrm::server
