#include "server/ps_job.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"

namespace dlrm::server {
namespace {

embedding::SparseOptimizerOptions OptimizerFromProto(const dlrm::v1::SparseOptimizerConfig& c,
                                                     embedding::SparseOptimizerType type) {
  embedding::SparseOptimizerOptions o;
  o.type = type;
  o.learning_rate = c.learning_rate();
  o.epsilon = c.epsilon();
  o.beta1 = c.beta1();
  o.beta2 = c.beta2();
  o.initial_accumulator = c.initial_accumulator();
  return o;
}

// Copies packed little-endian int64 ids out of a bytes field (its buffer need not be aligned).
void UnpackIds(const std::string& bytes, std::vector<int64_t>* ids) {
  ids->resize(bytes.size() / sizeof(int64_t));
  if (!ids->empty()) std::memcpy(ids->data(), bytes.data(), ids->size() * sizeof(int64_t));
}

bool IsFloatAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % alignof(float) == 0; }

// The packed floats of a bytes field: the field itself when it is aligned for float (the usual
// case, no copy), else a copy in *scratch.
const float* FloatsOf(const std::string& bytes, std::vector<float>* scratch) {
  if (IsFloatAligned(bytes.data())) return reinterpret_cast<const float*>(bytes.data());
  scratch->resize(bytes.size() / sizeof(float));
  std::memcpy(scratch->data(), bytes.data(), scratch->size() * sizeof(float));
  return scratch->data();
}

// The packed ids of a bytes field as a span: over the field itself when it is aligned for
// int64 (the usual case, no copy), else over a copy in *scratch.
absl::Span<const int64_t> IdSpan(const std::string& bytes, std::vector<int64_t>* scratch) {
  const size_t n = bytes.size() / sizeof(int64_t);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(int64_t) == 0) {
    return absl::MakeConstSpan(reinterpret_cast<const int64_t*>(bytes.data()), n);
  }
  UnpackIds(bytes, scratch);
  return *scratch;
}

}  // namespace

PushDedupe::PushDedupe(int num_workers) : ranks_(static_cast<size_t>(std::max(1, num_workers))) {}

absl::StatusOr<PushDedupe::Claim> PushDedupe::Begin(int64_t epoch, int rank, uint64_t sequence) {
  const std::pair<int, uint64_t> key(rank, sequence);
  absl::MutexLock lock(&mu_);
  // A copy of a push still being applied waits for it: its answer must mean "applied".
  while (applying_.contains(key)) applied_.Wait(&mu_);
  if (epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat("push ", sequence, " of worker ", rank,
                                                      " is from epoch ", epoch, ", after epoch ",
                                                      epoch_));
  }
  if (epoch > epoch_) {
    epoch_ = epoch;
    for (RankWindow& r : ranks_) r = RankWindow();
    partly_applied_.clear();
  }
  if (partly_applied_.contains(key)) {
    return absl::AbortedError(absl::StrCat("push ", sequence, " of worker ", rank,
                                           " failed part way on this parameter server: it can "
                                           "be neither applied again nor answered OK"));
  }
  RankWindow& r = ranks_[rank];
  if (r.bits.empty()) r.bits.assign(kWindow / 64, 0);
  auto word = [&r](uint64_t s) -> uint64_t& { return r.bits[(s % kWindow) / 64]; };
  auto mask = [](uint64_t s) { return uint64_t{1} << (s % 64); };
  if (sequence > r.high) {
    // The bits of the numbers up to this one held the window's far end: clear them.
    if (sequence - r.high >= kWindow) {
      std::fill(r.bits.begin(), r.bits.end(), 0);
    } else {
      for (uint64_t s = r.high + 1; s < sequence; ++s) word(s) &= ~mask(s);
    }
    r.high = sequence;
  } else if (r.high - sequence >= kWindow) {
    return absl::FailedPreconditionError(
        absl::StrCat("push ", sequence, " of worker ", rank, " is older than the last ", kWindow,
                     " pushes remembered (the newest is ", r.high,
                     "): it cannot be told from a retry of a push applied already"));
  } else if (word(sequence) & mask(sequence)) {
    return Claim::kDuplicate;
  }
  word(sequence) |= mask(sequence);
  applying_.insert(key);
  return Claim::kApply;
}

