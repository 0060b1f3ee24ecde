#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/sharding.h"
#include "common/status.h"
#include "grpcpp/generic/generic_stub.h"

namespace dlrm::worker {
namespace {

// Waits for a batch of callback-API calls started together. The completion callbacks share the
// state, so a callback still unlocking after Wait returned never touches freed memory.
class CallGroup {
 public:
  CallGroup() : state_(std::make_shared<State>()) {}

  // A completion callback for one call that stores its status in *out. Call before starting it.
  std::function<void(grpc::Status)> Track(grpc::Status* out) {
    {
      absl::MutexLock lock(&state_->mu);
      ++state_->pending;
    }
    return [state = state_, out](grpc::Status status) {
      absl::MutexLock lock(&state->mu);
      *out = std::move(status);
      --state->pending;
    };
  }
  // Returns when every tracked call has completed (each has its own deadline, so this ends).
  void Wait() {
    absl::MutexLock lock(&state_->mu);
    state_->mu.Await(absl::Condition(
        +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->pending == 0; }, state_.get()));
  }

 private:
  struct State {
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<State> state_;
};

template <typename Request, typename Response>
struct Call {
  grpc::ClientContext context;
  Request request;
  Response response;
  grpc::Status status;
  int shard = 0;
};

}  // namespace

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

// One Lookup call on one shard; its request goes back to the client's pool when it is destroyed.
struct GrpcPsClient::LookupCall {
  LookupCall(GrpcPsClient* owner_in, std::unique_ptr<dlrm::v1::LookupRequest> request_in)
      : owner(owner_in), request(std::move(request_in)) {}
  ~LookupCall() { owner->lookup_requests_.Return(std::move(request)); }

