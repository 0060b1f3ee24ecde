#include "server/ps_load_request.h"

#include "common/status.h"
#include "embedding/row_dtype.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace dlrm::server {

absl::StatusOr<embedding::SparseOptimizerOptions> SparseOptimizerFromSpec(
    const common::JobSpec& spec) {
  embedding::SparseOptimizerOptions o;
  DLRM_ASSIGN_OR_RETURN(o.type, embedding::ParseSparseOptimizerType(spec.sparse_optimizer.type));
  o.learning_rate = static_cast<float>(spec.sparse_optimizer.learning_rate);
  o.epsilon = static_cast<float>(spec.sparse_optimizer.epsilon);
  o.beta1 = static_cast<float>(spec.sparse_optimizer.beta1);
  o.beta2 = static_cast<float>(spec.sparse_optimizer.beta2);
  o.initial_accumulator = static_cast<float>(spec.sparse_optimizer.initial_accumulator);
  return o;
}

std::vector<embedding::TableConfig> TableConfigsFromSpec(const common::JobSpec& spec) {
  std::vector<embedding::TableConfig> tables;
  tables.reserve(spec.tables.size());
  for (const auto& t : spec.tables) {
    // The spec was validated: its dtype names parse.
    tables.push_back({.name = t.name,
                      .rows = t.rows,
                      .dim = spec.embedding_dim,
                      .dtype = *embedding::ParseRowDtype(t.dtype)});
  }
  return tables;
}

absl::StatusOr<PsJobParams> PsJobParamsFromSpec(const common::JobSpec& spec, int num_workers,
                                                bool restart) {
  PsJobParams params;
  DLRM_ASSIGN_OR_RETURN(params.optimizer, SparseOptimizerFromSpec(spec));
  params.seed = spec.seed;
  params.staleness = spec.staleness;
  params.num_workers = num_workers;
  params.restart = restart;
  params.periodic_checkpoints = !spec.checkpoint.dir.empty() && (spec.checkpoint.every_steps > 0 ||
                                                                 spec.checkpoint.every_seconds > 0);
  return params;
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

dlrm::v1::LoadJobRequest MakeLoadJobRequest(const std::string& job_id, int64_t job_epoch,
                                            const std::vector<embedding::TableConfig>& tables,
                                            const PsJobParams& params, int shard_index,
                                            int shard_count) {
  dlrm::v1::LoadJobRequest r;
  r.set_job_id(job_id);
  r.set_job_epoch(job_epoch);
  r.set_shard_index(shard_index);
  r.set_shard_count(shard_count);
  for (size_t t = 0; t < tables.size(); ++t) {
    dlrm::v1::TableDef* def = r.add_tables();
    def->set_table(static_cast<int>(t));
    def->set_name(tables[t].name);
    def->set_rows(tables[t].rows);
    def->set_dim(tables[t].dim);
    if (tables[t].dtype != embedding::RowDtype::kFp32) {
      def->set_dtype(embedding::RowDtypeName(tables[t].dtype));
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

std::string LoadJobRequestBytes(const dlrm::v1::LoadJobRequest& request) {
  dlrm::v1::LoadJobRequest signed_part = request;
  signed_part.set_restart(false);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    signed_part.SerializeToCodedStream(&out);
  }
  return bytes;
}

}  // namespace dlrm::server
