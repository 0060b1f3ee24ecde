// The job half of CoordinatorState: submission, scheduling onto workers and PS, progress and
// the state machine.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/criteo_shape.h"
#include "common/job_spec.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status.h"
#include "server/coordinator_state.h"

namespace dlrm::server {

using dlrm::v1::Job;
using dlrm::v1::Member;

namespace {

// Creation order of "job-<n>" ids.
int64_t JobSeq(const std::string& id) {
  int64_t n = 0;
  if (id.size() > 4 && absl::SimpleAtoi(id.substr(4), &n)) return n;
  return 0;
}

std::vector<const Job*> SortedJobs(const std::map<std::string, Job>& jobs) {
  std::vector<const Job*> sorted;
  for (const auto& [id, job] : jobs) sorted.push_back(&job);
  std::sort(sorted.begin(), sorted.end(),
            [](const Job* a, const Job* b) { return JobSeq(a->job_id()) < JobSeq(b->job_id()); });
  return sorted;
}

// The stored job `job_id` of `jobs` (const or not), or NOT_FOUND naming it.
template <typename Jobs>
auto FindJob(Jobs& jobs, const std::string& job_id) -> absl::StatusOr<decltype(&jobs.at(job_id))> {
  auto it = jobs.find(job_id);
  if (it == jobs.end())
    return absl::NotFoundError(absl::StrCat("job '", Shown(job_id), "' not found"));
  return &it->second;
}

// "job-1, job-2", at most five then "and N more": a message stays short on a big cluster.
std::string LabelList(const std::vector<std::string>& labels) {
  constexpr size_t kLimit = 5;
  if (labels.size() <= kLimit) return absl::StrJoin(labels, ", ");
  std::vector<std::string> head(labels.begin(), labels.begin() + kLimit);
  return absl::StrCat(absl::StrJoin(head, ", "), " and ", labels.size() - kLimit, " more");
}

std::string WithLabels(std::string counted, const std::vector<std::string>& labels) {
  if (labels.empty()) return counted;
  return absl::StrCat(counted, " (", LabelList(labels), ")");
}

// Keeps the newest kMaxHistory state changes of a job.
constexpr int kMaxHistory = 100;

void RecordState(Job* job, absl::Time now, const std::string& message) {
  dlrm::v1::JobStateChange* change = job->add_history();
  change->set_state(job->state());
  change->set_time_ms(absl::ToUnixMillis(now));
  change->set_message(message);
  if (job->state() == dlrm::v1::JOB_STATE_RUNNING) change->set_job_epoch(job->job_epoch());
  if (job->history_size() > kMaxHistory) {
    job->mutable_history()->DeleteSubrange(0, job->history_size() - kMaxHistory);
  }
}

// `path` (a spec's checkpoint.dir) as the folder it names: lexically normal, "ck/" as "ck".
std::string CheckpointFolder(const std::string& path) {
  if (path.empty()) return "";
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  return (p.has_filename() ? p : p.parent_path()).string();
}

double MetricOr(const google::protobuf::Map<std::string, double>& m, const char* key,
                double fallback) {
  auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

}  // namespace

const std::string& CoordinatorState::CheckpointFolderLocked(const std::string& id, const Job& job) {
  auto [it, inserted] = checkpoint_folders_.try_emplace(id);
  if (inserted) {
    absl::StatusOr<common::JobSpec> spec = common::ParseJobSpec(job.spec_yaml(), id);
    if (spec.ok()) it->second = CheckpointFolder(spec->checkpoint.dir);
  }
  return it->second;
}

absl::StatusOr<Job> CoordinatorState::Submit(const dlrm::v1::SubmitJobRequest& request,
                                             absl::Time now) {
  if (request.spec_yaml().empty()) return absl::InvalidArgumentError("job spec_yaml is empty");
  absl::StatusOr<common::JobSpec> spec = common::ParseJobSpec(request.spec_yaml(), "<submitted>");
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", spec.status().message()));
  }
  // Every worker reads Criteo input (worker/job_input.cc): a model of another shape would be
  // queued only to fail on its workers.
  if (absl::Status fits = common::CheckModelFitsCriteoInput(*spec); !fits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", fits.message()));
  }
  if (request.workers() < 0 || request.workers() > options_.max_job_members) {
    return absl::InvalidArgumentError(absl::StrCat("workers ", request.workers(),
                                                   " must be in [0, ", options_.max_job_members,
                                                   "] (0 means 1)"));
  }
  if (absl::StatusOr<int> share = common::WorkerBatchSize(*spec, std::max(1, request.workers()));
      !share.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", share.status().message()));
  }
  if (request.ps() < 0 || request.ps() > options_.max_job_members) {
    return absl::InvalidArgumentError(absl::StrCat("ps ", request.ps(), " must be in [0, ",
                                                   options_.max_job_members,
                                                   "] (0 means every PS alive at start)"));
  }
  Changes changes;
  Job result;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    // Two live jobs writing one checkpoint.dir would take each other's checkpoints for their
    // own (a recovery, keep_last, an incremental's parent): the second is refused while the first
    // lives (a retried submit is the usual way to get there).
    if (!spec->checkpoint.dir.empty()) {
      const std::string dir = CheckpointFolder(spec->checkpoint.dir);
      for (const auto& [id, live] : jobs_) {
        if (IsTerminal(live.state())) continue;
        if (CheckpointFolderLocked(id, live) == dir) {
          return absl::FailedPreconditionError(
              absl::StrCat("job spec: checkpoint.dir ", spec->checkpoint.dir, " is the folder of ",
                           id, " (", JobStateName(live.state()),
                           "); give this job a folder of its own, or "
                           "cancel ",
                           id, " first"));
        }
      }
    }
    Job job;
    job.set_job_id(absl::StrCat("job-", next_job_seq_++));
    job.set_name(spec->name);
    job.set_state(dlrm::v1::JOB_STATE_PENDING);
    job.set_spec_yaml(request.spec_yaml());
    job.set_requested_workers(request.workers() == 0 ? 1 : request.workers());
    job.set_requested_ps(request.ps());
    job.set_max_recoveries(spec->max_recoveries);
    job.set_created_ms(absl::ToUnixMillis(now));
    RecordState(&job, now,
                absl::StrCat("queued for ", job.requested_workers(), " worker(s) and ",
                             request.ps() == 0 ? std::string("every PS alive at start")
                                               : absl::StrCat(request.ps(), " PS")));
    changes.counters = true;
    Job& stored = jobs_[job.job_id()] = std::move(job);
    TouchJob(&stored, &changes);
    DLRM_LOG(INFO) << "submitted " << stored.job_id() << " (" << stored.name()
                   << "): " << stored.requested_workers() << " workers";
    TryStartJobs(now, &changes);
    result = stored;
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<Job> CoordinatorState::GetJob(const std::string& job_id) const {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  absl::MutexLock lock(&mu_);
  DLRM_ASSIGN_OR_RETURN(const Job* job, FindJob(jobs_, job_id));
  return *job;
}

absl::StatusOr<std::vector<Job>> CoordinatorState::ListJobsPage(
    dlrm::v1::JobState filter, const std::string& page_token, int64_t max_jobs, int64_t max_bytes,
    std::string* next_page_token) const {
  // The token is the id of the page's last job: the next page starts after it in creation
  // order, whatever was submitted or changed state in between.
  int64_t after = 0;
  if (!page_token.empty()) {
    after = JobSeq(page_token);
    if (after <= 0 || page_token != absl::StrCat("job-", after)) {
      return absl::InvalidArgumentError(absl::StrCat("ListJobs: page_token '",
                                                     page_token.substr(0, common::kMaxNameBytes),
                                                     "' is not one a ListJobs answer gave"));
    }
  }
  next_page_token->clear();
  absl::MutexLock lock(&mu_);
  std::vector<Job> jobs;
  int64_t bytes = 0;
  for (const Job* job : SortedJobs(jobs_)) {
    if (JobSeq(job->job_id()) <= after) continue;
    if (filter != dlrm::v1::JOB_STATE_UNSPECIFIED && job->state() != filter) continue;
    Job listed = *job;
    listed.clear_spec_yaml();
    listed.clear_history();
    const int64_t size = static_cast<int64_t>(listed.ByteSizeLong());
    if (!jobs.empty() &&
        (static_cast<int64_t>(jobs.size()) >= max_jobs || bytes + size > max_bytes)) {
      *next_page_token = jobs.back().job_id();
      break;
    }
    bytes += size;
    jobs.push_back(std::move(listed));
  }
  return jobs;
}

std::vector<Job> CoordinatorState::ListJobs(dlrm::v1::JobState filter) const {
  std::string no_more;  // one page without limits holds every job
  return *ListJobsPage(filter, "", std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::max(), &no_more);
}

absl::StatusOr<Job> CoordinatorState::Cancel(const std::string& job_id, const std::string& reason,
                                             absl::Time now) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  Changes changes;
  Job result;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    DLRM_ASSIGN_OR_RETURN(Job * job, FindJob(jobs_, job_id));
    if (IsTerminal(job->state())) {
      // Cancelling twice, or a job that is over: say how it ended, not "illegal transition".
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has already ended ", JobStateName(job->state()),
                       job->message().empty() ? "" : absl::StrCat(" (", job->message(), ")"),
                       "; only a PENDING, RUNNING or RECOVERING job can be cancelled"));
    }
    DLRM_RETURN_IF_ERROR(FinishJob(
        job, dlrm::v1::JOB_STATE_CANCELLED,
        reason.empty() ? "cancelled" : absl::StrCat("cancelled: ", reason), now, &changes));
    TryStartJobs(now, &changes);
    result = *job;
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<Job> CoordinatorState::RequestCheckpoint(const std::string& job_id, absl::Time now) {
  (void)now;
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  Changes changes;
  Job result;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    DLRM_ASSIGN_OR_RETURN(Job * found, FindJob(jobs_, job_id));
    Job& job = *found;
    if (job.state() != dlrm::v1::JOB_STATE_RUNNING) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ",
                                                        JobStateName(job.state()),
                                                        "; only a RUNNING job takes a checkpoint"));
    }
    absl::StatusOr<common::JobSpec> spec = common::ParseJobSpec(job.spec_yaml(), job_id);
    if (!spec.ok() || spec->checkpoint.dir.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " takes no checkpoints: its spec has no checkpoint.dir"));
    }
    job.set_checkpoint_requests(job.checkpoint_requests() + 1);
    TouchJob(&job, &changes);
    result = job;
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<dlrm::v1::JobState> CoordinatorState::ReportProgress(
    const dlrm::v1::ReportProgressRequest& request, absl::Time now) {
  if (request.job_id().empty()) return absl::InvalidArgumentError("job_id is empty");
  if (request.step() < 0 || request.samples() < 0 || request.restored_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", request.job_id(), " rank ", request.rank(), ": step ", request.step(), ", samples ",
        request.samples(), " and restored_step ", request.restored_step(), " must be >= 0"));
  }
  Changes changes;
  dlrm::v1::JobState state;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    DLRM_ASSIGN_OR_RETURN(Job * found, FindJob(jobs_, request.job_id()));
    Job& job = *found;
    if (request.job_epoch() > 0 && request.job_epoch() != job.job_epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.job_id(), ": report from job epoch ", request.job_epoch(),
          request.job_epoch() < job.job_epoch() ? ", which a recovery replaced"
                                                : ", which the job never ran at",
          " (the job is at epoch ", job.job_epoch(), ", ", JobStateName(job.state()), ")"));
    }
    // Another rank's last report may come after rank 0's ended the job (both kept through a
    // coordinator restart and sent again): its samples still count.
    const bool late_final = job.state() == dlrm::v1::JOB_STATE_SUCCEEDED && request.done() &&
                            !request.failed() && request.rank() > 0 &&
                            request.job_epoch() == job.job_epoch();
    if (job.state() != dlrm::v1::JOB_STATE_RUNNING && !late_final) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.job_id(), " is ", JobStateName(job.state()),
                       "; progress is accepted only while RUNNING"));
    }
    if (request.rank() < 0 || request.rank() >= job.worker_ids_size()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is outside [0, ",
                                                     job.worker_ids_size(), ") for job ",
                                                     job.job_id()));
    }
    const std::string& holder = job.worker_ids(request.rank());
    if (!request.member_id().empty() && request.member_id() != holder) {
      return absl::FailedPreconditionError(absl::StrCat(
          "member ", MemberLabel(request.member_id()), " does not hold rank ", request.rank(),
          " of job ", job.job_id(), "; ", MemberLabel(holder), " does"));
    }
    if (late_final) {
      CountRankSamples(request, &job);
      TouchJob(&job, &changes);
    } else {
      // A failure report carries no progress: keep what the rank reported last.
      if (!request.failed()) UpdateProgress(request, now, &job);
      if (request.failed() && request.peer_unreachable()) {
        BeginRecovery(&job,
                      absl::StrCat("rank ", request.rank(), " (", MemberLabelInParens(holder),
                                   ") lost a peer: ", request.message()),
                      now, &changes);
      } else if (request.failed()) {
        status = FinishJob(&job, dlrm::v1::JOB_STATE_FAILED,
                           absl::StrCat("rank ", request.rank(), " (", MemberLabelInParens(holder),
                                        ") failed: ", request.message()),
                           now, &changes);
      } else if (request.done() && request.rank() == 0) {
        dlrm::v1::FinalMetrics* fm = job.mutable_final_metrics();
        const auto& m = request.metrics();
        if (m.contains("auc")) {  // absent: the job has no eval data
          fm->set_auc(MetricOr(m, "auc", 0));
          fm->set_logloss(MetricOr(m, "logloss", 0));
          fm->set_accuracy(MetricOr(m, "accuracy", 0));
        }
        fm->set_eval_samples(static_cast<int64_t>(MetricOr(m, "eval_samples", 0)));
        fm->set_samples_per_sec(MetricOr(m, "samples_per_sec", 0));
        fm->set_steps(
            static_cast<int64_t>(MetricOr(m, "steps", static_cast<double>(request.step()))));
        fm->set_samples(
            static_cast<int64_t>(MetricOr(m, "samples", static_cast<double>(job.total_samples()))));
        fm->set_train_seconds(MetricOr(m, "train_seconds", 0));
        status = FinishJob(&job, dlrm::v1::JOB_STATE_SUCCEEDED, request.message(), now, &changes);
      } else {
        TouchJob(&job, &changes);
      }
    }
    if (!status.ok()) return status;
    TryStartJobs(now, &changes);
    state = job.state();
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return state;
}