void PushDedupe::End(int64_t epoch, int rank, uint64_t sequence, Outcome outcome) {
  absl::MutexLock lock(&mu_);
  applying_.erase({rank, sequence});
  applied_.SignalAll();
  if (outcome == Outcome::kApplied || epoch != epoch_) return;
  RankWindow& r = ranks_[rank];
  if (r.high - sequence >= kWindow) return;
  if (outcome == Outcome::kNotApplied) {
    r.bits[(sequence % kWindow) / 64] &= ~(uint64_t{1} << (sequence % 64));
    return;
  }
  // Forget the ones that left their window (a copy of those is refused as too old anyway).
  absl::erase_if(partly_applied_, [this](const std::pair<int, uint64_t>& p) {
    return ranks_[p.first].high - p.second >= kWindow;
  });
  partly_applied_.insert({rank, sequence});
}

PsJob::PsJob(const PsJobOptions& options, std::string path)
    : spec_(options.spec),
      path_(std::move(path)),
      snapshots_path_(absl::StrCat(path_, "-snapshots")),
      memory_budget_bytes_(options.memory_budget_bytes),
      timers_(options.timers),
      push_dedupe_(options.spec.num_workers()),
      epoch_(options.spec.job_epoch()),
      gate_(
          StepGate::Create(options.spec.num_workers(), options.spec.staleness(), options.timers)) {
  for (const dlrm::v1::TableDef& t : spec_.tables()) {
    // Validated by ValidateLoadRequest before a PsJob is made.
    const embedding::RowDtype dtype =
        t.dtype().empty() ? embedding::RowDtype::kFp32 : *embedding::ParseRowDtype(t.dtype());
    tables_.push_back({t.name().empty() ? absl::StrCat("table_", t.table()) : t.name(), t.rows(),
                       t.dim(), dtype});
  }
}

PsJob::~PsJob() {
  JoinPreparer();
  std::shared_ptr<StepGate> gate = this->gate();
  gate->Close(absl::AbortedError(absl::StrCat("job ", job_id(), " was unloaded")));
}

std::string PsJob::StorePath(const std::string& data_dir, const std::string& job_id, int shard) {
  return (std::filesystem::path(data_dir) / job_id / absl::StrCat("shard-", shard)).string();
}

absl::StatusOr<std::unique_ptr<PsJob>> PsJob::Create(const PsJobOptions& options) {
  DLRM_RETURN_IF_ERROR(ValidateLoadRequest(options.spec));
  if (options.data_dir.empty()) return absl::InvalidArgumentError("PsJob: empty data_dir");
  if (options.timers == nullptr) return absl::InvalidArgumentError("PsJob: no timer queue");
  const dlrm::v1::LoadJobRequest& spec = options.spec;
  const std::filesystem::path path = StorePath(options.data_dir, spec.job_id(), spec.shard_index());
  std::unique_ptr<PsJob> job(new PsJob(options, path.string()));
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (!ec) std::filesystem::remove_all(job->snapshots_path_, ec);
  if (!ec) std::filesystem::create_directories(path.parent_path(), ec);
  // A read-only or full disk is no passing fault (FileError: never UNAVAILABLE, which workers
  // would take for a lost server and recover from, in vain).
  if (ec) return FileError(ec, absl::StrCat("cannot prepare ", path.string()));
  auto type = embedding::ParseSparseOptimizerType(spec.optimizer().type());
  embedding::TieredStoreOptions store_options;
  store_options.tables = job->tables_;
  store_options.optimizer = OptimizerFromProto(spec.optimizer(), *type);
  store_options.seed = spec.seed();
  store_options.memory_budget_bytes = options.memory_budget_bytes;
  store_options.rocksdb.path = job->path_;
  store_options.rocksdb.disable_wal = !options.rocksdb_wal;
  DLRM_ASSIGN_OR_RETURN(job->store_, embedding::TieredStore::Create(store_options));
  if (spec.periodic_checkpoints()) {
    PsJob* j = job.get();
    absl::MutexLock lock(&j->preparer_mu_);
    j->preparer_ = std::thread([j] {
      auto snapshot = std::make_shared<embedding::StoreSnapshot>();
      const absl::Status prepared = j->store_->PrepareSnapshot(snapshot.get());
      if (!prepared.ok()) {
        // The first cut allocates the memory itself, as without periodic checkpoints.
        DLRM_LOG(WARNING) << "job " << j->job_id() << " shard " << j->shard_index()
                          << ": the first snapshot's memory was not prepared: "
                          << prepared.message();
        return;
      }
      absl::MutexLock snapshots(&j->snapshots_mu_);
      if (j->kept_snapshot_ == nullptr) j->kept_snapshot_ = std::move(snapshot);
    });
  }
  return job;
}

