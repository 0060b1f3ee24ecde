// RunLocalCommand (client/local_cluster.h): `dlrm local` end to end, with its signal handling.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/coordinator_client.h"
#include "client/local_cluster.h"
#include "client/run_speed.h"
#include "client/termination_signals.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/paths.h"
#include "common/status.h"
#include "worker/checkpoint.h"
#include "worker/input/binary_format.h"
#include "worker/job_input.h"
#include "worker/progress.h"
#include "worker/run_report.h"
#include "worker/train_command.h"
#include "worker/train_report.h"

namespace dlrm::client {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

// Stops the cluster on SIGINT/SIGTERM; the blocked main flow then sees its calls fail and
// returns. WaitForSignal() parks the caller until then (--keep-running). exit_code() is 128 + the
// first signal (130 for Ctrl-C, 143 for SIGTERM), as README says of every dlrm command.
class SignalWatcher {
 public:
  explicit SignalWatcher(LocalCluster* cluster)
      : signals_([this, cluster](int sig) {
          std::fprintf(stderr, "\n%s: stopping the local cluster\n",
                       sig == SIGINT ? "interrupted" : "terminated");
          {
            absl::MutexLock lock(&mu_);
            if (!interrupted_) signal_ = sig;
            interrupted_ = true;
          }
          cluster->Stop();
        }) {}
  bool interrupted() const {
    absl::MutexLock lock(&mu_);
    return interrupted_;
  }
  int exit_code() const {
    absl::MutexLock lock(&mu_);
    return 128 + signal_;
  }
  void WaitForSignal() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&interrupted_));
  }

 private:
  mutable absl::Mutex mu_;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int signal_ ABSL_GUARDED_BY(mu_) = SIGINT;
  TerminationSignals signals_;  // last: its thread uses the members above
};

worker::TrainReport ReportFromJob(const dlrm::v1::Job& job) {
  const dlrm::v1::FinalMetrics& fm = job.final_metrics();
  worker::TrainReport r;
  r.auc = fm.auc();
  r.logloss = fm.logloss();
  r.accuracy = fm.accuracy();
  r.samples_per_sec = fm.samples_per_sec();
  r.steps = fm.steps();
  r.train_samples = fm.samples();
  r.train_seconds = fm.train_seconds();
  const auto& m = job.progress().metrics();
  if (auto it = m.find("eval_samples"); it != m.end()) {
    r.eval_samples = static_cast<int64_t>(it->second);
  }
  if (auto it = m.find("skipped_lines"); it != m.end()) {
    r.skipped_lines = static_cast<int64_t>(it->second);
  }
  if (auto it = m.find("ps_bytes_per_sample"); it != m.end()) r.ps_bytes_per_sample = it->second;
  if (auto it = m.find("hot_hit_rate"); it != m.end()) r.hot_hit_rate = it->second;
  if (auto it = m.find("hot_rows"); it != m.end()) r.hot_rows = static_cast<int64_t>(it->second);
  if (auto it = m.find("hot_migrations"); it != m.end()) {
    r.hot_migrations = static_cast<int64_t>(it->second);
  }
  if (auto it = m.find("target_auc"); it != m.end()) r.target_auc = it->second;
  if (auto it = m.find("reached_target_step"); it != m.end()) {
    r.reached_target_step = static_cast<int64_t>(it->second);
  }
  for (const auto& [key, value] : m) {
    if (worker::IsNetworkKey(key)) r.network[key] = value;
  }
  return r;
}

// The children's metrics endpoints, grouped as the dlrm-local job of
// deploy/prometheus/prometheus.yml lists them (a static_configs block to paste).
void PrintScrapeTargets(const LocalCluster& cluster) {
  if (cluster.metrics_targets().empty()) return;
  std::fprintf(stderr, "metrics: scrape targets (static_configs of a Prometheus job):\n");
  for (const char* component : {"coordinator", "ps", "worker"}) {
    std::vector<std::string> targets;
    for (const auto& [c, target] : cluster.metrics_targets()) {
      if (c == component) targets.push_back(absl::StrCat("\"", target, "\""));
    }
    std::fprintf(stderr, "  - targets: [%s]\n    labels: {component: %s}\n",
                 absl::StrJoin(targets, ", ").c_str(), component);
  }
}