void CoordinatorState::CountRankSamples(const dlrm::v1::ReportProgressRequest& request, Job* job) {
  while (job->rank_samples_size() < job->worker_ids_size()) job->add_rank_samples(0);
  job->set_rank_samples(request.rank(), request.samples());
  int64_t total = 0;
  for (int64_t s : job->rank_samples()) total += s;
  job->set_total_samples(total);
}

void CoordinatorState::UpdateProgress(const dlrm::v1::ReportProgressRequest& request,
                                      absl::Time now, Job* job) {
  // Rank 0 of a recovery's run says where it rolled back to: kept once, in that recovery.
  if (request.rank() == 0 && request.has_restored_step() && job->recovery_history_size() > 0) {
    dlrm::v1::JobRecovery* r = job->mutable_recovery_history(job->recovery_history_size() - 1);
    if (!r->has_restored_step()) {
      r->set_restored_from(request.restored_from());
      r->set_restored_step(request.restored_step());
    }
  }
  dlrm::v1::JobProgress* progress = job->mutable_progress();
  progress->set_rank(request.rank());
  progress->set_step(request.step());
  progress->set_samples(request.samples());
  progress->set_loss(request.loss());
  // The last evaluation's figures stay until the next one: rank 0 evaluates, and the other ranks'
  // reports in between carry none (a fixed set of keys, so the map stays bounded).
  constexpr const char* kEvalKeys[] = {"eval_step", "eval_auc", "eval_logloss"};
  std::vector<std::pair<std::string, double>> kept;
  for (const char* key : kEvalKeys) {
    auto it = progress->metrics().find(key);
    if (it != progress->metrics().end() && !request.metrics().contains(key)) {
      kept.emplace_back(key, it->second);
    }
  }
  *progress->mutable_metrics() = request.metrics();
  for (const auto& [key, value] : kept) (*progress->mutable_metrics())[key] = value;
  progress->set_time_ms(absl::ToUnixMillis(now));
  CountRankSamples(request, job);
}

