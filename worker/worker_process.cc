#include "worker/worker_process.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rpc_bytes.h"
#include "common/status.h"
#include "worker/worker_metrics.h"

namespace dlrm::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr absl::Duration kIdlePollInterval = absl::Milliseconds(200);

// One run of a job: a recovery runs the same job again at a new job epoch.
std::string RunKey(const dlrm::v1::JobAssignment& job) {
  return absl::StrCat(job.job_id(), "@", job.job_epoch());
}

}  // namespace

bool PeerLost(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
      return true;
    case absl::StatusCode::kNotFound:
      // A parameter server that restarted in place no longer has the job.
      return absl::StrContains(status.message(), "is not loaded on this parameter server");
    default:
      return false;
  }
}

WorkerProcess::WorkerProcess(const WorkerProcessOptions& options) : options_(options) {}

WorkerProcess::~WorkerProcess() {
  Shutdown();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Create(
    const WorkerProcessOptions& options) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("worker: --coordinator is empty");
  }
  auto worker = std::unique_ptr<WorkerProcess>(new WorkerProcess(options));
  RegisterWorkerMetrics(options.metrics);
  DLRM_ASSIGN_OR_RETURN(worker->client_, client::CoordinatorClient::Create(
                                             {.address = options.coordinator,
                                              .timeout = options.coordinator_rpc_timeout,
                                              .security = options.security}));
  return worker;
}

absl::Status WorkerProcess::RegisterLocked() {
  DLRM_ASSIGN_OR_RETURN(
      dlrm::v1::RegisterResponse response,
      client_->Register(client::MakeRegisterRequest(dlrm::v1::ROLE_WORKER, /*address=*/"",
                                                    options_.metrics_address, options_.name)));
  member_id_ = response.member_id();
  member_key_ = response.member_key();
  heartbeat_interval_ = client::HeartbeatInterval(response);
  DLRM_LOG(INFO) << "worker registered as " << member_id_ << " with " << options_.coordinator
                 << " (heartbeat every " << heartbeat_interval_ << ")";
  return absl::OkStatus();
}

void WorkerProcess::HeartbeatLoop() {
  while (true) {
    // dlrm_rpc_*_bytes_total, during jobs, between them and after a job's last progress report
    // (its final evaluation, report and unload), as the parameter servers and the coordinator do.
    if (options_.metrics != nullptr) common::ExportRpcBytes(options_.metrics);
    ResendUndeliveredReport();
    std::string member_id, member_key;
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      member_id = member_id_;
      member_key = member_key_;
      interval = heartbeat_interval_;
      // An idle worker learns of a new job only through its heartbeat: ask often.
      if (running_job_.empty()) interval = std::min(interval, kIdlePollInterval);
    }
    absl::StatusOr<dlrm::v1::HeartbeatResponse> response =
        client_->Heartbeat(member_id, member_key);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (!response.ok() && client::ReplacedByNewerProcess(response.status())) {
        DLRM_LOG(ERROR) << "worker stops: " << response.status().message();
        replaced_ = response.status();
        stopping_ = true;
        if (cancel_hook_) cancel_hook_();
        return;
      }
      if (!response.ok()) {
        if (client::MustRegisterAgain(response.status())) {
          DLRM_LOG(WARNING) << "worker lease lost (" << response.status().message()
                            << "); registering again";
          // A job we were training is no longer ours.
          if (!running_job_.empty() && cancel_hook_) cancel_hook_();
          has_assignment_ = false;
          absl::Status st = RegisterLocked();
          if (!st.ok()) DLRM_LOG(WARNING) << "register: " << st.message();
        } else {
          DLRM_LOG(WARNING) << "heartbeat: " << response.status().message();
        }
      } else if (response->has_worker() && response->worker().has_job() &&
                 !response->worker().job().job_id().empty()) {
        assignment_ = response->worker();
        has_assignment_ = true;
        checkpoint_requests_.store(assignment_.job().checkpoint_requests());
        // Another job, or the same one run again after a recovery: the run in progress is over.
        if (!running_job_.empty() && RunKey(assignment_.job()) != running_job_ && cancel_hook_) {
          DLRM_LOG(INFO) << "run " << running_job_ << " is replaced by "
                         << RunKey(assignment_.job()) << "; stopping it";
          cancel_hook_();
        }
      } else {
        has_assignment_ = false;
        // The job we train is no longer assigned to us: cancelled or failed elsewhere.
        if (!running_job_.empty() && cancel_hook_) {
          DLRM_LOG(INFO) << "job " << running_job_ << " is no longer assigned; stopping it";
          cancel_hook_();
        }
      }
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || poll_now_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), interval);
      poll_now_ = false;
      if (stopping_) return;
    }
  }
}

absl::Status WorkerProcess::Run() {
  {
    absl::MutexLock lock(&mu_);
    DLRM_RETURN_IF_ERROR(client::RegisterWithRetry(
        mu_, &stopping_, absl::Seconds(60), "worker", options_.coordinator, options_.security.tls(),
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return RegisterLocked(); }));
    if (stopping_) return absl::OkStatus();
  }
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  while (true) {
    dlrm::v1::WorkerAssignment assignment;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ ||
               (has_assignment_ && !finished_jobs_.contains(RunKey(assignment_.job())));
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) break;
      assignment = assignment_;
      running_job_ = RunKey(assignment.job());
      // Until training starts, a cancellation only raises the flag (checked between phases).
      cancel_job_.store(false);
      cancel_hook_ = [this] { cancel_job_.store(true); };
    }
    RunJob(assignment);
    {
      absl::MutexLock lock(&mu_);
      finished_jobs_.insert(RunKey(assignment.job()));
      running_job_.clear();
      cancel_hook_ = nullptr;
      poll_now_ = true;  // ask for the next job now, not at the end of a long interval
    }
    jobs_done_.fetch_add(1);
  }
  std::string member_id, member_key;
  {
    absl::MutexLock lock(&mu_);
    member_id = member_id_;
    member_key = member_key_;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    if (!replaced_.ok()) return replaced_;  // no longer a member: nothing to leave
  }
  absl::Status left = client_->Leave(member_id, member_key);
  if (!left.ok()) DLRM_LOG(WARNING) << "leave: " << left.message();
  DLRM_LOG(INFO) << "worker " << member_id << " stopped";
  return absl::OkStatus();
}

void WorkerProcess::Shutdown() {
  // First, without the lock: an attempt to register holds it while it waits for the coordinator.
  if (client_ != nullptr) client_->StopWaiting();
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  if (cancel_hook_) cancel_hook_();
}

absl::StatusOr<std::string> WorkerProcess::KvGetUntilStopped(const std::string& key) {
  const absl::Time deadline = absl::Now() + options_.collective_timeout;
  while (true) {
    if (cancel_job_.load()) {
      return absl::CancelledError(absl::StrCat(key, ": job stopped"));
    }
    const absl::Duration left = deadline - absl::Now();
    // Never a negative wait (the coordinator refuses one INVALID_ARGUMENT): the call before may
    // have outlasted what was left.
    absl::StatusOr<std::string> value =
        client_->KvGet(key, std::clamp(left, absl::Milliseconds(1), absl::Seconds(1)));
    if (value.ok() || !absl::IsNotFound(value.status()) || left <= absl::Seconds(1)) return value;
  }
}

}  // namespace dlrm::worker
