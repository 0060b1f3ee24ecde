#include "server/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/rpc_bytes.h"
#include "common/status.h"
#include "server/coordinator_service.h"
#include "server/coordinator_state.h"
#include "server/coordinator_store.h"
#include "server/job_watch.h"
#include "server/rendezvous_store.h"
#include "server/timer_queue.h"

namespace dlrm::server {

namespace {

absl::Duration ExpiryCheckInterval(const CoordinatorOptions& options) {
  if (options.expiry_check_interval > absl::ZeroDuration()) return options.expiry_check_interval;
  return std::clamp(options.lease_ttl / 10, absl::Milliseconds(10), absl::Seconds(1));
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("coordinator needs a data dir (--data-dir)");
  }
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl ", absl::FormatDuration(options.lease_ttl), " must be > 0"));
  }
  std::unique_ptr<Coordinator> c(new Coordinator(options));
  DLRM_ASSIGN_OR_RETURN(c->metrics_,
                        common::MetricsRegistry::Create(
                            {.port = options.metrics_port,
                             .bind_address = options.metrics_host.empty()
                                                 ? common::HostOfAddress(options.listen_address)
                                                 : options.metrics_host}));
  DLRM_ASSIGN_OR_RETURN(c->store_, CoordinatorStore::Open(options.data_dir));
  DLRM_ASSIGN_OR_RETURN(std::string grant_secret, c->store_->GrantSecret());
  c->keys_ = std::make_unique<common::GrantKeys>(std::move(grant_secret));
  CoordinatorStateOptions state_options;
  state_options.lease_ttl = options.lease_ttl;
  // A sweep late by more than half a lease (or two check periods, when those are longer) means
  // the coordinator was not serving; see CoordinatorStateOptions::stall_after.
  state_options.stall_after = std::max(options.lease_ttl / 2, 2 * ExpiryCheckInterval(options));
  DLRM_ASSIGN_OR_RETURN(c->state_, CoordinatorState::Create(state_options, c->store_.get(),
                                                            c->metrics_.get(), absl::Now()));
  c->timers_ = std::make_unique<TimerQueue>();
  c->kv_ = std::make_unique<RendezvousStore>(c->timers_.get());
  c->watchers_ = std::make_unique<JobWatchers>(options.max_watch_streams);
  c->rpcs_ = std::make_unique<RpcCounter>(c->metrics_.get());
  JobWatchers* watchers = c->watchers_.get();
  c->state_->SetJobListener([watchers](const dlrm::v1::Job& job) { watchers->Publish(job); });
  c->coordinator_service_ = std::make_unique<CoordinatorServiceImpl>(
      c->state_.get(), c->kv_.get(), c->rpcs_.get(), c->keys_.get());
  c->jobs_service_ =
      std::make_unique<JobsServiceImpl>(c->state_.get(), c->watchers_.get(), c->rpcs_.get());
  return c;
}

Coordinator::~Coordinator() {
  Shutdown();
  // A rendezvous wait's expiry the timer thread has already taken runs on kv_, which is
  // destroyed before timers_ (declared first): it ends here, with kv_ still alive.
  if (timers_ != nullptr) timers_->Stop();
}

absl::Status Coordinator::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return absl::FailedPreconditionError("coordinator already started");
  if (stopping_) return absl::FailedPreconditionError("coordinator was shut down");
  common::ServerOptions server_options;
  server_options.listen_address = options_.listen_address;
  server_options.security = options_.security;
  server_options.max_message_bytes = static_cast<int>(common::kMaxCoordinatorRequestBytes);
  DLRM_ASSIGN_OR_RETURN(
      server_,
      common::GrpcServer::Start(server_options, {coordinator_service_.get(), jobs_service_.get()}));
  started_ = true;
  expiry_thread_ = std::thread([this] { ExpiryLoop(); });
  DLRM_LOG(INFO) << "coordinator listening on " << server_->address() << " (data dir "
                 << options_.data_dir << ", lease ttl " << absl::FormatDuration(options_.lease_ttl)
                 << (metrics_->port() > 0 ? absl::StrCat(", metrics port ", metrics_->port())
                                          : std::string(", no metrics endpoint"))
                 << ")";
  return absl::OkStatus();
}

void Coordinator::ExpiryLoop() {
  const absl::Duration interval = ExpiryCheckInterval(options_);
  absl::Time next_export = absl::InfinitePast();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval);
    if (stopping_) break;
    mu_.Unlock();
    const absl::Time now = absl::Now();
    state_->ExpireLeases(now);
    if (now >= next_export) {  // dlrm_rpc_*_bytes_total, about once a second
      common::ExportRpcBytes(metrics_.get());
      next_export = now + absl::Seconds(1);
    }
    mu_.Lock();
  }
}

void Coordinator::Shutdown() {
  // Serializes shutdowns: a second caller waits for the first to finish, then returns.
  absl::MutexLock once(&shutdown_mu_);
  if (stopped_.HasBeenNotified()) return;
  bool started = false;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    started = started_;
  }
  if (started) {
    // Pending waits first: the server cannot finish while they are open.
    kv_->Shutdown();
    watchers_->Close();
    server_->Shutdown(absl::Seconds(1));
    server_->Wait();
    if (expiry_thread_.joinable()) expiry_thread_.join();
    DLRM_LOG(INFO) << "coordinator stopped";
  }
  stopped_.Notify();
}

void Coordinator::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return;
  }
  stopped_.WaitForNotification();
}

int Coordinator::port() const { return server_ != nullptr ? server_->port() : 0; }
std::string Coordinator::address() const {
  return server_ != nullptr ? server_->address() : std::string();
}
int Coordinator::metrics_port() const { return metrics_->port(); }

}  // namespace dlrm::server