absl::Status CoordinatorState::FinishJob(Job* job, dlrm::v1::JobState to,
                                         const std::string& message, absl::Time now,
                                         Changes* changes) {
  DLRM_RETURN_IF_ERROR(CheckJobTransition(job->job_id(), job->state(), to));
  const bool was_running = job->state() == dlrm::v1::JOB_STATE_RUNNING;
  job->set_state(to);
  job->set_message(message);
  job->set_finished_ms(absl::ToUnixMillis(now));
  RecordState(job, now, message);
  if (was_running) {
    for (const std::string& id : job->worker_ids()) {
      auto it = members_.find(id);
      if (it == members_.end() || it->second.info.job_id() != job->job_id()) continue;
      it->second.info.clear_job_id();
      it->second.info.set_rank(-1);
      TouchMember(it->second.info, changes);
    }
    BumpEpoch(changes);
  }
  TouchJob(job, changes);
  DLRM_LOG(INFO) << "job " << job->job_id() << " -> " << JobStateName(to)
                 << (message.empty() ? "" : ": ") << message;
  return absl::OkStatus();
}

void CoordinatorState::BeginRecovery(Job* job, const std::string& reason, absl::Time now,
                                     Changes* changes) {
  if (job->recoveries() >= job->max_recoveries()) {
    std::string message = absl::StrCat(reason, "; no recovery left (", job->recoveries(),
                                       " of max_recoveries ", job->max_recoveries(), " used)");
    for (int i = 0; i < job->recovery_history_size(); ++i) {
      absl::StrAppend(&message, "; recovery ", i + 1, ": ", job->recovery_history(i).reason());
    }
    (void)FinishJob(job, dlrm::v1::JOB_STATE_FAILED, message, now, changes);
    return;
  }
  DLRM_CHECK(CheckJobTransition(job->job_id(), job->state(), dlrm::v1::JOB_STATE_RECOVERING).ok());
  for (const std::string& id : job->worker_ids()) {
    auto it = members_.find(id);
    if (it == members_.end() || it->second.info.job_id() != job->job_id()) continue;
    it->second.info.clear_job_id();
    it->second.info.set_rank(-1);
    TouchMember(it->second.info, changes);
  }
  BumpEpoch(changes);
  job->set_state(dlrm::v1::JOB_STATE_RECOVERING);
  job->set_recoveries(job->recoveries() + 1);
  dlrm::v1::JobRecovery* r = job->add_recovery_history();
  r->set_started_ms(absl::ToUnixMillis(now));
  r->set_reason(reason);
  r->set_step_at_loss(job->progress().step());
  job->set_message(absl::StrCat("recovering (", job->recoveries(), " of ", job->max_recoveries(),
                                "): ", reason));
  RecordState(job, now, reason);
  TouchJob(job, changes);
  CountRecovery();
  DLRM_LOG(WARNING) << "job " << job->job_id() << " -> RECOVERING: " << job->message();
}

