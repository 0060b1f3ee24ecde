#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grants.h"
#include "common/logging.h"
#include "common/rpc_bytes.h"
#include "common/sharding.h"
#include "common/status.h"
#include "grpcpp/generic/generic_stub.h"

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
  bool with_grant = false;  // an admin method: the job grant goes in the metadata
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

// Where each id of a Lookup/Push goes: per shard and request, the ids and their positions in
// the request; then the chunks (one request each), consecutive per shard.
struct GrpcPsClient::Plan {
  struct Entry {
    int request = 0;
    const int64_t* ids = nullptr;
    const int32_t* positions = nullptr;  // null: positions are begin .. begin + count - 1
    int64_t begin = 0;
    int64_t count = 0;
  };
  struct Chunk {
    int shard = 0;
    bool last_of_shard = false;
    std::vector<Entry> entries;
  };
  std::vector<std::vector<std::vector<int64_t>>> ids;        // [shard][request]
  std::vector<std::vector<std::vector<int32_t>>> positions;  // [shard][request]
  std::vector<Chunk> chunks;
};

// One Lookup call on one shard, decoding the answer's rows into the targets as it arrives; its
// request goes back to the client's pool when it is destroyed.
struct GrpcPsClient::LookupCall final : GrpcPsClient::ShardCall {
  LookupCall(GrpcPsClient* owner_in, std::unique_ptr<dlrm::v1::LookupRequest> request_in)
      : owner(owner_in), request(std::move(request_in)) {}
  ~LookupCall() override {
    CountAnswer();
    reader.reset();
    owner->lookup_requests_.Return(std::move(request));
  }
  void Start(grpc::CompletionQueue* cq) override {
    reader = owner->lookup_stubs_[shard]->PrepareUnaryCall(context.get(), proto::kLookupMethod,
                                                           *request, cq);
    reader->StartCall();
    reader->Finish(&sink, &status, tag());
  }
  void EndAttempt() override {
    CountAnswer();
    reader.reset();
  }
  // The channel's interceptor cannot size a sink (it is no protobuf message): its bytes are
  // counted here, as the interceptor counts a typed answer.
  void CountAnswer() {
    if (sink.bytes <= 0) return;
    common::RpcByteCounters::ProcessClient().AddReceived(proto::kLookupMethod,
                                                         common::GrpcMessageBytes(sink.bytes));
    sink.bytes = 0;
  }

  GrpcPsClient* const owner;
  std::unique_ptr<dlrm::v1::LookupRequest> request;
  std::vector<proto::LookupRowsTarget> targets;  // where each answered table's rows go
  proto::LookupRowsSink sink;
  std::unique_ptr<grpc::ClientAsyncResponseReader<proto::LookupRowsSink>> reader;
};

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
  if (call->with_grant && !options_.job_grant.empty()) {
    call->context->AddMetadata(common::kJobGrantMetadata, options_.job_grant);
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

absl::Status GrpcPsClient::CheckRequests(absl::Span<const embedding::TableRows> requests,
                                         bool with_values) const {
  const int num_tables = static_cast<int>(options_.tables.size());
  for (const embedding::TableRows& r : requests) {
    if (r.table < 0 || r.table >= num_tables) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", r.table, " not in [0, ", num_tables, ")"));
    }
    const embedding::TableConfig& c = options_.tables[r.table];
    DLRM_RETURN_IF_ERROR(embedding::CheckIdsInTable(r.table, c, r.ids));
    if (with_values && r.values.size() != r.ids.size() * static_cast<size_t>(c.dim)) {
      return absl::InvalidArgumentError(absl::StrCat("table ", r.table, ": ", r.values.size(),
                                                     " gradient floats, expected ", r.ids.size(),
                                                     " ids x dim ", c.dim));
    }
  }
  return absl::OkStatus();
}

void GrpcPsClient::BuildPlan(absl::Span<const embedding::TableRows> requests, Plan* plan) const {
  BuildPlan(requests, max_rows_per_request_, plan);
}

