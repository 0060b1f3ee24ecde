// The checks every request to a parameter server's job passes before it touches a row: LoadJob's
// spec (sizes against common/limits.h, names, optimizer values) and, for a loaded job, each
// lookup, push and row read or write (epoch, rank, table, ids in range and on this shard, payload
// sizes, no id twice). Each refusal names the field, the value and the limit.
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/sharding.h"
#include "common/status.h"
#include "embedding/row_dtype.h"
#include "server/ps_job.h"

namespace dlrm::server {
namespace {

bool ValidJobIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// INVALID_ARGUMENT naming the field, the value and the limit when value > limit.
absl::Status AtMost(const std::string& where, const char* field, int64_t value, int64_t limit,
                    const char* limit_name) {
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, field, " ", value, " is over the limit of ",
                                                 limit, " (", limit_name, " in common/limits.h)"));
}

// An optimizer parameter: in [0, kMaxOptimizerValue], or (0, ...] when !zero_ok. NaN and the
// infinities fail both comparisons.
absl::Status CheckOptimizerValue(const std::string& where, const char* field, float value,
                                 bool zero_ok) {
  const bool low_ok = zero_ok ? value >= 0 : value > 0;
  if (low_ok && value <= common::kMaxOptimizerValue) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, "optimizer.", field, " ", value, " must be a finite number in ",
                   zero_ok ? "[0, " : "(0, ", static_cast<int64_t>(common::kMaxOptimizerValue),
                   "] (kMaxOptimizerValue in common/limits.h)"));
}

}  // namespace

absl::Status ValidateLoadRequest(const dlrm::v1::LoadJobRequest& r) {
  if (r.job_id().empty()) return absl::InvalidArgumentError("LoadJob: empty job_id");
  if (static_cast<int64_t>(r.job_id().size()) > common::kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadJob: job_id of ", r.job_id().size(), " bytes is over the limit of ",
                     common::kMaxNameBytes, " (kMaxNameBytes in common/limits.h)"));
  }
  for (char c : r.job_id()) {
    if (!ValidJobIdChar(c) || r.job_id() == "." || r.job_id() == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoadJob: job_id '", r.job_id(), "' may only use letters, digits, '.', '_' and '-'"));
    }
  }
  const std::string where = absl::StrCat("LoadJob ", r.job_id(), ": ");
  if (r.job_epoch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "job_epoch ", r.job_epoch(), " < 0"));
  }
  if (r.shard_count() < 1 || r.shard_index() < 0 || r.shard_index() >= r.shard_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "shard_index ", r.shard_index(), " not in [0, shard_count ", r.shard_count(), ")"));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost(where, "shard_count", r.shard_count(), common::kMaxJobWorkers, "kMaxJobWorkers"));
  if (r.tables_size() == 0) return absl::InvalidArgumentError(absl::StrCat(where, "no tables"));
  DLRM_RETURN_IF_ERROR(
      AtMost(where, "tables (count)", r.tables_size(), common::kMaxTables, "kMaxTables"));
  for (int i = 0; i < r.tables_size(); ++i) {
    const dlrm::v1::TableDef& t = r.tables(i);
    if (t.table() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "tables[", i, "] has table index ", t.table(), ", expected ", i));
    }
    const std::string table = absl::StrCat("table ", i, " ");
    DLRM_RETURN_IF_ERROR(AtMost(where + table, "name bytes", static_cast<int64_t>(t.name().size()),
                                common::kMaxNameBytes, "kMaxNameBytes"));
    if (t.rows() < 1 || t.dim() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, "table ", i, " (", t.name(), "): rows ",
                                                     t.rows(), " and dim ", t.dim(),
                                                     " must be >= 1"));
    }
    DLRM_RETURN_IF_ERROR(
        AtMost(where + table, "rows", t.rows(), common::kMaxTableRows, "kMaxTableRows"));
    DLRM_RETURN_IF_ERROR(
        AtMost(where + table, "dim", t.dim(), common::kMaxEmbeddingDim, "kMaxEmbeddingDim"));
    if (!t.dtype().empty()) {
      auto dtype = embedding::ParseRowDtype(t.dtype());
      if (!dtype.ok()) return Annotate(dtype.status(), where + table);
    }
  }
  auto type = embedding::ParseSparseOptimizerType(r.optimizer().type());
  if (!type.ok()) return Annotate(type.status(), where + "optimizer");
  const dlrm::v1::SparseOptimizerConfig& o = r.optimizer();
  DLRM_RETURN_IF_ERROR(CheckOptimizerValue(where, "learning_rate", o.learning_rate(), false));
  DLRM_RETURN_IF_ERROR(CheckOptimizerValue(where, "epsilon", o.epsilon(), true));
  DLRM_RETURN_IF_ERROR(
      CheckOptimizerValue(where, "initial_accumulator", o.initial_accumulator(), true));
  for (const auto& [field, beta] : {std::pair{"beta1", o.beta1()}, std::pair{"beta2", o.beta2()}}) {
    if (!(beta >= 0 && beta < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "optimizer.", field, " ", beta, " must be in [0, 1)"));
    }
  }
  if (r.staleness() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "staleness ", r.staleness(), " < 0"));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost(where, "staleness", r.staleness(), common::kMaxStaleness, "kMaxStaleness"));
  if (r.num_workers() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, "num_workers ", r.num_workers(), " < 1"));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost(where, "num_workers", r.num_workers(), common::kMaxJobWorkers, "kMaxJobWorkers"));
  return absl::OkStatus();
}

