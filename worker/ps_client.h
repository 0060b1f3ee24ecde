// GrpcPsClient: the worker's EmbeddingStore over the parameter-server shards of a job (the
// gRPC implementation of embedding/embedding_store.h; LocalEmbeddingStore is the in-process one).
//
// Lookup / Push group the (already deduplicated) ids of every table by owning shard
// (common/sharding.h ShardOf), send ONE batched request per shard (split into chunks of at most
// max_rows_per_request ids when larger), all shards in parallel. Every call completes on the
// calling thread (a completion queue of its own, no thread per call); a Lookup decodes each
// answer's rows from gRPC's buffers straight into request order (proto/lookup_wire.h).
//
// Transient faults: a request that fails with UNAVAILABLE (connection refused or reset, a PS
// restarting) is sent again after a backoff (20 ms doubling to 1 s, jittered) until its budget,
// `retry_budget` from its first attempt (workers: kPsRetryBudget, 5 s; zero: `rpc_timeout`), is
// spent; a stalled PS just makes it wait, up to `rpc_timeout`. DEADLINE_EXCEEDED and every other
// code are final. A failed call's error names the shard, its address and the attempts made; a call
// that needed retries logs one WARNING. Pushes are numbered (PushGradientsRequest.sequence, from 1
// per client) and a retry resends the same number, so a PS applies a retried push once. Hence one
// client per (job, epoch, rank): a second one would number from 1 again and have its pushes taken
// for copies. Cancel() ends it all.
//
// Push sends a request to every shard every step, even with no rows for it, because a shard
// counts a worker's step as complete (the staleness bound, server/ps_step_gate.h) when its push
// arrives. When a shard's push is split, the chunks but the last go first with more_chunks set,
// and the last one after they succeeded (with their retries).
//
// Thread-safe: Lookup and Push may run concurrently (a pipelined worker looks up batch i+1 while
// pushing batch i); Cancel may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
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
#include "server/ps_load_request.h"

namespace dlrm::worker {

struct PsClientOptions {
  std::vector<std::string> ps_addresses;  // "host:port" in shard order; shard count = size
  std::string job_id;
  int64_t job_epoch = 0;
  int worker_rank = 0;
  std::vector<embedding::TableConfig> tables;  // the job's tables, in table-index order
  // Budget of every request to a shard, retries included (checkpoint writes get longer).
  absl::Duration rpc_timeout = absl::Seconds(30);
  // How long a shard that cannot be reached (UNAVAILABLE: refused, reset) is tried again before
  // the call fails; zero: rpc_timeout. A shard that is reachable but slow (a stalled process)
  // is waited for up to rpc_timeout either way. Workers use a few seconds, so that a dead
  // parameter server is reported (and its job recovered) long before its lease runs out.
  absl::Duration retry_budget = absl::ZeroDuration();
  // Most ids in one request (all tables together); 0: common::MaxRowsPerRequest(largest dim).
  int64_t max_rows_per_request = 0;
  common::TransportSecurity security;
  // WorkerAssignment.job_grants (rank 0 only; one per server, in the order of ps_addresses): sent
  // in metadata common::kJobGrantMetadata with the servers' admin methods (WriteRows, Checkpoint,
  // UnloadJob) only. Empty, or one per server.
  std::vector<std::string> job_grants;
  // WorkerAssignment.member_grants (every rank, for job_epoch; one per server): sent in metadata
  // common::kMemberGrantMetadata with every call. Empty, or one per server.
  std::vector<std::string> member_grants;
  // WorkerAssignment.load_grants (every rank; one per server): sent in metadata
  // common::kLoadGrantMetadata with LoadJob, whose request they sign. Empty, or one per server.
  std::vector<std::string> load_grants;
};

// What LoadJob needs beyond the client's options (server/ps_load_request.h).
using server::PsJobParams;

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
  absl::Status Push(int64_t step, absl::Span<const embedding::TableRows> grads,
                    float learning_rate = embedding::kTableLearningRate) override;
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
  // the write takes, up to an hour; retried on UNAVAILABLE only within rpc_timeout of the start).
  // WRITE returns every file written, in shard order. With parent_step >= 0 the WRITE asks for
  // an incremental checkpoint on top of that step's; *incremental_shards (when given) counts the
  // shards that wrote only their changed rows (the others wrote all of theirs).
  absl::StatusOr<std::vector<embedding::CheckpointFileEntry>> CheckpointAll(
      int64_t step, bool write, const std::string& dir, int64_t parent_step = -1,
      int* incremental_shards = nullptr);
  // GetStats of this job from every shard, in shard order.
  absl::StatusOr<std::vector<dlrm::v1::GetStatsResponse>> GetStatsAll();