void GrpcPsClient::BuildPlan(absl::Span<const embedding::TableRows> requests, int64_t max_rows,
                             Plan* plan) const {
  const int shards = shard_count();
  const int n = static_cast<int>(requests.size());
  // Per shard: (request, ids, positions, count) before chunking.
  std::vector<std::vector<Plan::Entry>> whole(shards);
  if (shards == 1) {
    for (int r = 0; r < n; ++r) {
      if (requests[r].ids.empty()) continue;
      whole[0].push_back(
          {r, requests[r].ids.data(), nullptr, 0, static_cast<int64_t>(requests[r].ids.size())});
    }
  } else {
    plan->ids.assign(shards, std::vector<std::vector<int64_t>>(n));
    plan->positions.assign(shards, std::vector<std::vector<int32_t>>(n));
    for (int r = 0; r < n; ++r) {
      const std::vector<int64_t>& ids = requests[r].ids;
      for (size_t j = 0; j < ids.size(); ++j) {
        const int s = common::ShardOf(requests[r].table, ids[j], shards);
        plan->ids[s][r].push_back(ids[j]);
        plan->positions[s][r].push_back(static_cast<int32_t>(j));
      }
    }
    for (int s = 0; s < shards; ++s) {
      for (int r = 0; r < n; ++r) {
        if (plan->ids[s][r].empty()) continue;
        whole[s].push_back({r, plan->ids[s][r].data(), plan->positions[s][r].data(), 0,
                            static_cast<int64_t>(plan->ids[s][r].size())});
      }
    }
  }
  // Chunks of at most max_rows_per_request_ ids; every shard gets at least one (maybe empty).
  for (int s = 0; s < shards; ++s) {
    plan->chunks.push_back({s, false, {}});
    int64_t in_chunk = 0;
    for (const Plan::Entry& e : whole[s]) {
      int64_t begin = 0;
      while (begin < e.count) {
        if (in_chunk == max_rows) {
          plan->chunks.push_back({s, false, {}});
          in_chunk = 0;
        }
        const int64_t take = std::min(e.count - begin, max_rows - in_chunk);
        Plan::Entry part = e;
        part.begin = begin;
        part.count = take;
        plan->chunks.back().entries.push_back(part);
        in_chunk += take;
        begin += take;
      }
    }
    plan->chunks.back().last_of_shard = true;
  }
}