  GrpcPsClient* const owner;
  std::unique_ptr<dlrm::v1::LookupRequest> request;
  std::vector<proto::LookupRowsTarget> targets;  // where each answered table's rows go
  proto::LookupRowsSink sink;
  std::unique_ptr<grpc::ClientAsyncResponseReader<proto::LookupRowsSink>> reader;
  grpc::ClientContext context;
  grpc::Status status;
  int shard = 0;
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

absl::Status GrpcPsClient::ShardError(int shard, const grpc::Status& status,
                                      const char* method) const {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(method, " on ps shard ", shard, " (",
                                   options_.ps_addresses[shard], "): ", status.error_message()));
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
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call = std::make_unique<LookupCall>(this, lookup_requests_.Take());
    call->shard = chunk.shard;
    common::SetDeadline(&call->context, options_.rpc_timeout);
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
      if (e.positions == nullptr) {
        target.out = out.values.data() + e.begin * dim;
      } else {
        target.out = out.values.data();
        target.positions = e.positions + e.begin;
      }
      call->targets.push_back(target);
    }
    call->sink.targets = call->targets;
    calls.push_back(std::move(call));
  }
  // Every call completes on this thread, which decodes each answer's rows straight into
  // `requests` as it arrives (proto/lookup_wire.h): no hand-off to a gRPC thread, no copy of the
  // rows into a message first.
  grpc::CompletionQueue cq;
  for (auto& call : calls) {
    LookupCall* c = call.get();
    c->reader = lookup_stubs_[c->shard]->PrepareUnaryCall(&c->context, proto::kLookupMethod,
                                                          *c->request, &cq);
    c->reader->StartCall();
    c->reader->Finish(&c->sink, &c->status, c);
  }
  for (size_t done = 0; done < calls.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    // Each call has a deadline, so every tag comes back.
    if (!cq.Next(&tag, &ok)) break;
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "Lookup");
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::Push(int64_t step, absl::Span<const embedding::TableRows> grads) {
  DLRM_RETURN_IF_ERROR(CheckRequests(grads, /*with_values=*/true));
  Plan plan;
  BuildPlan(grads, &plan);
  using PushCall = Call<dlrm::v1::PushGradientsRequest, dlrm::v1::PushGradientsResponse>;
  std::vector<std::unique_ptr<PushCall>> first_round, last_round;
  for (const Plan::Chunk& chunk : plan.chunks) {
    auto call = std::make_unique<PushCall>();
    call->shard = chunk.shard;
    dlrm::v1::PushGradientsRequest& req = call->request;
    req.set_job_id(options_.job_id);
    req.set_job_epoch(options_.job_epoch);
    req.set_step(step);
    req.set_worker_rank(options_.worker_rank);
    req.set_more_chunks(!chunk.last_of_shard);
    for (const Plan::Entry& e : chunk.entries) {
      const embedding::TableRows& in = grads[e.request];
      const int dim = options_.tables[in.table].dim;
      const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
      dlrm::v1::TableGradients* t = req.add_tables();
      t->set_table(in.table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
      std::string* g = t->mutable_grads();
      if (e.positions == nullptr) {
        g->assign(reinterpret_cast<const char*>(in.values.data() + e.begin * dim),
                  static_cast<size_t>(e.count) * row_bytes);
      } else {
        g->resize(static_cast<size_t>(e.count) * row_bytes);
        for (int64_t j = 0; j < e.count; ++j) {
          std::memcpy(g->data() + j * row_bytes,
                      in.values.data() + static_cast<int64_t>(e.positions[e.begin + j]) * dim,
                      row_bytes);
        }
      }
    }
    (chunk.last_of_shard ? last_round : first_round).push_back(std::move(call));
  }
  for (auto* round : {&first_round, &last_round}) {
    if (round->size() == 1) {
      PushCall* c = (*round)[0].get();
      common::SetDeadline(&c->context, options_.rpc_timeout);
      c->status = stubs_[c->shard]->PushGradients(&c->context, c->request, &c->response);
    } else {
      CallGroup group;
      for (auto& call : *round) {
        PushCall* c = call.get();
        common::SetDeadline(&c->context, options_.rpc_timeout);
        stubs_[c->shard]->async()->PushGradients(&c->context, &c->request, &c->response,
                                                 group.Track(&c->status));
      }
      group.Wait();
    }
    for (auto& call : *round) {
      if (!call->status.ok()) return ShardError(call->shard, call->status, "PushGradients");
    }
  }
  return absl::OkStatus();
}

namespace {

// Starts every call of `calls` (a lone one blocking on this thread) and waits for them all.
template <typename CallT, typename Start, typename StartAsync>
void RunCalls(std::vector<std::unique_ptr<CallT>>& calls, Start start, StartAsync start_async) {
  if (calls.size() == 1) {
    start(calls[0].get());
    return;
  }
  CallGroup group;
  for (auto& call : calls) start_async(call.get(), group.Track(&call->status));
  group.Wait();
}

}  // namespace

absl::Status GrpcPsClient::ReadStoredRows(absl::Span<embedding::TableRows> requests) {
  DLRM_RETURN_IF_ERROR(CheckRequests(requests, /*with_values=*/false));
  Plan plan;
  BuildPlan(requests, max_stored_rows_per_request_, &plan);
  using ReadCall = Call<dlrm::v1::ReadRowsRequest, dlrm::v1::ReadRowsResponse>;
  std::vector<std::unique_ptr<ReadCall>> calls;
  std::vector<const Plan::Chunk*> call_chunks;
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call = std::make_unique<ReadCall>();
    call->shard = chunk.shard;
    common::SetDeadline(&call->context, options_.rpc_timeout);
    call->request.set_job_id(options_.job_id);
    call->request.set_job_epoch(options_.job_epoch);
    for (const Plan::Entry& e : chunk.entries) {
      dlrm::v1::TableIds* t = call->request.add_tables();
      t->set_table(requests[e.request].table);
      t->set_ids(reinterpret_cast<const char*>(e.ids + e.begin),
                 static_cast<size_t>(e.count) * sizeof(int64_t));
    }
    calls.push_back(std::move(call));
    call_chunks.push_back(&chunk);
  }
  RunCalls(
      calls,
      [this](ReadCall* c) {
        c->status = stubs_[c->shard]->ReadRows(&c->context, c->request, &c->response);
      },
      [this](ReadCall* c, std::function<void(grpc::Status)> done) {
        stubs_[c->shard]->async()->ReadRows(&c->context, &c->request, &c->response,
                                            std::move(done));
      });
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "ReadRows");
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
  using WriteCall = Call<dlrm::v1::WriteRowsRequest, dlrm::v1::WriteRowsResponse>;
  std::vector<std::unique_ptr<WriteCall>> calls;
  for (const Plan::Chunk& chunk : plan.chunks) {
    if (chunk.entries.empty()) continue;
    auto call = std::make_unique<WriteCall>();
    call->shard = chunk.shard;
    common::SetDeadline(&call->context, options_.rpc_timeout);
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
    calls.push_back(std::move(call));
  }
  RunCalls(
      calls,
      [this](WriteCall* c) {
        c->status = stubs_[c->shard]->WriteRows(&c->context, c->request, &c->response);
      },
      [this](WriteCall* c, std::function<void(grpc::Status)> done) {
        stubs_[c->shard]->async()->WriteRows(&c->context, &c->request, &c->response,
                                             std::move(done));
      });
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "WriteRows");
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
  }
  *r.mutable_optimizer() = SparseOptimizerToProto(params.optimizer);
  r.set_seed(params.seed);
  r.set_staleness(params.staleness);
  r.set_num_workers(params.num_workers);
  return r;
}

