#include "server/ps_process.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rpc_bytes.h"
#include "common/status.h"

namespace dlrm::server {
namespace {

std::string Advertised(const std::string& bound) {
  for (const char* any : {"0.0.0.0:", "[::]:"}) {
    if (absl::StartsWith(bound, any)) {
      return absl::StrCat("127.0.0.1:", bound.substr(std::string(any).size()));
    }
  }
  return bound;
}

}  // namespace

PsProcess::PsProcess(const PsProcessOptions& options) : options_(options) {}

PsProcess::~PsProcess() { Shutdown(); }

absl::StatusOr<std::unique_ptr<PsProcess>> PsProcess::Create(const PsProcessOptions& options) {
  std::unique_ptr<PsProcess> p(new PsProcess(options));
  DLRM_ASSIGN_OR_RETURN(p->server_, ParameterServer::Start(options.server));
  p->advertise_address_ = options.advertise_address.empty() ? Advertised(p->server_->address())
                                                            : options.advertise_address;
  client::CoordinatorClientOptions client_options;
  client_options.address = options.coordinator;
  client_options.timeout = options.coordinator_rpc_timeout;
  client_options.security = options.server.security;
  DLRM_ASSIGN_OR_RETURN(p->client_, client::CoordinatorClient::Create(client_options));
  return p;
}

absl::Status PsProcess::RegisterLocked() {
  DLRM_ASSIGN_OR_RETURN(
      dlrm::v1::RegisterResponse response,
      client_->Register(client::MakeRegisterRequest(dlrm::v1::ROLE_PS, advertise_address_,
                                                    options_.metrics_address, options_.name)));
  member_id_ = response.member_id();
  member_key_ = response.member_key();
  server_->service().SetGrantKey(response.ps_grant_key());
  heartbeat_interval_ = client::HeartbeatInterval(response);
  DLRM_LOG(INFO) << "parameter server " << advertise_address_ << " registered as " << member_id_
                 << " with " << options_.coordinator;
  return absl::OkStatus();
}

void PsProcess::SyncJobs(const dlrm::v1::PsAssignment& assignment, int64_t epoch) {
  std::set<std::string> running;
  for (const dlrm::v1::JobAssignment& job : assignment.jobs()) running.insert(job.job_id());
  // Every loaded job the answer does not list, not only those an earlier answer listed: a job
  // loaded and ended (failed, cancelled) between two heartbeats was never listed, and kept its
  // memory budget, folder and job slot for good.
  for (const std::string& job_id : server_->service().job_ids()) {
    if (running.contains(job_id)) continue;
    // Not a job (re)started after this answer was made: a recovery may have started it again
    // (newer epoch) while the answer travelled. Not while a load is under way, which may take
    // minutes: the heartbeats go on, and the next one tries again.
    absl::Status s = server_->service().TryUnloadJob(job_id, epoch);
    if (s.ok()) DLRM_LOG(INFO) << "job " << job_id << " is no longer running; unloaded it";
  }
}

absl::Status PsProcess::Run() {
  {
    absl::MutexLock lock(&mu_);
    DLRM_RETURN_IF_ERROR(client::RegisterWithRetry(
        mu_, &stopping_, options_.register_timeout,
        absl::StrCat("parameter server ", advertise_address_), options_.coordinator,
        options_.server.security.tls(),
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return RegisterLocked(); }));
    if (stopping_) {
      // Stopped (SIGTERM, Ctrl-C) while waiting for the coordinator: it exited saying nothing.
      server_->Shutdown();
      DLRM_LOG(INFO) << "parameter server " << advertise_address_
                     << " stopped before it registered with " << options_.coordinator;
      return absl::OkStatus();
    }
  }
  // The heartbeat loop runs on this thread.
  while (true) {
    std::string member_id, member_key;
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      member_id = member_id_;
      member_key = member_key_;
      interval = heartbeat_interval_;
    }
    common::ExportRpcBytes(&server_->metrics());  // dlrm_rpc_*_bytes_total
    // Folders of jobs unloaded while calls in flight held them, once those have ended.
    server_->service().RemoveReleasedJobFolders();
    absl::StatusOr<dlrm::v1::HeartbeatResponse> response =
        client_->Heartbeat(member_id, member_key);
    if (response.ok() && response->has_ps()) SyncJobs(response->ps(), response->epoch());
    absl::MutexLock lock(&mu_);
    if (stopping_) break;
    if (!response.ok() && client::ReplacedByNewerProcess(response.status())) {
      DLRM_LOG(ERROR) << "parameter server stops: " << response.status().message();
      replaced_ = response.status();
      stopping_ = true;
      break;
    }
    if (!response.ok()) {
      if (client::MustRegisterAgain(response.status())) {
        DLRM_LOG(WARNING) << "parameter server lease lost (" << response.status().message()
                          << "); registering again";
        absl::Status st = RegisterLocked();
        if (!st.ok()) DLRM_LOG(WARNING) << "register: " << st.message();
      } else {
        DLRM_LOG(WARNING) << "heartbeat: " << response.status().message();
      }
    }
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval);
  }
  std::string member_id, member_key;
  absl::Status replaced;
  {
    absl::MutexLock lock(&mu_);
    member_id = member_id_;
    member_key = member_key_;
    replaced = replaced_;
  }
  if (!replaced.ok()) {
    // No longer a member: nothing to leave. The coordinator dropped this process when its
    // replacement registered, and the job's recovery moves the workers onto the replacement.
    server_->Shutdown();
    return replaced;
  }
  if (!member_id.empty()) {
    absl::Status left = client_->Leave(member_id, member_key);
    if (!left.ok()) DLRM_LOG(WARNING) << "leave: " << left.message();
  }
  server_->Shutdown();
  DLRM_LOG(INFO) << "parameter server " << advertise_address_ << " stopped";
  return absl::OkStatus();
}

void PsProcess::Shutdown() {
  // First, without the lock: an attempt to register holds it while it waits for the coordinator.
  if (client_ != nullptr) client_->StopWaiting();
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

absl::Status RunParameterServer(const PsProcessOptions& options, absl::Notification* stop) {
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<PsProcess> ps, PsProcess::Create(options));
  std::thread stopper;
  absl::Notification run_done;
  if (stop != nullptr) {
    stopper = std::thread([&] {
      while (!stop->WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
        if (run_done.HasBeenNotified()) return;
      }
      ps->Shutdown();
    });
  }
  absl::Status status = ps->Run();
  run_done.Notify();
  if (stopper.joinable()) stopper.join();
  return status;
}

}  // namespace dlrm::server