absl::Status GrpcPsClient::Lookup(int64_t step, absl::Span<embedding::TableRows> requests) {
  DLRM_RETURN_IF_ERROR(CheckRequests(requests, /*with_values=*/false));
  for (embedding::TableRows& r : requests) {
    r.values.resize(r.ids.size() * options_.tables[r.table].dim);
  }
  Plan plan;
  BuildPlan(requests, &plan);
  std::vector<std::unique_ptr<LookupCall>> calls;
  std::vector<ShardCall*> pointers;
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call = std::make_unique<LookupCall>(this, lookup_requests_.Take());
    call->shard = chunk.shard;
    call->budget = options_.rpc_timeout;
    dlrm::v1::LookupRequest& req = *call->request;
    req.set_job_id(options_.job_id);
    req.set_job_epoch(options_.job_epoch);
    req.set_step(step);
    req.set_worker_rank(options_.worker_rank);
    for (const Plan::Entry& e : chunk.entries) {
      embedding::TableRows& out = requests[e.request];
      const int dim = options_.tables[out.table].dim;
      dlrm::v1::TableIds* t = req.add_tables();
      t->set_table(out.table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
      proto::LookupRowsTarget target;
      target.table = out.table;
      target.dim = dim;
      target.count = e.count;
      target.dtype = options_.tables[out.table].dtype;
      if (e.positions == nullptr) {
        target.out = out.values.data() + e.begin * dim;
      } else {
        target.out = out.values.data();
        target.positions = e.positions + e.begin;
      }
      call->targets.push_back(target);
    }
    call->sink.targets = call->targets;
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  // Every call completes on this thread, which decodes each answer's rows straight into
  // `requests` as it arrives (proto/lookup_wire.h): no hand-off to a gRPC thread, no copy of the
  // rows into a message first. A retry decodes into the same places.
  RunCalls(pointers, "Lookup");
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "Lookup");
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::Push(int64_t step, absl::Span<const embedding::TableRows> grads) {
  DLRM_RETURN_IF_ERROR(CheckRequests(grads, /*with_values=*/true));
  Plan plan;
  BuildPlan(grads, &plan);
  using PushCall = UnaryCall<dlrm::v1::PushGradientsRequest, dlrm::v1::PushGradientsResponse>;
  std::vector<std::unique_ptr<PushCall>> calls;
  std::vector<ShardCall*> first_round, last_round;
  for (const Plan::Chunk& chunk : plan.chunks) {
    auto call = std::make_unique<PushCall>(chunk.shard, stubs_[chunk.shard].get(),
                                           &PushCall::Stub::PrepareAsyncPushGradients,
                                           options_.rpc_timeout);
    dlrm::v1::PushGradientsRequest& req = call->request;
    req.set_job_id(options_.job_id);
    req.set_job_epoch(options_.job_epoch);
    req.set_step(step);
    req.set_worker_rank(options_.worker_rank);
    req.set_more_chunks(!chunk.last_of_shard);
    for (const Plan::Entry& e : chunk.entries) {
      const embedding::TableRows& in = grads[e.request];
      const int dim = options_.tables[in.table].dim;
      // Gradients go in the table's dtype (rounded to nearest): half the bytes for fp16/bf16.
      const embedding::RowDtype dtype = options_.tables[in.table].dtype;
      const size_t row_bytes = static_cast<size_t>(dim) * embedding::DtypeBytes(dtype);
      dlrm::v1::TableGradients* t = req.add_tables();
      t->set_table(in.table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
      std::string* g = t->mutable_grads();
      g->resize(static_cast<size_t>(e.count) * row_bytes);
      if (e.positions == nullptr) {
        embedding::EncodeValues(dtype, in.values.data() + e.begin * dim, e.count * dim, g->data());
      } else {
        for (int64_t j = 0; j < e.count; ++j) {
          embedding::EncodeValues(
              dtype, in.values.data() + static_cast<int64_t>(e.positions[e.begin + j]) * dim, dim,
              g->data() + j * row_bytes);
        }
      }
    }
    (chunk.last_of_shard ? last_round : first_round).push_back(call.get());
    calls.push_back(std::move(call));
  }
  for (const std::vector<ShardCall*>* round : {&first_round, &last_round}) {
    if (round->empty()) continue;
    // Numbered as they are sent; a retry resends the same number, so the PS applies it once.
    for (ShardCall* call : *round) {
      static_cast<PushCall*>(call)->request.set_sequence(
          push_sequence_.fetch_add(1, std::memory_order_relaxed) + 1);
    }
    RunCalls(*round, "PushGradients");
    for (const ShardCall* call : *round) {
      if (!call->status.ok()) return ShardError(*call, "PushGradients");
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::ReadStoredRows(absl::Span<embedding::TableRows> requests) {
  DLRM_RETURN_IF_ERROR(CheckRequests(requests, /*with_values=*/false));
  Plan plan;
  BuildPlan(requests, max_stored_rows_per_request_, &plan);
  using ReadCall = UnaryCall<dlrm::v1::ReadRowsRequest, dlrm::v1::ReadRowsResponse>;
  std::vector<std::unique_ptr<ReadCall>> calls;
  std::vector<ShardCall*> pointers;
  std::vector<const Plan::Chunk*> call_chunks;
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call =
        std::make_unique<ReadCall>(chunk.shard, stubs_[chunk.shard].get(),
                                   &ReadCall::Stub::PrepareAsyncReadRows, options_.rpc_timeout);
    call->request.set_job_id(options_.job_id);
    call->request.set_job_epoch(options_.job_epoch);
    for (const Plan::Entry& e : chunk.entries) {
      dlrm::v1::TableIds* t = call->request.add_tables();
      t->set_table(requests[e.request].table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
    }
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
    call_chunks.push_back(&chunk);
  }
  RunCalls(pointers, "ReadRows");
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "ReadRows");
  }
  // Row widths as the shards report them; every answer for a table must agree.
  std::vector<int> width(requests.size(), 0);
  for (size_t i = 0; i < calls.size(); ++i) {
    const ReadCall& c = *calls[i];
    const Plan::Chunk& chunk = *call_chunks[i];
    if (c.response.tables_size() != static_cast<int>(chunk.entries.size())) {
      return absl::InternalError(absl::StrCat("ReadRows on ps shard ", c.shard, ": ",
                                              c.response.tables_size(), " tables answered, ",
                                              chunk.entries.size(), " asked"));
    }
    for (size_t k = 0; k < chunk.entries.size(); ++k) {
      const Plan::Entry& e = chunk.entries[k];
      const dlrm::v1::TableStoredRows& answer = c.response.tables(static_cast<int>(k));
      const int table = requests[e.request].table;
      const int w = answer.row_floats();
      if (w < options_.tables[table].dim ||
          answer.rows().size() != static_cast<size_t>(e.count) * w * sizeof(float) ||
          (width[e.request] != 0 && width[e.request] != w)) {
        return absl::InternalError(absl::StrCat(
            "ReadRows on ps shard ", c.shard, ": table ", table, " answered ", answer.rows().size(),
            " bytes of rows of ", w, " floats for ", e.count, " ids"));
      }
      width[e.request] = w;
    }
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].values.assign(requests[r].ids.size() * static_cast<size_t>(width[r]), 0.0f);
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const Plan::Chunk& chunk = *call_chunks[i];
    for (size_t k = 0; k < chunk.entries.size(); ++k) {
      const Plan::Entry& e = chunk.entries[k];
      const std::string& rows = calls[i]->response.tables(static_cast<int>(k)).rows();
      const size_t row_bytes = static_cast<size_t>(width[e.request]) * sizeof(float);
      float* out = requests[e.request].values.data();
      for (int64_t j = 0; j < e.count; ++j) {
        const int64_t pos = e.positions == nullptr ? e.begin + j : e.positions[e.begin + j];
        std::memcpy(out + pos * width[e.request], rows.data() + j * row_bytes, row_bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::WriteStoredRows(absl::Span<const embedding::TableRows> rows) {
  DLRM_RETURN_IF_ERROR(CheckRequests(rows, /*with_values=*/false));
  std::vector<size_t> width(rows.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const embedding::TableRows& in = rows[r];
    const size_t n = in.ids.size();
    const size_t dim = static_cast<size_t>(options_.tables[in.table].dim);
    if (n == 0 ? !in.values.empty() : in.values.size() % n != 0 || in.values.size() / n < dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", in.table, ": ", in.values.size(), " row floats for ", n,
                       " ids is not a whole row of at least dim ", dim, " floats per id"));
    }
    width[r] = n == 0 ? dim : in.values.size() / n;
    absl::flat_hash_set<int64_t> seen;
    seen.reserve(n);
    for (int64_t id : in.ids) {
      if (!seen.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", in.table, ": id ", id, " repeated in one row write"));
      }
    }
  }
  Plan plan;
  BuildPlan(rows, max_stored_rows_per_request_, &plan);
  using WriteCall = UnaryCall<dlrm::v1::WriteRowsRequest, dlrm::v1::WriteRowsResponse>;
  std::vector<std::unique_ptr<WriteCall>> calls;
  std::vector<ShardCall*> pointers;
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call =
        std::make_unique<WriteCall>(chunk.shard, stubs_[chunk.shard].get(),
                                    &WriteCall::Stub::PrepareAsyncWriteRows, options_.rpc_timeout);
    call->request.set_job_id(options_.job_id);
    call->request.set_job_epoch(options_.job_epoch);
    for (const Plan::Entry& e : chunk.entries) {
      const embedding::TableRows& in = rows[e.request];
      const size_t row_bytes = width[e.request] * sizeof(float);
      dlrm::v1::TableIdsRows* t = call->request.add_tables();
      t->set_table(in.table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
      std::string* out = t->mutable_rows();
      out->resize(static_cast<size_t>(e.count) * row_bytes);
      for (int64_t j = 0; j < e.count; ++j) {
        const int64_t pos = e.positions == nullptr ? e.begin + j : e.positions[e.begin + j];
        std::memcpy(out->data() + j * row_bytes, in.values.data() + pos * width[e.request],
                    row_bytes);
      }
    }
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  // Overwrites: a retried write writes the same rows again.
  RunCalls(pointers, "WriteRows", /*with_grant=*/true);
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "WriteRows");
  }
  return absl::OkStatus();
}

dlrm::v1::SparseOptimizerConfig SparseOptimizerToProto(
    const embedding::SparseOptimizerOptions& options) {
  dlrm::v1::SparseOptimizerConfig c;
  c.set_type(embedding::SparseOptimizerTypeName(options.type));
  c.set_learning_rate(options.learning_rate);
  c.set_epsilon(options.epsilon);
  c.set_beta1(options.beta1);
  c.set_beta2(options.beta2);
  c.set_initial_accumulator(options.initial_accumulator);
  return c;
}

dlrm::v1::LoadJobRequest MakeLoadJobRequest(const PsClientOptions& options,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count) {
  dlrm::v1::LoadJobRequest r;
  r.set_job_id(options.job_id);
  r.set_job_epoch(options.job_epoch);
  r.set_shard_index(shard_index);
  r.set_shard_count(shard_count);
  for (size_t t = 0; t < options.tables.size(); ++t) {
    dlrm::v1::TableDef* def = r.add_tables();
    def->set_table(static_cast<int>(t));
    def->set_name(options.tables[t].name);
    def->set_rows(options.tables[t].rows);
    def->set_dim(options.tables[t].dim);
    if (options.tables[t].dtype != embedding::RowDtype::kFp32) {
      def->set_dtype(embedding::RowDtypeName(options.tables[t].dtype));
    }
  }
  *r.mutable_optimizer() = SparseOptimizerToProto(params.optimizer);
  r.set_seed(params.seed);
  r.set_restart(params.restart);
  r.set_periodic_checkpoints(params.periodic_checkpoints);
  r.set_staleness(params.staleness);
  r.set_num_workers(params.num_workers);
  return r;
}

absl::Status GrpcPsClient::LoadJobOnAll(const PsJobParams& params) {
  using LoadCall = UnaryCall<dlrm::v1::LoadJobRequest, dlrm::v1::LoadJobResponse>;
  std::vector<std::unique_ptr<LoadCall>> calls;
  std::vector<ShardCall*> pointers;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<LoadCall>(s, stubs_[s].get(), &LoadCall::Stub::PrepareAsyncLoadJob,
                                           options_.rpc_timeout);
    call->request = MakeLoadJobRequest(options_, params, s, shard_count());
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  RunCalls(pointers, "LoadJob");  // idempotent per epoch, so retried as it is
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "LoadJob");
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::UnloadJobOnAll() {
  using UnloadCall = UnaryCall<dlrm::v1::UnloadJobRequest, dlrm::v1::UnloadJobResponse>;
  std::vector<std::unique_ptr<UnloadCall>> calls;
  std::vector<ShardCall*> pointers;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<UnloadCall>(
        s, stubs_[s].get(), &UnloadCall::Stub::PrepareAsyncUnloadJob, options_.rpc_timeout);
    call->request.set_job_id(options_.job_id);
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  RunCalls(pointers, "UnloadJob", /*with_grant=*/true);
  for (auto& call : calls) {
    if (!call->status.ok() && call->status.error_code() != grpc::StatusCode::NOT_FOUND) {
      return ShardError(*call, "UnloadJob");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<embedding::CheckpointFileEntry>> GrpcPsClient::CheckpointAll(
    int64_t step, bool write, const std::string& dir, int64_t parent_step,
    int* incremental_shards) {
  using CheckpointCall = UnaryCall<dlrm::v1::CheckpointRequest, dlrm::v1::CheckpointResponse>;
  std::vector<std::unique_ptr<CheckpointCall>> calls;
  std::vector<ShardCall*> pointers;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<CheckpointCall>(s, stubs_[s].get(),
                                                 &CheckpointCall::Stub::PrepareAsyncCheckpoint,
                                                 write ? absl::Hours(1) : options_.rpc_timeout * 6);
    call->request.set_job_id(options_.job_id);
    call->request.set_job_epoch(options_.job_epoch);
    call->request.set_step(step);
    call->request.set_phase(write ? dlrm::v1::CheckpointRequest::WRITE
                                  : dlrm::v1::CheckpointRequest::SNAPSHOT);
    call->request.set_directory(dir);
    call->request.set_part(s);
    if (parent_step >= 0) {
      call->request.set_incremental(true);
      call->request.set_parent_step(parent_step);
    }
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  RunCalls(pointers, "Checkpoint", /*with_grant=*/true);
  std::vector<embedding::CheckpointFileEntry> files;
  if (incremental_shards != nullptr) *incremental_shards = 0;
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "Checkpoint");
    if (incremental_shards != nullptr && call->response.incremental()) ++*incremental_shards;
    for (const dlrm::v1::CheckpointFile& f : call->response.files()) {
      files.push_back({.name = f.name(),
                       .kind = "rows",
                       .table = f.table(),
                       .part = f.part(),
                       .rows = f.rows(),
                       .bytes = f.bytes(),
                       .crc32c = f.crc32c()});
    }
  }
  return files;
}

absl::StatusOr<std::vector<dlrm::v1::GetStatsResponse>> GrpcPsClient::GetStatsAll() {
  using StatsCall = UnaryCall<dlrm::v1::GetStatsRequest, dlrm::v1::GetStatsResponse>;
  std::vector<std::unique_ptr<StatsCall>> calls;
  std::vector<ShardCall*> pointers;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<StatsCall>(
        s, stubs_[s].get(), &StatsCall::Stub::PrepareAsyncGetStats, options_.rpc_timeout);
    call->request.set_job_id(options_.job_id);
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  RunCalls(pointers, "GetStats");
  std::vector<dlrm::v1::GetStatsResponse> out;
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(*call, "GetStats");
    out.push_back(std::move(call->response));
  }
  return out;
}

}  // namespace dlrm::worker
