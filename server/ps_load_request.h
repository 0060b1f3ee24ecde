// The LoadJob request of one parameter server of a job (proto/ps.proto LoadJobRequest), built
// from the job spec. A job's ranks send it (worker/ps_client.h LoadJobOnAll), and the coordinator
// builds the same request from the spec it holds to sign it (common/grants.h JobLoadGrant), so
// that a server loads a job only with the tables and parameters the coordinator gave the job.
// One function makes both, so they cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"
#include "proto/ps.pb.h"

namespace dlrm::server {

// What LoadJob needs beyond the job's id, epoch and tables.
struct PsJobParams {
  embedding::SparseOptimizerOptions optimizer;
  uint64_t seed = 0;
  int staleness = 0;
  int num_workers = 1;
  // The job starts over at this epoch (a recovery): shards drop tables of an older epoch.
  bool restart = false;
  // The job checkpoints while it trains: the servers prepare their first snapshot's memory.
  bool periodic_checkpoints = false;
};

// The sparse optimizer and the tables of a (validated) job spec.
absl::StatusOr<embedding::SparseOptimizerOptions> SparseOptimizerFromSpec(
    const common::JobSpec& spec);
std::vector<embedding::TableConfig> TableConfigsFromSpec(const common::JobSpec& spec);
// The parameters of `spec` trained by `num_workers` workers; `restart`: after a recovery.
absl::StatusOr<PsJobParams> PsJobParamsFromSpec(const common::JobSpec& spec, int num_workers,
                                                bool restart);

dlrm::v1::SparseOptimizerConfig SparseOptimizerToProto(
    const embedding::SparseOptimizerOptions& options);
// The LoadJob message for shard `shard_index` of `shard_count`.
dlrm::v1::LoadJobRequest MakeLoadJobRequest(const std::string& job_id, int64_t job_epoch,
                                            const std::vector<embedding::TableConfig>& tables,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count);

// The bytes a load grant signs: `request` without `restart` (whether a load drops an older
// epoch's rows is the job grant's to allow, server/ps_service.cc), in protobuf's deterministic
// serialization.
std::string LoadJobRequestBytes(const dlrm::v1::LoadJobRequest& request);

}  // namespace dlrm::server