// After a failure: keep the logs and say where they are.
void PrintLogTails(LocalCluster& cluster) {
  cluster.KeepDataDir();
  for (const auto& [name, path] : cluster.logs()) {
    std::fprintf(stderr, "  %s log: %s\n", name.c_str(), path.c_str());
  }
}

// The progress and evaluations of a watched job, for --report: the latest step and loss of any
// rank with the samples of all (from the first event in which every rank has reported: before,
// a resumed job's total lacks the checkpoint's share of the silent ranks), and the eval_* metrics
// rank 0 reports after each periodic evaluation (training.eval_every_steps).
void RecordJobProgress(const dlrm::v1::Job& job, double seconds, worker::RunRecorder* recorder) {
  const auto& m = job.progress().metrics();
  if (job.progress().step() > 0 && EveryRankReported(job)) {
    recorder->Record(seconds, job.progress().step(), job.total_samples(), job.progress().loss());
  }
  const auto step = m.find("eval_step");
  const auto auc = m.find("eval_auc");
  const auto logloss = m.find("eval_logloss");
  if (step != m.end() && auc != m.end() && logloss != m.end() &&
      (recorder->eval().empty() ||
       recorder->eval().back().step != static_cast<int64_t>(step->second))) {
    recorder->RecordEval(seconds, static_cast<int64_t>(step->second), auc->second, logloss->second);
  }
}

// Writes --report; `failure` is "" for a job that succeeded. Returns false (having said why) when
// the page could not be written.
bool WriteJobReport(const LocalCommandOptions& options, const std::string& job_id,
                    const std::string& job_name, const worker::TrainReport& report,
                    const std::string& failure, const worker::RunRecorder& recorder) {
  worker::HtmlReportOptions page;
  page.title = absl::StrCat("dlrm local: ", job_name, " (", job_id, ")");
  page.summary = worker::RunSummary(job_name, report, failure);
  page.summary.insert(page.summary.begin() + 1,
                      {{"config", options.config_path},
                       {"cluster", absl::StrCat(options.cluster.num_ps, " parameter server(s), ",
                                                options.cluster.num_workers, " worker(s)")}});
  absl::Status st = worker::WriteHtmlReport(options.report, page, recorder);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return false;
  }
  std::fprintf(stderr, "wrote the run report to %s\n", options.report.c_str());
  return true;
}

// What a job that did not finish got through, from what was watched.
worker::TrainReport PartialReport(const worker::RunRecorder& recorder) {
  worker::TrainReport r;
  r.steps = recorder.last_step();
  r.train_samples = recorder.last_samples();
  r.train_seconds = recorder.last_seconds();
  return r;
}

