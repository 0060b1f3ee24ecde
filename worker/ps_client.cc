// GrpcPsClient (worker/ps_client.h), its construction and RPC machinery: Create, the attempts of
// a call and their retries with backoff (RunCalls, StartAttempt), Cancel, and the errors naming
// the shard (ShardError). The row methods (Lookup, Push, ReadStoredRows, WriteStoredRows) and
// their request planning are in ps_client_rows.cc; the per-job calls to every shard (LoadJob,
// UnloadJob, Checkpoint, GetStats) in ps_client_jobs.cc.
#include "worker/ps_client.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grants.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "worker/ps_client_internal.h"

namespace dlrm::worker {
namespace {

// Backoff between the attempts of a request that failed with UNAVAILABLE: the n-th wait is
// kFirstBackoff * 2^(n-1) capped at kMaxBackoff, jittered into [half, all] of that so that the
// workers of a job do not hammer a restarting PS in step.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(20);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// How often a thread waiting out a backoff looks whether the client was cancelled.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);
constexpr char kCancelledMessage[] = "ps client cancelled";

absl::Duration Backoff(int attempts, std::minstd_rand& rng) {
  absl::Duration wait = kFirstBackoff;
  for (int i = 1; i < attempts && wait < kMaxBackoff; ++i) wait *= 2;
  wait = std::min(wait, kMaxBackoff);
  return wait / 2 + wait / 2 * std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// Time since `start`, to the millisecond, for messages.
std::string Elapsed(absl::Time start) {
  return absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)));
}

// Whether an attempt that failed so may be sent again. UNAVAILABLE: the PS or the connection
// was not there (the request may or may not have been applied; pushes carry a sequence number
// for that). CANCELLED but not by Cancel: the server cancelled the call while shutting
// down. DEADLINE_EXCEEDED is final: the deadline is the budget.
bool Retryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace

GrpcPsClient::GrpcPsClient(const PsClientOptions& options) : options_(options) {}
GrpcPsClient::~GrpcPsClient() = default;

absl::StatusOr<std::unique_ptr<GrpcPsClient>> GrpcPsClient::Create(const PsClientOptions& options) {
  if (options.ps_addresses.empty()) {
    return absl::InvalidArgumentError("ps client: no parameter-server addresses");
  }
  if (options.job_id.empty()) return absl::InvalidArgumentError("ps client: empty job id");
  if (options.tables.empty()) return absl::InvalidArgumentError("ps client: no tables");
  int max_dim = 1;
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const embedding::TableConfig& c = options.tables[t];
    if (c.rows < 1 || c.dim < 1) {
      return absl::InvalidArgumentError(absl::StrCat("ps client: table ", t, " (", c.name,
                                                     "): rows ", c.rows, " and dim ", c.dim,
                                                     " must be >= 1"));
    }
    max_dim = std::max(max_dim, c.dim);
  }
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ps client: rpc_timeout must be > 0");
  }
  for (const auto* grants : {&options.job_grants, &options.member_grants, &options.load_grants}) {
    if (!grants->empty() && grants->size() != options.ps_addresses.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ps client: ", grants->size(), " grants for ",
                                                     options.ps_addresses.size(),
                                                     " parameter servers (one per server)"));
    }
  }
  std::unique_ptr<GrpcPsClient> client(new GrpcPsClient(options));
  const int64_t limit = common::MaxRowsPerRequest(max_dim);
  client->max_rows_per_request_ =
      options.max_rows_per_request > 0 ? std::min(options.max_rows_per_request, limit) : limit;
  // The widest stored row (Lazy Adam: 3 x dim + 1 floats).
  client->max_stored_rows_per_request_ =
      std::min(client->max_rows_per_request_, common::MaxRowsPerRequest(3 * max_dim + 1));
  for (const std::string& address : options.ps_addresses) {
    common::ChannelOptions channel_options;
    channel_options.target = address;
    channel_options.security = options.security;
    channel_options.peer_identity = common::kParameterServerPeer;
    DLRM_ASSIGN_OR_RETURN(auto channel, common::MakeChannel(channel_options));
    client->stubs_.push_back(dlrm::v1::ParameterServer::NewStub(channel));
    client->lookup_stubs_.push_back(std::make_unique<LookupStub>(channel));
  }
  return client;
}

absl::Status GrpcPsClient::ShardError(const ShardCall& call, const char* method) const {
  std::string message =
      absl::StrCat(method, " on ps shard ", call.shard, " (", options_.ps_addresses[call.shard],
                   "): ", call.status.error_message());
  if (call.attempts > 1 || call.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    absl::StrAppend(&message, " (", call.attempts, call.attempts == 1 ? " attempt" : " attempts",
                    " in ", Elapsed(call.started), ")");
  }
  return absl::Status(static_cast<absl::StatusCode>(call.status.error_code()), message);
}