absl::Status GrpcPsClient::LoadJobOnAll(const PsJobParams& params) {
  using LoadCall = Call<dlrm::v1::LoadJobRequest, dlrm::v1::LoadJobResponse>;
  std::vector<std::unique_ptr<LoadCall>> calls;
  CallGroup group;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<LoadCall>();
    call->shard = s;
    call->request = MakeLoadJobRequest(options_, params, s, shard_count());
    common::SetDeadline(&call->context, options_.rpc_timeout);
    calls.push_back(std::move(call));
  }
  for (auto& call : calls) {
    LoadCall* c = call.get();
    stubs_[c->shard]->async()->LoadJob(&c->context, &c->request, &c->response,
                                       group.Track(&c->status));
  }
  group.Wait();
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "LoadJob");
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::UnloadJobOnAll() {
  using UnloadCall = Call<dlrm::v1::UnloadJobRequest, dlrm::v1::UnloadJobResponse>;
  std::vector<std::unique_ptr<UnloadCall>> calls;
  CallGroup group;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<UnloadCall>();
    call->shard = s;
    call->request.set_job_id(options_.job_id);
    common::SetDeadline(&call->context, options_.rpc_timeout);
    calls.push_back(std::move(call));
  }
  for (auto& call : calls) {
    UnloadCall* c = call.get();
    stubs_[c->shard]->async()->UnloadJob(&c->context, &c->request, &c->response,
                                         group.Track(&c->status));
  }
  group.Wait();
  for (auto& call : calls) {
    if (!call->status.ok() && call->status.error_code() != grpc::StatusCode::NOT_FOUND) {
      return ShardError(call->shard, call->status, "UnloadJob");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<embedding::CheckpointFileEntry>> GrpcPsClient::CheckpointAll(
    int64_t step, bool write, const std::string& dir) {
  using CheckpointCall = Call<dlrm::v1::CheckpointRequest, dlrm::v1::CheckpointResponse>;
  std::vector<std::unique_ptr<CheckpointCall>> calls;
  CallGroup group;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<CheckpointCall>();
    call->shard = s;
    call->request.set_job_id(options_.job_id);
    call->request.set_step(step);
    call->request.set_phase(write ? dlrm::v1::CheckpointRequest::WRITE
                                  : dlrm::v1::CheckpointRequest::SNAPSHOT);
    call->request.set_directory(dir);
    call->request.set_part(s);
    common::SetDeadline(&call->context, write ? absl::Hours(1) : options_.rpc_timeout * 6);
    calls.push_back(std::move(call));
  }
  for (auto& call : calls) {
    CheckpointCall* c = call.get();
    stubs_[c->shard]->async()->Checkpoint(&c->context, &c->request, &c->response,
                                          group.Track(&c->status));
  }
  group.Wait();
  std::vector<embedding::CheckpointFileEntry> files;
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "Checkpoint");
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
  using StatsCall = Call<dlrm::v1::GetStatsRequest, dlrm::v1::GetStatsResponse>;
  std::vector<std::unique_ptr<StatsCall>> calls;
  CallGroup group;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<StatsCall>();
    call->shard = s;
    call->request.set_job_id(options_.job_id);
    common::SetDeadline(&call->context, options_.rpc_timeout);
    calls.push_back(std::move(call));
  }
  for (auto& call : calls) {
    StatsCall* c = call.get();
    stubs_[c->shard]->async()->GetStats(&c->context, &c->request, &c->response,
                                        group.Track(&c->status));
  }
  group.Wait();
  std::vector<dlrm::v1::GetStatsResponse> out;
  for (auto& call : calls) {
    if (!call->status.ok()) return ShardError(call->shard, call->status, "GetStats");
    out.push_back(std::move(call->response));
  }
  return out;
}

}  // namespace dlrm::worker