void CoordinatorState::TryStartJobs(absl::Time now, Changes* changes) {
  // Recovering jobs first (they were running), then pending ones; each in submission order.
  std::vector<std::string> order;
  for (auto state : {dlrm::v1::JOB_STATE_RECOVERING, dlrm::v1::JOB_STATE_PENDING}) {
    for (const Job* job : SortedJobs(jobs_)) {
      if (job->state() == state) order.push_back(job->job_id());
    }
  }
  // FIFO: a job that cannot start holds back the ones behind it, so none starves. Each job that
  // waits says why in its message, so that `dlrmctl status` (and its -o json) can tell.
  // Called on every heartbeat while a job recovers: each job's message is made in one pass, the
  // cluster described once per kind of job (pending, or recovering since a loss).
  std::map<int64_t, std::string> cluster_has;  // by AliveSinceMs
  auto waiting_for = [&](const Job& job) {
    const int64_t since = AliveSinceMs(job);
    auto it = cluster_has.find(since);
    if (it == cluster_has.end()) it = cluster_has.emplace(since, ClusterHas(job)).first;
    return absl::StrCat(Needs(job), "; the cluster has ", it->second);
  };
  std::vector<std::string> ahead;  // the jobs from the first that could not start
  bool recovering_ahead = false;
  for (const std::string& id : order) {
    Job* job = &jobs_[id];
    if (ahead.empty()) {
      if (TryStart(job, now, changes)) continue;
      SetWaiting(job, waiting_for(*job), changes);
    } else {
      SetWaiting(job,
                 absl::StrCat(waiting_for(*job), "; queued behind ", LabelList(ahead),
                              recovering_ahead ? " (recovering jobs start again first, then jobs "
                                                 "in submission order)"
                                               : " (jobs start in submission order)"),
                 changes);
    }
    const bool recovering = job->state() == dlrm::v1::JOB_STATE_RECOVERING;
    recovering_ahead |= recovering;
    ahead.push_back(recovering ? absl::StrCat(id, " (RECOVERING)") : id);
  }
}