void GrpcPsClient::Cancel() {
  absl::MutexLock lock(&cancel_mu_);
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  // The attempts in flight end with CANCELLED on their completion queues; attempts not started
  // yet see cancelled_ (StartAttempt reads it under this lock).
  for (grpc::ClientContext* context : live_contexts_) context->TryCancel();
}

bool GrpcPsClient::StartAttempt(ShardCall* call, grpc::CompletionQueue* cq) {
  call->EndAttempt();
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(absl::ToChronoTime(call->deadline));
  if (call->with_grant && !options_.job_grants.empty()) {
    call->context->AddMetadata(common::kJobGrantMetadata, options_.job_grants[call->shard]);
  }
  if (!options_.member_grants.empty()) {
    call->context->AddMetadata(common::kMemberGrantMetadata, options_.member_grants[call->shard]);
  }
  if (call->with_load_grant && !options_.load_grants.empty()) {
    call->context->AddMetadata(common::kLoadGrantMetadata, options_.load_grants[call->shard]);
  }
  {
    absl::MutexLock lock(&cancel_mu_);
    if (cancelled_.load(std::memory_order_relaxed)) {
      call->status = grpc::Status(grpc::StatusCode::CANCELLED, kCancelledMessage);
      return false;
    }
    live_contexts_.insert(call->context.get());
  }
  ++call->attempts;
  call->Start(cq);
  return true;
}

void GrpcPsClient::RunCalls(absl::Span<ShardCall* const> calls, const char* method,
                            bool with_grant) {
  grpc::CompletionQueue cq;
  const absl::Time start = absl::Now();
  int in_flight = 0;
  for (ShardCall* call : calls) {
    call->with_grant = with_grant;
    call->started = start;
    call->deadline = start + call->budget;
    // A checkpoint phase's deadline is longer (a write takes as long as it takes), but its
    // retries stay within rpc_timeout: a PS gone for longer has lost the snapshot, and an
    // UNAVAILABLE that lasts (a file that cannot be written) is no transient fault.
    const absl::Duration retry_for =
        options_.retry_budget > absl::ZeroDuration() ? options_.retry_budget : options_.rpc_timeout;
    call->retry_until = start + std::min(call->budget, retry_for);
    if (StartAttempt(call, &cq)) ++in_flight;
  }
  std::vector<ShardCall*> waiting;  // failed with UNAVAILABLE, waiting out their backoff
  std::optional<std::minstd_rand> rng;
  while (in_flight > 0 || !waiting.empty()) {
    void* tag = nullptr;
    bool ok = false;
    grpc::CompletionQueue::NextStatus next;
    if (waiting.empty()) {
      // Each attempt has a deadline (and Cancel cancels them), so a tag comes back.
      next =
          cq.Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT : grpc::CompletionQueue::SHUTDOWN;
    } else {
      absl::Time wake = absl::Now() + kCancelPoll;
      for (const ShardCall* call : waiting) wake = std::min(wake, call->retry_at);
      next = cq.AsyncNext(&tag, &ok, absl::ToChronoTime(wake));
    }
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::GOT_EVENT) {
      ShardCall* call = static_cast<ShardCall*>(tag);
      --in_flight;
      {
        absl::MutexLock lock(&cancel_mu_);
        live_contexts_.erase(call->context.get());
      }
      if (!call->status.ok()) call->last_error = call->status;
      if (cancelled() && (call->status.error_code() == grpc::StatusCode::CANCELLED ||
                          call->status.error_code() == grpc::StatusCode::UNAVAILABLE)) {
        call->status = grpc::Status(grpc::StatusCode::CANCELLED, kCancelledMessage);
      } else if (!call->status.ok() && Retryable(call->status)) {
        if (!rng.has_value()) rng.emplace(static_cast<uint32_t>(absl::ToUnixNanos(start)));
        const absl::Time now = absl::Now();
        call->retry_at = now + Backoff(call->attempts, *rng);
        // No time for another attempt: the last error stands.
        if (call->retry_at < call->retry_until) waiting.push_back(call);
      }
    }
    // Start the retries that are due; once cancelled, end every waiting call.
    const absl::Time now = absl::Now();
    const bool stop = cancelled();
    for (size_t i = 0; i < waiting.size();) {
      ShardCall* call = waiting[i];
      if (!stop && call->retry_at > now) {
        ++i;
        continue;
      }
      waiting[i] = waiting.back();
      waiting.pop_back();
      if (StartAttempt(call, &cq)) ++in_flight;
    }
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  for (ShardCall* call : calls) {
    if (call->attempts <= 1 || call->status.error_code() == grpc::StatusCode::CANCELLED) continue;
    DLRM_LOG(WARNING) << "ps client: " << method << " on ps shard " << call->shard << " ("
                      << options_.ps_addresses[call->shard] << ") took " << call->attempts
                      << " attempts in " << Elapsed(call->started)
                      << (call->status.ok() ? " and succeeded" : " and failed")
                      << "; last error: " << common::FromGrpcStatus(call->last_error);
  }
}

}  // namespace dlrm::worker