// Submits the job, follows it to its end and reports; returns the exit code.
int RunJob(const LocalCommandOptions& options, const std::string& spec_yaml, LocalCluster& cluster,
           const SignalWatcher& signals) {
  auto client = CoordinatorClient::Create(
      {.address = cluster.coordinator_address(), .security = cluster.client_security()});
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return kExitFailed;
  }
  // A --data-dir used again holds the coordinator's store of the earlier run, with the jobs it
  // left unfinished (a `dlrm local` killed with its job): they would start again on this run's
  // processes, before this job and into their checkpoint folders, and hold those folders against
  // a --resume-from of them. This command runs one job: they are cancelled, and said so. A
  // cluster kept running takes them up again, as a coordinator restarted on its store does.
  if (auto earlier = (*client)->List(); earlier.ok()) {
    for (const dlrm::v1::Job& left : *earlier) {
      const dlrm::v1::JobState state = left.state();
      if (state != dlrm::v1::JOB_STATE_PENDING && state != dlrm::v1::JOB_STATE_RUNNING &&
          state != dlrm::v1::JOB_STATE_RECOVERING) {
        continue;
      }
      if (options.keep_running) {
        std::fprintf(stderr,
                     "job %s (%s), left unfinished by an earlier run on this --data-dir, goes on "
                     "(dlrmctl cancel %s stops it)\n",
                     left.job_id().c_str(), dlrm::v1::JobState_Name(state).c_str(),
                     left.job_id().c_str());
        continue;
      }
      absl::StatusOr<dlrm::v1::Job> cancelled = (*client)->Cancel(
          left.job_id(), "left unfinished by an earlier dlrm local on this --data-dir");
      std::fprintf(stderr,
                   "%s job %s (%s), left unfinished by an earlier run on this --data-dir%s\n",
                   cancelled.ok() ? "cancelled" : "could not cancel", left.job_id().c_str(),
                   dlrm::v1::JobState_Name(state).c_str(),
                   cancelled.ok() ? " (its checkpoints stay)"
                                  : absl::StrCat(": ", cancelled.status().message()).c_str());
    }
  }
  absl::StatusOr<dlrm::v1::Job> job = (*client)->Submit(
      spec_yaml, {.workers = options.cluster.num_workers, .ps = options.cluster.num_ps});
  if (!job.ok()) {
    if (signals.interrupted()) return signals.exit_code();
    std::fprintf(stderr, "error: submit: %s\n", std::string(job.status().message()).c_str());
    return job.status().code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailed;
  }
  const std::string job_id = job->job_id();
  std::fprintf(stderr, "submitted job %s to %s (%d parameter server(s), %d worker(s))\n",
               job_id.c_str(), cluster.coordinator_address().c_str(), options.cluster.num_ps,
               options.cluster.num_workers);
  worker::ProgressLine progress;
  JobProgressMeter meter;
  // Progress reports reach the coordinator from every worker at their own times: intervals of
  // at least half a second keep the throughput curve from spiking.
  worker::RunRecorder recorder({.min_interval_seconds = 0.5});
  const std::string job_name = job->name();
  const absl::Time start = absl::Now();
  job = (*client)->Watch(
      job_id,
      [&](const dlrm::v1::JobEvent& event) {
        const dlrm::v1::Job& j = event.job();
        if (!options.report.empty()) {
          RecordJobProgress(j, absl::ToDoubleSeconds(absl::Now() - start), &recorder);
        }
        if (!options.show_progress) return true;
        if (const std::optional<ProgressFigures> f = meter.Observe(j); f.has_value()) {
          progress.Update(absl::StrCat("job ", job_id), f->step, f->samples, f->loss,
                          f->samples_per_sec, /*force=*/false, f->total_steps, f->steps_per_sec);
        }
        return true;
      },
      absl::Hours(24 * 7),
      // A coordinator that restarts (a dead child) is watched again; a stopping cluster is not.
      [&] { return !signals.interrupted(); });
  if (options.show_progress) progress.Finish();
  const bool write_report = !options.report.empty();
  if (signals.interrupted()) {
    if (write_report) {
      WriteJobReport(options, job_id, job_name, PartialReport(recorder), "interrupted", recorder);
    }
    return signals.exit_code();
  }
  if (!job.ok()) {
    std::fprintf(stderr, "error: watching job %s: %s\n", job_id.c_str(),
                 std::string(job.status().message()).c_str());
    if (write_report) {
      WriteJobReport(options, job_id, job_name, PartialReport(recorder),
                     absl::StrCat("watching the job: ", job.status().message()), recorder);
    }
    PrintLogTails(cluster);
    return kExitFailed;
  }
  if (job->state() != dlrm::v1::JOB_STATE_SUCCEEDED) {
    const char* state = job->state() == dlrm::v1::JOB_STATE_CANCELLED ? "CANCELLED" : "FAILED";
    std::fprintf(stderr, "job %s %s: %s\n", job_id.c_str(), state, job->message().c_str());
    if (write_report) {
      WriteJobReport(options, job_id, job_name, PartialReport(recorder),
                     absl::StrCat(state, ": ", job->message()), recorder);
    }
    PrintLogTails(cluster);
    return kExitFailed;
  }
  const auto& m = job->progress().metrics();
  if (m.contains("ps_memory_rows") && m.contains("ps_rocksdb_hits") &&
      m.contains("ps_rows_created") && m.contains("ps_rocksdb_writes")) {
    // Rows created on first use are no reads: the memory tier missed them and no tier had them.
    std::fprintf(stderr,
                 "parameter servers: %.0f rows in memory, %.0f rows created on first use; RocksDB "
                 "tier: %.0f rows read, %.0f rows written\n",
                 m.at("ps_memory_rows"), m.at("ps_rows_created"), m.at("ps_rocksdb_hits"),
                 m.at("ps_rocksdb_writes"));
  }
  const worker::TrainReport report = ReportFromJob(*job);
  std::printf("%s\n", worker::TrainReportSummary(report).c_str());
  std::fflush(stdout);
  if (!options.metrics_out.empty()) {
    absl::Status st = worker::WriteTrainReport(options.metrics_out, report);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return kExitFailed;
    }
  }
  if (options.report.empty()) return 0;
  if (report.eval_samples > 0) {
    recorder.RecordEval(absl::ToDoubleSeconds(absl::Now() - start), report.steps, report.auc,
                        report.logloss);
  }
  return WriteJobReport(options, job_id, job_name, report, "", recorder) ? 0 : kExitFailed;
}

