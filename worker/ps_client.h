// GrpcPsClient: the worker's EmbeddingStore over the parameter-server shards of a job (the
// gRPC implementation of embedding/embedding_store.h; LocalEmbeddingStore is the in-process one).
//
// Lookup / Push group the (already deduplicated) ids of every table by owning shard
// (common/sharding.h ShardOf), send ONE batched request per shard (split into chunks of at most
// max_rows_per_request ids when larger), all shards in parallel. A Lookup's calls complete on
// the calling thread, which decodes each answer's rows from gRPC's buffers straight into request
// order (proto/lookup_wire.h); Push uses gRPC's callback client API (no thread per call).
// into request order. Every call carries the deadline `rpc_timeout`; a shard that is gone fails
// the whole Lookup/Push with UNAVAILABLE or DEADLINE_EXCEEDED within it, the message naming the
// shard and its address.
//
// Push sends a request to every shard every step, even with no rows for it, because a shard
// counts a worker's step as complete (the staleness bound, server/ps_step_gate.h) when its push
// arrives. When a shard's push is split, the chunks but the last go first with more_chunks set,
// and the last one after they succeeded.
//
// Thread-safe: Lookup and Push may run concurrently (a pipelined worker looks up batch i+1 while
// pushing batch i).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/grpc_util.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/embedding_store.h"
#include "embedding/sparse_optimizer_options.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/lookup_wire.h"
#include "proto/message_pool.h"
#include "proto/ps.grpc.pb.h"

namespace dlrm::worker {

struct PsClientOptions {
  std::vector<std::string> ps_addresses;  // "host:port" in shard order; shard count = size
  std::string job_id;
  int64_t job_epoch = 0;
  int worker_rank = 0;
  std::vector<embedding::TableConfig> tables;      // the job's tables, in table-index order
  absl::Duration rpc_timeout = absl::Seconds(30);  // deadline of every call
  // Most ids in one request (all tables together); 0: common::MaxRowsPerRequest(largest dim).
  int64_t max_rows_per_request = 0;
  common::TransportSecurity security;
};

// What LoadJob needs beyond the client's options.
struct PsJobParams {
  embedding::SparseOptimizerOptions optimizer;
  uint64_t seed = 0;
  int staleness = 0;
  int num_workers = 1;
};

class GrpcPsClient : public embedding::EmbeddingStore {
 public:
  // Builds one channel per address (connections are made lazily). INVALID_ARGUMENT for no
  // addresses, no tables, a bad table, or an empty job id.
  static absl::StatusOr<std::unique_ptr<GrpcPsClient>> Create(const PsClientOptions& options);
  ~GrpcPsClient() override;

  const std::vector<embedding::TableConfig>& tables() const override { return options_.tables; }
  int shard_count() const { return static_cast<int>(stubs_.size()); }

  // EmbeddingStore. `step` goes to the shards for the staleness bound (step < 0: no wait, e.g.
  // evaluation). Lookup resizes each request's values to ids.size() * dim.
  absl::Status Lookup(int64_t step, absl::Span<embedding::TableRows> requests) override;
  absl::Status Push(int64_t step, absl::Span<const embedding::TableRows> grads) override;
  // Full stored rows [weights | optimizer state] through the shards' ReadRows / WriteRows (no
  // staleness wait). ReadStoredRows resizes each request's values to ids.size() * row_floats,
  // row_floats as the shards report it. WriteStoredRows needs distinct ids per table and
  // values.size() a multiple of ids.size(); the shards check the exact width (INVALID_ARGUMENT
  // naming the table and both sizes).
  absl::Status ReadStoredRows(absl::Span<embedding::TableRows> requests) override;
  absl::Status WriteStoredRows(absl::Span<const embedding::TableRows> rows) override;

  // Calls LoadJob on every shard (in parallel) with its shard index. Idempotent: every worker of
  // a job may call it.
  absl::Status LoadJobOnAll(const PsJobParams& params);
  // Calls UnloadJob on every shard; NOT_FOUND from a shard is not an error.
  absl::Status UnloadJobOnAll();
  // A checkpoint phase on every shard in parallel (proto/ps.proto CheckpointRequest): SNAPSHOT
  // (the cut, quick) or WRITE of each shard's rows into `dir` as part = shard index (as long as
  // the write takes, up to an hour). WRITE returns every file written, in shard order.
  absl::StatusOr<std::vector<embedding::CheckpointFileEntry>> CheckpointAll(int64_t step,
                                                                            bool write,
                                                                            const std::string& dir);
  // GetStats of this job from every shard, in shard order.
  absl::StatusOr<std::vector<dlrm::v1::GetStatsResponse>> GetStatsAll();

 private:
  struct Plan;
  struct LookupCall;
  using LookupStub = grpc::TemplatedGenericStub<dlrm::v1::LookupRequest, proto::LookupRowsSink>;
  explicit GrpcPsClient(const PsClientOptions& options);
  // A cleared request/response pair from the pool (or a new one); back to the pool when done.
  absl::Status CheckRequests(absl::Span<const embedding::TableRows> requests,
                             bool with_values) const;
  // Groups ids by shard and splits them into chunks.
  void BuildPlan(absl::Span<const embedding::TableRows> requests, Plan* plan) const;
  // As BuildPlan, with at most `max_rows` ids per chunk.
  void BuildPlan(absl::Span<const embedding::TableRows> requests, int64_t max_rows,
                 Plan* plan) const;
  absl::Status ShardError(int shard, const grpc::Status& status, const char* method) const;

  PsClientOptions options_;
  int64_t max_rows_per_request_ = 0;
  int64_t max_stored_rows_per_request_ = 0;  // for full rows (up to 3 x dim + 1 floats)
  std::vector<std::unique_ptr<dlrm::v1::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<LookupStub>> lookup_stubs_;  // Lookup, decoding rows in place
  // Lookup requests reused from call to call, so that their id buffers keep their capacity.
  proto::MessagePool<dlrm::v1::LookupRequest> lookup_requests_;
};

// The LoadJob message for shard `shard_index` of `shard_count`.
dlrm::v1::LoadJobRequest MakeLoadJobRequest(const PsClientOptions& options,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count);
dlrm::v1::SparseOptimizerConfig SparseOptimizerToProto(
    const embedding::SparseOptimizerOptions& options);

}  // namespace dlrm::worker