  // Stops the client for good (the worker's job was taken away): no attempt starts after it,
  // backoff waits end, calls in flight are cancelled, and every call, running or later, returns
  // CANCELLED ("ps client cancelled") within about 100 ms. Thread-safe and idempotent.
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  struct Plan;
  struct ShardCall;
  template <typename Request, typename Response>
  struct UnaryCall;
  struct LookupCall;
  using LookupStub = grpc::TemplatedGenericStub<dlrm::v1::LookupRequest, proto::LookupRowsSink>;
  explicit GrpcPsClient(const PsClientOptions& options);
  // INVALID_ARGUMENT for an unknown table, an id out of range or (with_values) a values size
  // that is not ids x dim.
  absl::Status CheckRequests(absl::Span<const embedding::TableRows> requests,
                             bool with_values) const;
  // Groups ids by shard and splits them into chunks.
  void BuildPlan(absl::Span<const embedding::TableRows> requests, Plan* plan) const;
  // As BuildPlan, with at most `max_rows` ids per chunk.
  void BuildPlan(absl::Span<const embedding::TableRows> requests, int64_t max_rows,
                 Plan* plan) const;
  // Runs every call concurrently on this thread, each retried while it fails with UNAVAILABLE
  // until its budget is spent (or the client is cancelled); returns when all are final, each
  // call's status set. `method` is for the log.
  // `with_grant`: the calls are admin methods (WriteRows, Checkpoint, UnloadJob; a LoadJob that
  // restarts the job), which carry options.job_grants; the data plane's calls do not.
  void RunCalls(absl::Span<ShardCall* const> calls, const char* method, bool with_grant = false);
  // Starts the next attempt of `call` on `cq`: false (and the call CANCELLED) once cancelled.
  bool StartAttempt(ShardCall* call, grpc::CompletionQueue* cq);
  // The failed call's status as "<method> on ps shard <i> (<address>): <message>", with the
  // attempts made when it was retried or UNAVAILABLE.
  absl::Status ShardError(const ShardCall& call, const char* method) const;

  PsClientOptions options_;
  int64_t max_rows_per_request_ = 0;
  int64_t max_stored_rows_per_request_ = 0;  // for full rows (up to 3 x dim + 1 floats)
  std::vector<std::unique_ptr<dlrm::v1::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<LookupStub>> lookup_stubs_;  // Lookup, decoding rows in place
  // Lookup requests reused from call to call, so that their id buffers keep their capacity.
  proto::MessagePool<dlrm::v1::LookupRequest> lookup_requests_;
  // Numbers of the push requests sent (PushGradientsRequest.sequence): the last one given out.
  std::atomic<uint64_t> push_sequence_{0};

  // Cancel: set once under cancel_mu_, read without it; the contexts of the attempts in flight,
  // which Cancel cancels.
  std::atomic<bool> cancelled_{false};
  absl::Mutex cancel_mu_;
  absl::flat_hash_set<grpc::ClientContext*> live_contexts_ ABSL_GUARDED_BY(cancel_mu_);
};

// The LoadJob message for shard `shard_index` of `shard_count`.
dlrm::v1::LoadJobRequest MakeLoadJobRequest(const PsClientOptions& options,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count);
using server::SparseOptimizerToProto;

}  // namespace dlrm::worker
