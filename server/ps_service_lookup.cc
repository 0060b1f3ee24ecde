// PsService's data-plane methods (server/ps_service.h): Lookup (its answer written in place,
// proto/lookup_wire.h; served inline on the reactor while it can, else on the pool, split into
// parts over the pool's threads when large, parked on the StepGate while the staleness bound
// does not hold) and PushGradients.
#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "common/authz.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/rpc_bytes.h"
#include "common/status.h"
#include "proto/lookup_wire.h"
#include "server/ps_service.h"
#include "server/ps_service_internal.h"

namespace dlrm::server {

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
  if (absl::Status denied = AuthorizeMember(*context, "ParameterServer.Lookup",
                                            call->request->job_id(), call->request->job_epoch());
      !denied.ok()) {
    Finish(reactor, denied);
    return reactor;
  }
  if (TryLookupInline(call)) return reactor;
  options_.pool->Submit([this, context, call] {
    const dlrm::v1::LookupRequest& request = *call->request;
    absl::StatusOr<std::shared_ptr<PsJob>> job = FindJob(request.job_id());
    if (!job.ok()) return Finish(call->reactor, job.status());
    absl::Status valid = (*job)->ValidateLookup(request);
    if (!valid.ok()) return Finish(call->reactor, valid);
    absl::StatusOr<std::shared_ptr<StepGate>> epoch_gate = (*job)->GateOf(request.job_epoch());
    if (!epoch_gate.ok()) return Finish(call->reactor, epoch_gate.status());
    std::shared_ptr<StepGate> gate = std::move(*epoch_gate);
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
  absl::StatusOr<std::shared_ptr<StepGate>> gate = job->GateOf(request.job_epoch());
  if (!gate.ok() || !(*gate)->Ready(request.step())) return false;  // the pool answers
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
  if (absl::Status denied = AuthorizeMember(*context, "ParameterServer.PushGradients",
                                            request->job_id(), request->job_epoch());
      !denied.ok()) {
    Finish(reactor, denied);
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

}  // namespace dlrm::server