int64_t CoordinatorState::AliveSinceMs(const Job& job) const {
  if (job.state() != dlrm::v1::JOB_STATE_RECOVERING || job.recovery_history_size() == 0) return -1;
  return job.recovery_history(job.recovery_history_size() - 1).started_ms();
}

bool CoordinatorState::Usable(const Member& m, int64_t alive_since_ms) const {
  return m.state() == dlrm::v1::MEMBER_STATE_ALIVE && m.last_heartbeat_ms() > alive_since_ms &&
         !unheard_since_restore_.contains(m.member_id());
}

int CoordinatorState::PsCountFor(const Job& job) const {
  if (job.state() == dlrm::v1::JOB_STATE_RECOVERING) return job.ps_member_ids_size();
  return job.requested_ps() > 0 ? job.requested_ps() : AlivePsCount();
}

std::string CoordinatorState::Needs(const Job& job) const {
  const int ps_count = PsCountFor(job);
  return absl::StrCat("waiting for ", Count(job.requested_workers(), "idle worker", "idle workers"),
                      " and ",
                      ps_count > 0 ? Count(ps_count, "parameter server", "parameter servers")
                                   : std::string("at least 1 parameter server"));
}

std::string CoordinatorState::ClusterHas(const Job& job) const {
  const int64_t alive_since_ms = AliveSinceMs(job);
  int busy = 0;
  int unheard_workers = 0;
  std::vector<const MemberEntry*> idle_entries;
  for (const auto& [id, e] : members_) {
    if (e.info.role() != dlrm::v1::ROLE_WORKER || e.info.state() != dlrm::v1::MEMBER_STATE_ALIVE) {
      continue;
    }
    if (!e.info.job_id().empty()) {
      ++busy;
    } else if (Usable(e.info, alive_since_ms)) {
      idle_entries.push_back(&e);
    } else {
      ++unheard_workers;
    }
  }
  std::sort(idle_entries.begin(), idle_entries.end(),
            [](const MemberEntry* a, const MemberEntry* b) {
              return a->info.sequence() < b->info.sequence();
            });
  std::vector<std::string> idle;
  for (const MemberEntry* e : idle_entries) idle.push_back(MemberLabel(e->info.member_id()));
  std::vector<std::string> ps;
  int unheard_ps = 0;
  for (const std::string& id : ps_slots_) {
    if (id.empty()) continue;
    const Member& m = members_.at(id).info;
    if (Usable(m, alive_since_ms)) {
      ps.push_back(MemberLabel(id));
    } else if (m.state() == dlrm::v1::MEMBER_STATE_ALIVE) {
      ++unheard_ps;
    }
  }
  std::string has =
      WithLabels(Count(static_cast<int64_t>(idle.size()), "idle worker", "idle workers"), idle);
  if (busy > 0) absl::StrAppend(&has, ", ", Count(busy, "busy worker", "busy workers"));
  absl::StrAppend(
      &has, ", ",
      WithLabels(Count(static_cast<int64_t>(ps.size()), "parameter server", "parameter servers"),
                 ps));
  if (unheard_workers + unheard_ps > 0) {
    std::vector<std::string> unheard;
    if (unheard_workers > 0) unheard.push_back(Count(unheard_workers, "worker", "workers"));
    if (unheard_ps > 0) {
      unheard.push_back(Count(unheard_ps, "parameter server", "parameter servers"));
    }
    absl::StrAppend(
        &has, "; not heard from since ",
        job.state() == dlrm::v1::JOB_STATE_RECOVERING ? "the loss" : "the coordinator restarted",
        ": ", absl::StrJoin(unheard, " and "));
  }
  return has;
}