absl::Status PsJob::EpochError(int64_t epoch, int64_t loaded) const {
  if (epoch < loaded) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id(), ": request from epoch ",
                                                      epoch, " is older than the loaded epoch ",
                                                      loaded));
  }
  if (epoch > loaded) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id(), ": epoch ", epoch,
                                                      " is newer than the loaded epoch ", loaded,
                                                      "; call LoadJob for it first"));
  }
  return absl::OkStatus();
}

absl::Status PsJob::CheckEpoch(int64_t epoch) const { return EpochError(epoch, this->epoch()); }

absl::Status PsJob::CheckRank(int64_t step, int rank) const {
  if (step < 0) return absl::OkStatus();
  if (rank < 0 || rank >= spec_.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("job ", job_id(), ": worker_rank ", rank,
                                                   " not in [0, ", spec_.num_workers(), ")"));
  }
  return absl::OkStatus();
}

absl::Status PsJob::CheckTable(int table, const embedding::TableConfig** config) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) {
    return absl::NotFoundError(absl::StrCat("job ", job_id(), ": table ", table,
                                            " not found (the job has ", tables_.size(),
                                            " tables)"));
  }
  *config = &tables_[table];
  return absl::OkStatus();
}

absl::Status PsJob::CheckIds(int table, const std::string& ids_bytes,
                             const embedding::TableConfig** config) const {
  DLRM_RETURN_IF_ERROR(CheckTable(table, config));
  const embedding::TableConfig& c = **config;
  if (ids_bytes.size() % sizeof(int64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", table, ": ids payload of ", ids_bytes.size(), " bytes is not a multiple of 8"));
  }
  const int64_t n = static_cast<int64_t>(ids_bytes.size() / sizeof(int64_t));
  const int shards = spec_.shard_count();
  const int self = spec_.shard_index();
  for (int64_t j = 0; j < n; ++j) {
    int64_t id;
    std::memcpy(&id, ids_bytes.data() + j * sizeof(int64_t), sizeof(id));
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table, ": id ", id, " < 0"));
    }
    if (id >= c.rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", table, ": id ", id, " >= rows ", c.rows));
    }
    if (shards > 1) {
      const int owner = common::ShardOf(table, id, shards);
      if (owner != self) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", table, ": id ", id, " belongs to shard ", owner,
                         ", not to this shard ", self, " of ", shards));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// The answer to a request for `ids` rows of `row_bytes` bytes each, summed over its tables, stays
// within what one request may carry (common/grpc_util.h; the client splits larger batches): a
// request of a few MB must not make the server build an answer of gigabytes.
absl::Status CheckAnswerSize(const char* method, int64_t ids, int64_t answer_bytes) {
  if (ids > common::kMaxIdsPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": ", ids, " ids in one request, more ",
                                                   "than ", common::kMaxIdsPerRequest,
                                                   " (split the batch)"));
  }
  if (answer_bytes > common::kMaxRpcPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        method, ": the ", ids, " ids ask for ", answer_bytes, " bytes of rows, more than the ",
        common::kMaxRpcPayloadBytes, " one answer may carry (split the batch)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PsJob::ValidateLookup(const dlrm::v1::LookupRequest& request) const {
  DLRM_RETURN_IF_ERROR(CheckEpoch(request.job_epoch()));
  DLRM_RETURN_IF_ERROR(CheckRank(request.step(), request.worker_rank()));
  return CheckRowRequest("Lookup", request.tables(), /*stored_rows=*/false);
}

absl::Status PsJob::CheckRowRequest(
    const char* method, const google::protobuf::RepeatedPtrField<dlrm::v1::TableIds>& tables,
    bool stored_rows) const {
  int64_t ids = 0, bytes = 0;
  for (const dlrm::v1::TableIds& t : tables) {
    const embedding::TableConfig* config = nullptr;
    DLRM_RETURN_IF_ERROR(CheckTable(t.table(), &config));
    const int64_t n = static_cast<int64_t>(t.ids().size() / sizeof(int64_t));
    ids += n;
    // Lookup answers fp32 rows at most; ReadRows stored rows, weights and optimizer state.
    bytes += n * 4 * (stored_rows ? store_->row_floats(t.table()) : config->dim);
  }
  DLRM_RETURN_IF_ERROR(CheckAnswerSize(method, ids, bytes));
  for (const dlrm::v1::TableIds& t : tables) {
    const embedding::TableConfig* config = nullptr;
    DLRM_RETURN_IF_ERROR(CheckIds(t.table(), t.ids(), &config));
  }
  return absl::OkStatus();
}

