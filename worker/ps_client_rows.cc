// GrpcPsClient's row methods (worker/ps_client.h): Lookup, Push, ReadStoredRows and
// WriteStoredRows. Each checks its requests (CheckRequests), groups the ids by shard and splits
// them into chunks of at most max_rows_per_request ids (BuildPlan), builds one request per chunk,
// runs them (RunCalls, ps_client.cc) and decodes the answers' rows into request order.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/rpc_bytes.h"
#include "common/sharding.h"
#include "common/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "worker/ps_client.h"
#include "worker/ps_client_internal.h"

namespace dlrm::worker {

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

absl::Status GrpcPsClient::Push(int64_t step, absl::Span<const embedding::TableRows> grads,
                                float learning_rate) {
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
    if (learning_rate >= 0.0f) req.set_learning_rate(learning_rate);
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

}  // namespace dlrm::worker