std::string PsJob::SnapshotPath(int64_t epoch, int64_t step) const {
  return (std::filesystem::path(snapshots_path_) / absl::StrCat("epoch-", epoch, "-step-", step))
      .string();
}

int PsJob::RemoveSnapshotsBefore(int64_t epoch) const {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(snapshots_path_, ec)) {
    // "epoch-<e>-step-<s>"
    const std::string name = entry.path().filename().string();
    int64_t e = 0;
    const size_t dash = name.find("-step-");
    if (!absl::StartsWith(name, "epoch-") || dash == std::string::npos ||
        !absl::SimpleAtoi(name.substr(6, dash - 6), &e) || e >= epoch) {
      continue;
    }
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
    if (rm) {
      DLRM_LOG(WARNING) << "job " << job_id() << " shard " << shard_index()
                        << ": cannot remove the snapshot " << entry.path().string() << " of epoch "
                        << e << ": " << rm.message();
    } else {
      ++removed;
    }
  }
  return removed;
}

int64_t PsJob::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::shared_ptr<StepGate> PsJob::gate() const {
  absl::MutexLock lock(&mu_);
  return gate_;
}

absl::StatusOr<std::shared_ptr<StepGate>> PsJob::GateOf(int64_t epoch) const {
  absl::MutexLock lock(&mu_);
  if (epoch == epoch_) return gate_;
  return EpochError(epoch, epoch_);
}

void PsJob::CloseGates(const absl::Status& status) {
  std::shared_ptr<StepGate> gate;
  {
    absl::MutexLock lock(&mu_);
    if (gates_closed_.ok()) gates_closed_ = status;
    gate = gate_;
  }
  gate->Close(status);
}