absl::Status PsJob::CheckPayloads(int table, const std::string& ids_bytes,
                                  const std::string& payload, bool full_rows,
                                  std::vector<bool>* seen_tables) const {
  const embedding::TableConfig* config = nullptr;
  DLRM_RETURN_IF_ERROR(CheckIds(table, ids_bytes, &config));
  const char* what = full_rows ? "row write" : "push";
  if ((*seen_tables)[table]) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " appears twice in one ", what));
  }
  (*seen_tables)[table] = true;
  const int64_t n = static_cast<int64_t>(ids_bytes.size() / sizeof(int64_t));
  const int width = full_rows ? store_->row_floats(table) : config->dim;
  const int value_bytes = full_rows ? 4 : embedding::DtypeBytes(config->dtype);
  const int64_t expected = n * width * static_cast<int64_t>(value_bytes);
  if (static_cast<int64_t>(payload.size()) != expected) {
    return absl::InvalidArgumentError(
        full_rows
            ? absl::StrCat("table ", table, ": rows payload is ", payload.size(),
                           " bytes, expected ", expected, " (", n, " ids x row_floats ", width,
                           " x 4)")
            : absl::StrCat("table ", table, ": gradient payload is ", payload.size(),
                           " bytes, expected ", expected, " (", n, " ids x dim ", width, " x ",
                           value_bytes, " bytes of ", embedding::RowDtypeName(config->dtype), ")"));
  }
  // One inf or NaN gradient or row value would turn its row, and then every loss that reads it,
  // into NaN for the rest of the job: refused with the whole call, before any row changes.
  const int64_t bad = embedding::FirstNonFinite(
      full_rows ? embedding::RowDtype::kFp32 : config->dtype, payload.data(), n * width);
  if (bad >= 0) {
    int64_t id;
    std::memcpy(&id, ids_bytes.data() + (bad / width) * sizeof(int64_t), sizeof(id));
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": the ", full_rows ? "row" : "gradient", " of id ", id,
                     " is inf or NaN (value ", bad % width, " of its ", width, "): the ", what,
                     " is refused and no row of it is changed"));
  }
  absl::flat_hash_set<int64_t> unique;
  unique.reserve(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t id;
    std::memcpy(&id, ids_bytes.data() + j * sizeof(int64_t), sizeof(id));
    if (!unique.insert(id).second) {
      return absl::InvalidArgumentError(
          full_rows ? absl::StrCat("table ", table, ": id ", id, " repeated in one row write")
                    : absl::StrCat("table ", table, ": id ", id,
                                   " repeated in one push (sum its gradients on the worker "
                                   "first)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PsJob::ValidatePush(const dlrm::v1::PushGradientsRequest& request) const {
  DLRM_RETURN_IF_ERROR(CheckEpoch(request.job_epoch()));
  DLRM_RETURN_IF_ERROR(CheckRank(request.step(), request.worker_rank()));
  if (request.has_learning_rate()) {
    DLRM_RETURN_IF_ERROR(CheckOptimizerValue(absl::StrCat("PushGradients of job ", job_id(), ": "),
                                             "learning_rate", request.learning_rate(), true));
  }
  std::vector<bool> seen(tables_.size(), false);
  for (const dlrm::v1::TableGradients& t : request.tables()) {
    DLRM_RETURN_IF_ERROR(CheckPayloads(t.table(), t.ids(), t.grads(), /*full_rows=*/false, &seen));
  }
  return absl::OkStatus();
}

absl::Status PsJob::ValidateReadRows(const dlrm::v1::ReadRowsRequest& request) const {
  DLRM_RETURN_IF_ERROR(CheckEpoch(request.job_epoch()));
  return CheckRowRequest("ReadRows", request.tables(), /*stored_rows=*/true);
}

absl::Status PsJob::ValidateWriteRows(const dlrm::v1::WriteRowsRequest& request) const {
  DLRM_RETURN_IF_ERROR(CheckEpoch(request.job_epoch()));
  std::vector<bool> seen(tables_.size(), false);
  for (const dlrm::v1::TableIdsRows& t : request.tables()) {
    DLRM_RETURN_IF_ERROR(CheckPayloads(t.table(), t.ids(), t.rows(), /*full_rows=*/true, &seen));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::server