// What the workers' input checks (worker/job_input.cc, record_reader.cc) would refuse, checked
// before any process starts: Criteo's 13 dense features and 26 tables (one-hot or multi-hot
// data alike), and each data file's format against data.format (the first bytes only).
absl::Status CheckSpecFitsData(const common::JobSpec& spec) {
  DLRM_RETURN_IF_ERROR(worker::CheckModelFitsCriteoInput(spec));
  if (spec.format == "auto") return absl::OkStatus();
  for (const auto* paths : {&spec.train_paths, &spec.eval_paths}) {
    for (const std::string& path : *paths) {
      absl::StatusOr<bool> binary = worker::IsBinaryCriteoFile(path);
      if (!binary.ok()) continue;  // the workers say what is wrong with it
      if (*binary != (spec.format == "binary")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.format: ", spec.format, ", but ", path, " is ",
            *binary ? "binary (it starts with DLRMBIN1)" : "not binary (no DLRMBIN1 header)",
            "; give format: auto, or the file's format"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunLocalCommand(const LocalCommandOptions& options) {
  // Early, so that a Ctrl-C during start-up is not lost.
  InstallTerminationHandlers();

  absl::StatusOr<common::JobSpec> spec = common::LoadJobSpec(options.config_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(spec.status().message()).c_str());
    return spec.status().code() == absl::StatusCode::kNotFound ? kExitFailed : kExitBadInput;
  }
  if (!options.resume_from.empty()) {
    const std::string resume_from = std::filesystem::absolute(options.resume_from).string();
    // As `dlrm train --resume` and `dlrmctl submit --resume-from`: a flag naming another
    // checkpoint than the spec's checkpoint.resume_from is refused, not taken over it.
    if (absl::Status agrees =
            common::CheckResumeAgrees("--resume-from", options.resume_from,
                                      spec->checkpoint.resume_from, options.config_path);
        !agrees.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(agrees.message()).c_str());
      return kExitBadInput;
    }
    spec->checkpoint.resume_from = resume_from;
  }
  // A checkpoint to resume from that is not there failed the job once the whole cluster had
  // started. The workers verify its files; here it need only hold a committed manifest.
  int64_t resume_step = 0;
  if (const std::string& from = spec->checkpoint.resume_from; !from.empty()) {
    absl::StatusOr<int64_t> step = worker::CommittedResumeStep(from);
    if (!step.ok()) {
      std::fprintf(stderr, "error: %s (--resume-from, or checkpoint.resume_from of %s)\n",
                   std::string(step.status().message()).c_str(), options.config_path.c_str());
      return kExitFailed;
    }
    resume_step = *step;
  }
  if (!spec->checkpoint.dir.empty()) {
    spec->checkpoint.dir = std::filesystem::absolute(spec->checkpoint.dir).string();
    // A folder holding another run's newer checkpoints failed the job once the whole cluster had
    // started; the job's rank 0 makes the same check.
    if (absl::Status fresh = worker::CheckNoNewerCheckpoints(spec->checkpoint.dir, resume_step);
        !fresh.ok()) {
      std::fprintf(stderr, "error: %s (dlrm local --resume-from DIR resumes)\n",
                   std::string(fresh.message()).c_str());
      return kExitFailed;
    }
  }
  // LoadJobSpec resolved relative data paths against the spec's folder; the YAML we submit
  // carries them absolute, so workers find the data whatever their working directory.
  const std::string spec_yaml = common::JobSpecToYaml(*spec);
  // A missing data file would only show up in a worker's log after the cluster started.
  for (const auto* paths : {&spec->train_paths, &spec->eval_paths}) {
    for (const std::string& path : *paths) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        std::fprintf(stderr, "error: %s: data file '%s' not found\n", options.config_path.c_str(),
                     path.c_str());
        return kExitFailed;
      }
    }
  }
  // So would a model that does not fit the data (the workers check it too): the job failed after
  // the whole cluster had started, and left its folder of logs behind.
  if (absl::Status fits = CheckSpecFitsData(*spec); !fits.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", options.config_path.c_str(),
                 std::string(fits.message()).c_str());
    return kExitBadInput;
  }

  // --metrics-out and --report are written after the job: a path that cannot be, or one that
  // would replace the spec or its data, is refused before the cluster starts.
  if (absl::Status st =
          worker::CheckRunOutputs(options.config_path, *spec, options.metrics_out, options.report);
      !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return kExitBadInput;
  }

  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Create(options.cluster);
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(cluster.status().message()).c_str());
    return cluster.status().code() == absl::StatusCode::kInvalidArgument ? kExitBadInput
                                                                         : kExitFailed;
  }
  int code = 0;
  {
    SignalWatcher signals(cluster->get());
    absl::Status launched = (*cluster)->Launch();
    if (!launched.ok()) {
      if (signals.interrupted()) {
        code = signals.exit_code();
      } else {
        std::fprintf(stderr, "error: starting the local cluster: %s\n",
                     std::string(launched.message()).c_str());
        // The message names a child's log ("see .../logs/coordinator.log"): keep it, as after a
        // failed job. The temporary folder was removed on exit, and the log with it. Refused
        // before any child started (--device cuda with too few GPUs), it holds nothing: it goes.
        if (!(*cluster)->logs().empty()) (*cluster)->KeepDataDir();
        code = kExitFailed;
      }
    } else {
      std::fprintf(stderr, "local cluster up: coordinator %s, data in %s\n",
                   (*cluster)->coordinator_address().c_str(), (*cluster)->data_dir().c_str());
      PrintScrapeTargets(**cluster);
      code = RunJob(options, spec_yaml, **cluster, signals);
      if (options.keep_running && !signals.interrupted()) {
        std::printf("coordinator: %s\n", (*cluster)->coordinator_address().c_str());
        if (!(*cluster)->admin_tls_dir().empty()) {
          std::printf("tls-dir: %s\n", (*cluster)->admin_tls_dir().c_str());
        }
        std::fflush(stdout);
        const std::string tls_dir = (*cluster)->admin_tls_dir();
        std::fprintf(stderr,
                     "the cluster keeps running: dlrmctl --coordinator %s%s submit -f JOB.yaml "
                     "--wait; Ctrl-C to stop\n",
                     (*cluster)->coordinator_address().c_str(),
                     tls_dir.empty() ? "" : absl::StrCat(" --tls-dir ", tls_dir).c_str());
        signals.WaitForSignal();
      }
    }
    (*cluster)->Stop();
  }
  return code;
}

}  // namespace dlrm::client
