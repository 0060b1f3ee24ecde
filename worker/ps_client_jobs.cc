// GrpcPsClient's per-job calls to every shard in parallel (worker/ps_client.h): LoadJobOnAll,
// UnloadJobOnAll, CheckpointAll and GetStatsAll.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/ps_client.h"
#include "worker/ps_client_internal.h"

namespace dlrm::worker {

dlrm::v1::LoadJobRequest MakeLoadJobRequest(const PsClientOptions& options,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count) {
  return server::MakeLoadJobRequest(options.job_id, options.job_epoch, options.tables, params,
                                    shard_index, shard_count);
}

absl::Status GrpcPsClient::LoadJobOnAll(const PsJobParams& params) {
  using LoadCall = UnaryCall<dlrm::v1::LoadJobRequest, dlrm::v1::LoadJobResponse>;
  std::vector<std::unique_ptr<LoadCall>> calls;
  std::vector<ShardCall*> pointers;
  for (int s = 0; s < shard_count(); ++s) {
    auto call = std::make_unique<LoadCall>(s, stubs_[s].get(), &LoadCall::Stub::PrepareAsyncLoadJob,
                                           options_.rpc_timeout);
    call->request = MakeLoadJobRequest(options_, params, s, shard_count());
    call->with_load_grant = true;
    pointers.push_back(call.get());
    calls.push_back(std::move(call));
  }
  // Idempotent per epoch, so retried as it is. With the job's grant where this rank holds it
  // (rank 0): a restart's drop of the older epoch's rows takes it.
  RunCalls(pointers, "LoadJob", /*with_grant=*/true);
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