bool PsJob::SameParameters(const dlrm::v1::LoadJobRequest& request) const {
  dlrm::v1::LoadJobRequest a = spec_;
  dlrm::v1::LoadJobRequest b = request;
  // The epoch, and whether a call restarts the job, are no parameters of the job.
  a.set_job_epoch(0);
  b.set_job_epoch(0);
  a.set_restart(false);
  b.set_restart(false);
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

void PsJob::AdvanceEpoch(int64_t epoch) {
  std::shared_ptr<StepGate> old, fresh;
  absl::Status closed;
  {
    absl::MutexLock lock(&mu_);
    if (epoch <= epoch_) return;
    epoch_ = epoch;
    old = std::move(gate_);
    gate_ = fresh = StepGate::Create(spec_.num_workers(), spec_.staleness(), timers_);
    closed = gates_closed_;
  }
  if (!closed.ok()) fresh->Close(closed);
  old->Close(absl::FailedPreconditionError(
      absl::StrCat("job ", job_id(), " moved to epoch ", epoch, " while this lookup was waiting")));
}

absl::Status PsJob::ReadRows(const dlrm::v1::ReadRowsRequest& request,
                             dlrm::v1::ReadRowsResponse* response) {
  std::vector<int64_t> ids;
  std::vector<float> aligned;
  response->mutable_tables()->Reserve(request.tables_size());
  for (const dlrm::v1::TableIds& t : request.tables()) {
    UnpackIds(t.ids(), &ids);
    const int width = store_->row_floats(t.table());
    dlrm::v1::TableStoredRows* out = response->add_tables();
    out->set_table(t.table());
    out->set_row_floats(width);
    std::string* bytes = out->mutable_rows();
    bytes->resize(ids.size() * width * sizeof(float));
    if (ids.empty()) continue;
    if (IsFloatAligned(bytes->data())) {
      DLRM_RETURN_IF_ERROR(
          store_->ReadRows(t.table(), ids, reinterpret_cast<float*>(bytes->data())));
    } else {
      aligned.resize(bytes->size() / sizeof(float));
      DLRM_RETURN_IF_ERROR(store_->ReadRows(t.table(), ids, aligned.data()));
      std::memcpy(bytes->data(), aligned.data(), bytes->size());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsJob::WriteRows(const dlrm::v1::WriteRowsRequest& request) {
  int64_t rows = 0;
  std::vector<int64_t> ids;
  std::vector<float> aligned;
  for (const dlrm::v1::TableIdsRows& t : request.tables()) {
    UnpackIds(t.ids(), &ids);
    if (ids.empty()) continue;
    DLRM_RETURN_IF_ERROR(store_->WriteRows(t.table(), ids, FloatsOf(t.rows(), &aligned)));
    rows += static_cast<int64_t>(ids.size());
  }
  return rows;
}

void PsJob::PrepareLookup(const dlrm::v1::LookupRequest& request,
                          proto::LookupAnswer* answer) const {
  std::vector<proto::LookupAnswer::Table> layout(request.tables_size());
  for (int i = 0; i < request.tables_size(); ++i) {
    const dlrm::v1::TableIds& t = request.tables(i);
    layout[i] = {t.table(), tables_[t.table()].dim,
                 static_cast<int64_t>(t.ids().size() / sizeof(int64_t)), tables_[t.table()].dtype};
  }
  answer->Reset(layout);
}

absl::StatusOr<int64_t> PsJob::LookupTables(const dlrm::v1::LookupRequest& request, int begin,
                                            int end, proto::LookupAnswer* answer) {
  int64_t rows = 0;
  std::vector<int64_t> scratch;
  for (int i = begin; i < end; ++i) {
    const dlrm::v1::TableIds& t = request.tables(i);
    const absl::Span<const int64_t> ids = IdSpan(t.ids(), &scratch);
    DLRM_RETURN_IF_ERROR(store_->LookupEncoded(t.table(), ids, answer->rows(i)));
    rows += static_cast<int64_t>(ids.size());
  }
  return rows;
}

absl::StatusOr<int> PsJob::LookupTablesResident(const dlrm::v1::LookupRequest& request, int begin,
                                                int end, proto::LookupAnswer* answer,
                                                int64_t* rows) {
  std::vector<int64_t> scratch;
  for (int i = begin; i < end; ++i) {
    const dlrm::v1::TableIds& t = request.tables(i);
    const absl::Span<const int64_t> ids = IdSpan(t.ids(), &scratch);
    bool served;
    DLRM_ASSIGN_OR_RETURN(served,
                          store_->TryLookupResidentEncoded(t.table(), ids, answer->rows(i)));
    if (!served) return i;
    *rows += static_cast<int64_t>(ids.size());
  }
  return end;
}

absl::StatusOr<int64_t> PsJob::Push(const dlrm::v1::PushGradientsRequest& request,
                                    bool* duplicate) {
  if (duplicate != nullptr) *duplicate = false;
  const int rank = request.worker_rank();
  const bool numbered = request.sequence() != 0 && rank >= 0 && rank < spec_.num_workers();
  if (numbered) {
    absl::StatusOr<PushDedupe::Claim> claim =
        push_dedupe_.Begin(request.job_epoch(), rank, request.sequence());
    if (!claim.ok()) return Annotate(claim.status(), absl::StrCat("job ", job_id()));
    if (*claim == PushDedupe::Claim::kDuplicate) {
      if (duplicate != nullptr) *duplicate = true;
      return 0;
    }
  }
  int64_t rows = 0;
  std::vector<int64_t> ids;
  std::vector<float> aligned;
  absl::Status status;
  for (const dlrm::v1::TableGradients& t : request.tables()) {
    UnpackIds(t.ids(), &ids);
    if (ids.empty()) continue;
    const embedding::RowDtype dtype = tables_[t.table()].dtype;
    const float* grads = nullptr;
    if (dtype == embedding::RowDtype::kFp32) {
      grads = FloatsOf(t.grads(), &aligned);
    } else {
      aligned.resize(ids.size() * tables_[t.table()].dim);
      embedding::DecodeValues(dtype, t.grads().data(), static_cast<int64_t>(aligned.size()),
                              aligned.data());
      grads = aligned.data();
    }
    status = store_->ApplyGradients(
        t.table(), ids, grads,
        request.has_learning_rate() ? request.learning_rate() : embedding::kTableLearningRate);
    if (!status.ok()) break;
    rows += static_cast<int64_t>(ids.size());
  }
  if (status.ok() && request.step() >= 0 && !request.more_chunks()) {
    // Validated at the push's epoch: after a move to a newer one (a recovery) its step is no
    // step of the new epoch's workers.
    absl::StatusOr<std::shared_ptr<StepGate>> gate = GateOf(request.job_epoch());
    if (gate.ok()) (*gate)->Complete(rank, request.step());
  }
  // A push that failed before any row was applied may be applied by a retry; one that failed
  // part way may not (its rows would be applied twice), nor be answered OK.
  if (numbered) {
    push_dedupe_.End(request.job_epoch(), rank, request.sequence(),
                     status.ok() ? PushDedupe::Outcome::kApplied
                     : rows == 0 ? PushDedupe::Outcome::kNotApplied
                                 : PushDedupe::Outcome::kPartly);
  }
  if (!status.ok()) return status;
  return rows;
}

void PsJob::RecordSnapshot(int64_t step, std::vector<std::vector<int64_t>> changed) {
  absl::MutexLock lock(&snapshots_mu_);
  auto [it, inserted] = changed_by_snapshot_.try_emplace(step, std::move(changed));
  if (inserted) return;
  // A snapshot of this step was taken before (a rollback replays it): the rows of both count.
  for (size_t t = 0; t < changed.size() && t < it->second.size(); ++t) {
    std::vector<int64_t> merged;
    std::set_union(it->second[t].begin(), it->second[t].end(), changed[t].begin(), changed[t].end(),
                   std::back_inserter(merged));
    it->second[t] = std::move(merged);
  }
}

std::optional<std::vector<std::vector<int64_t>>> PsJob::ChangedSince(int64_t parent,
                                                                     int64_t step) const {
  absl::MutexLock lock(&snapshots_mu_);
  if (parent >= step || !changed_by_snapshot_.contains(parent)) return std::nullopt;
  std::vector<std::vector<int64_t>> rows(store_->tables().size());
  for (auto it = changed_by_snapshot_.upper_bound(parent);
       it != changed_by_snapshot_.end() && it->first <= step; ++it) {
    for (size_t t = 0; t < rows.size() && t < it->second.size(); ++t) {
      std::vector<int64_t> merged;
      std::set_union(rows[t].begin(), rows[t].end(), it->second[t].begin(), it->second[t].end(),
                     std::back_inserter(merged));
      rows[t] = std::move(merged);
    }
  }
  return rows;
}

void PsJob::KeepStoreSnapshot(int64_t step, std::shared_ptr<embedding::StoreSnapshot> snapshot) {
  absl::MutexLock lock(&snapshots_mu_);
  kept_snapshot_step_ = step;
  kept_snapshot_ = std::move(snapshot);
}

std::shared_ptr<const embedding::StoreSnapshot> PsJob::StoreSnapshotOf(int64_t step) const {
  absl::MutexLock lock(&snapshots_mu_);
  return kept_snapshot_step_ == step ? kept_snapshot_ : nullptr;
}

void PsJob::ForgetStoreSnapshot(int64_t step) {
  absl::MutexLock lock(&snapshots_mu_);
  // Kept (not freed) for the next SNAPSHOT to reuse; no WRITE finds it any more.
  if (kept_snapshot_step_ == step) kept_snapshot_step_ = -1;
}

void PsJob::JoinPreparer() {
  absl::MutexLock lock(&preparer_mu_);
  if (preparer_.joinable()) preparer_.join();
}

std::shared_ptr<embedding::StoreSnapshot> PsJob::RecycledStoreSnapshot() {
  JoinPreparer();
  absl::MutexLock lock(&snapshots_mu_);
  std::shared_ptr<embedding::StoreSnapshot> last = std::move(kept_snapshot_);
  kept_snapshot_step_ = -1;
  // A WRITE still reading the last one (an older epoch's, stopping) keeps it until it is done.
  if (last != nullptr && last.use_count() == 1) return last;
  return std::make_shared<embedding::StoreSnapshot>();
}

void PsJob::ForgetBefore(int64_t step) {
  absl::MutexLock lock(&snapshots_mu_);
  changed_by_snapshot_.erase(changed_by_snapshot_.begin(), changed_by_snapshot_.lower_bound(step));
}

}  // namespace dlrm::server