void CoordinatorState::SetWaiting(Job* job, const std::string& why, Changes* changes) {
  std::string message = why;
  if (job->state() == dlrm::v1::JOB_STATE_RECOVERING && job->recovery_history_size() > 0) {
    message = absl::StrCat("recovering (", job->recoveries(), " of ", job->max_recoveries(),
                           "): ", job->recovery_history(job->recovery_history_size() - 1).reason(),
                           "; ", why);
  }
  if (job->message() == message) return;
  job->set_message(std::move(message));
  TouchJob(job, changes);
}

bool CoordinatorState::TryStart(Job* job, absl::Time now, Changes* changes) {
  const bool recovering = job->state() == dlrm::v1::JOB_STATE_RECOVERING;
  const int64_t alive_since_ms = AliveSinceMs(*job);
  auto usable = [&](const Member& m) { return Usable(m, alive_since_ms); };
  std::vector<MemberEntry*> idle;
  for (auto& [id, e] : members_) {
    if (e.info.role() == dlrm::v1::ROLE_WORKER && e.info.job_id().empty() && usable(e.info)) {
      idle.push_back(&e);
    }
  }
  if (static_cast<int>(idle.size()) < job->requested_workers()) return false;
  // PS: the job's shard i is the i-th PS it is given, whatever slot that PS holds. A new job
  // takes P of the PS alive, lowest slots first (P = requested_ps, or every PS alive); a
  // recovering one as many as it had, among the usable ones. Slots may have holes: a PS that
  // replaces a dead one whose lease has not run out takes a higher slot, and the dead one's slot
  // stays free when its lease ends; neither kind of job waits for a hole to be filled.
  const int ps_count = PsCountFor(*job);
  if (ps_count == 0) return false;
  std::vector<const MemberEntry*> ps;
  for (const std::string& id : ps_slots_) {
    if (static_cast<int>(ps.size()) == ps_count) break;
    if (id.empty()) continue;
    const MemberEntry& e = members_.at(id);
    if (usable(e.info)) ps.push_back(&e);
  }
  if (static_cast<int>(ps.size()) < ps_count) return false;
  std::sort(idle.begin(), idle.end(), [](const MemberEntry* a, const MemberEntry* b) {
    return a->info.sequence() < b->info.sequence();
  });
  DLRM_CHECK(CheckJobTransition(job->job_id(), job->state(), dlrm::v1::JOB_STATE_RUNNING).ok());
  job->clear_worker_ids();
  job->clear_ps_member_ids();
  job->clear_ps_addresses();
  // A recovering job keeps its last reported progress until the ranks report again (from the
  // checkpoint they roll back to), so what `dlrmctl status` shows does not drop to zero.
  if (!recovering) job->clear_rank_samples();
  for (int rank = 0; rank < job->requested_workers(); ++rank) {
    Member& w = idle[rank]->info;
    w.set_job_id(job->job_id());
    w.set_rank(rank);
    TouchMember(w, changes);
    job->add_worker_ids(w.member_id());
    if (job->rank_samples_size() <= rank) job->add_rank_samples(0);
  }
  for (const MemberEntry* p : ps) {
    job->add_ps_member_ids(p->info.member_id());
    job->add_ps_addresses(p->info.address());
  }
  BumpEpoch(changes);
  job->set_state(dlrm::v1::JOB_STATE_RUNNING);
  job->set_job_epoch(epoch_);
  if (recovering) {
    dlrm::v1::JobRecovery* r = job->mutable_recovery_history(job->recovery_history_size() - 1);
    r->set_resumed_ms(absl::ToUnixMillis(now));
    r->set_job_epoch(epoch_);
    job->set_message(absl::StrCat("recovered (", job->recoveries(), " of ", job->max_recoveries(),
                                  "): ", r->reason()));
  } else {
    job->set_started_ms(absl::ToUnixMillis(now));
    job->clear_message();  // what it waited for
  }
  RecordState(
      job, now,
      absl::StrCat(recovering ? absl::StrCat("running again (recovery ", job->recoveries(), ")")
                              : std::string("started"),
                   " on workers ", MemberLabels(job->worker_ids()), "; PS ",
                   MemberLabels(job->ps_member_ids()), "; job epoch ", epoch_));
  TouchJob(job, changes);
  DLRM_LOG(INFO) << "job " << job->job_id() << (recovering ? " RUNNING again" : " RUNNING")
                 << " on " << job->worker_ids_size() << " workers and " << ps_count << " PS, epoch "
                 << epoch_;
  return true;
}

}  // namespace dlrm::server
