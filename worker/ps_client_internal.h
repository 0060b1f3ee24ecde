// Private to worker/ (included by the ps_client*.cc files only): the call objects that the
// GrpcPsClient's RPC machinery (ps_client.cc) runs and its request builders (ps_client_rows.cc,
// ps_client_jobs.cc) fill in: ShardCall, one request to one shard and its attempts, and
// UnaryCall, a ShardCall through a generated stub method.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "proto/ps.grpc.pb.h"
#include "worker/ps_client.h"

namespace dlrm::worker {

// One request to one shard and its attempts. An attempt completes on the completion queue it
// was started on with the tag `this` (as ShardCall*), its status in `status`.
struct GrpcPsClient::ShardCall {
  virtual ~ShardCall() = default;
  // Starts an attempt under `context` (made by StartAttempt for it).
  virtual void Start(grpc::CompletionQueue* cq) = 0;
  // Drops what the last attempt left (its reader lives on the call's arena, so it must go
  // before the context that owns the call).
  virtual void EndAttempt() = 0;
  void* tag() { return this; }

  int shard = 0;
  absl::Duration budget;  // from the first attempt until the last one must have answered
  grpc::Status status;    // of the last attempt, or CANCELLED by Cancel
  grpc::Status last_error;
  int attempts = 0;
  absl::Time started;
  absl::Time deadline;                           // started + budget: the deadline of every attempt
  absl::Time retry_until;                        // no attempt starts after it
  absl::Time retry_at;                           // while waiting out a backoff
  std::unique_ptr<grpc::ClientContext> context;  // of the attempt in flight or the last one
  bool with_grant = false;       // an admin method: the job grant goes in the metadata
  bool with_load_grant = false;  // LoadJob: the load grant goes in the metadata too
};

// A unary call through the generated stub's PrepareAsync<Method>.
template <typename Request, typename Response>
struct GrpcPsClient::UnaryCall final : GrpcPsClient::ShardCall {
  using Stub = dlrm::v1::ParameterServer::Stub;
  using Method = std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> (Stub::*)(
      grpc::ClientContext*, const Request&, grpc::CompletionQueue*);
  UnaryCall(int shard_in, Stub* stub_in, Method method_in, absl::Duration budget_in)
      : stub(stub_in), method(method_in) {
    shard = shard_in;
    budget = budget_in;
  }
  ~UnaryCall() override { reader.reset(); }
  void Start(grpc::CompletionQueue* cq) override {
    response.Clear();
    reader = (stub->*method)(context.get(), request, cq);
    reader->StartCall();
    reader->Finish(&response, &status, tag());
  }
  void EndAttempt() override { reader.reset(); }

  Stub* const stub;
  const Method method;
  Request request;
  Response response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
};

}  // namespace dlrm::worker
