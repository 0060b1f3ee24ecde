#include "client/coordinator_client.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::client {

using common::MakeClientContext;

namespace {

// Cancels a call unless its first answer comes by a deadline: a stream's deadline is the whole
// watch, but its first event (the job as it is, sent at once) must come within the client's
// timeout, as the answer to any other call must.
class FirstEventDeadline {
 public:
  FirstEventDeadline(grpc::ClientContext* context, absl::Time deadline)
      : thread_([this, context, deadline] {
          absl::MutexLock lock(&mu_);
          if (!mu_.AwaitWithDeadline(absl::Condition(&answered_), deadline)) {
            expired_ = true;
            context->TryCancel();
          }
        }) {}
  ~FirstEventDeadline() {
    Answered();
    thread_.join();
  }
  // The first event came: the call is no longer cancelled (unless it already was: expired()).
  void Answered() {
    absl::MutexLock lock(&mu_);
    answered_ = true;
  }
  bool expired() {
    absl::MutexLock lock(&mu_);
    return expired_;
  }

 private:
  absl::Mutex mu_;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the fields it reads are set
};

}  // namespace

// Watch's pause between attempts to watch again starts at kWatchFirstBackoff and doubles up to
// kWatchMaxBackoff.
constexpr absl::Duration kWatchFirstBackoff = absl::Milliseconds(250);
constexpr absl::Duration kWatchMaxBackoff = absl::Seconds(2);

bool IsTerminalJobState(dlrm::v1::JobState state) {
  return state == dlrm::v1::JOB_STATE_SUCCEEDED || state == dlrm::v1::JOB_STATE_FAILED ||
         state == dlrm::v1::JOB_STATE_CANCELLED;
}

CoordinatorClient::CoordinatorClient(const CoordinatorClientOptions& options,
                                     std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      coordinator_(dlrm::v1::Coordinator::NewStub(channel_)),
      jobs_(dlrm::v1::Jobs::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const CoordinatorClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("coordinator address is empty");
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout ", absl::FormatDuration(options.timeout), " must be > 0"));
  }
  common::ChannelOptions channel_options;
  channel_options.target = options.address;
  channel_options.security = options.security;
  channel_options.peer_identity = common::kCoordinatorPeer;
  DLRM_ASSIGN_OR_RETURN(auto channel, common::MakeChannel(channel_options));
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(options, std::move(channel)));
}

absl::Status CoordinatorClient::Check(const grpc::Status& status, const char* method) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status s = common::FromGrpcStatus(status);
  // The coordinator's own refusals already start with the method ("CancelJob: reason of ...").
  if (absl::StartsWith(s.message(), absl::StrCat(method, ":"))) {
    return Annotate(s, absl::StrCat("coordinator ", options_.address));
  }
  return Annotate(s, absl::StrCat("coordinator ", options_.address, " ", method));
}

absl::StatusOr<dlrm::v1::Job> CoordinatorClient::Submit(const std::string& spec_yaml,
                                                        const SubmitOptions& options) {
  dlrm::v1::SubmitJobRequest request;
  request.set_spec_yaml(spec_yaml);
  request.set_workers(options.workers);
  request.set_ps(options.ps);
  dlrm::v1::SubmitJobResponse response;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(jobs_->SubmitJob(context.get(), request, &response), "SubmitJob"));
  return std::move(*response.mutable_job());
}

absl::StatusOr<dlrm::v1::Job> CoordinatorClient::Get(const std::string& job_id) {
  dlrm::v1::GetJobRequest request;
  request.set_job_id(job_id);
  dlrm::v1::Job job;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(jobs_->GetJob(context.get(), request, &job), "GetJob"));
  return job;
}

absl::StatusOr<std::vector<dlrm::v1::Job>> CoordinatorClient::List(dlrm::v1::JobState filter,
                                                                   int page_size) {
  dlrm::v1::ListJobsRequest request;
  request.set_state(filter);
  request.set_page_size(page_size);
  std::vector<dlrm::v1::Job> jobs;
  while (true) {
    dlrm::v1::ListJobsResponse response;
    auto context = MakeClientContext(options_.timeout);
    DLRM_RETURN_IF_ERROR(Check(jobs_->ListJobs(context.get(), request, &response), "ListJobs"));
    for (auto& job : *response.mutable_jobs()) jobs.push_back(std::move(job));
    if (response.next_page_token().empty()) return jobs;
    // A page that brings no job, or the token it was asked with, would never end.
    if (response.jobs().empty() || response.next_page_token() == request.page_token()) {
      return absl::InternalError(absl::StrCat("ListJobs: the coordinator answered page_token '",
                                              request.page_token(), "' with no progress"));
    }
    request.set_page_token(response.next_page_token());
  }
}

absl::StatusOr<dlrm::v1::Job> CoordinatorClient::Cancel(const std::string& job_id,
                                                        const std::string& reason) {
  dlrm::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  dlrm::v1::Job job;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(jobs_->CancelJob(context.get(), request, &job), "CancelJob"));
  return job;
}

absl::StatusOr<dlrm::v1::Job> CoordinatorClient::RequestCheckpoint(const std::string& job_id) {
  dlrm::v1::CheckpointJobRequest request;
  request.set_job_id(job_id);
  dlrm::v1::Job job;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(jobs_->CheckpointJob(context.get(), request, &job), "CheckpointJob"));
  return job;
}

absl::StatusOr<dlrm::v1::Job> CoordinatorClient::Watch(const std::string& job_id,
                                                       const EventCallback& on_event,
                                                       absl::Duration timeout,
                                                       const std::function<bool()>& reconnect) {
  dlrm::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  const absl::Time deadline = absl::Now() + timeout;
  dlrm::v1::Job last;
  bool seen = false;  // an event came, on any stream
  // When the stream of a watch that had events was lost; InfiniteFuture while it is not.
  absl::Time lost_at = absl::InfiniteFuture();
  absl::Duration backoff = kWatchFirstBackoff;
  // After the coordinator went away, each attempt dials on a channel of its own: the shared one
  // can stay stuck in failing TLS handshakes to a coordinator restarted by this very process
  // (`dlrm local`), while a new channel connects at once.
  std::unique_ptr<dlrm::v1::Jobs::Stub> fresh_stub;
  dlrm::v1::Jobs::Stub* stub = jobs_.get();
  while (true) {
    auto context = MakeClientContext(std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    grpc::Status status;
    bool stopped = false;
    bool expired = false;
    {
      FirstEventDeadline first_event(context.get(),
                                     std::min(deadline, absl::Now() + options_.timeout));
      std::unique_ptr<grpc::ClientReader<dlrm::v1::JobEvent>> reader =
          stub->WatchJob(context.get(), request);
      dlrm::v1::JobEvent event;
      while (reader->Read(&event)) {
        first_event.Answered();
        last = event.job();
        seen = true;
        if (lost_at != absl::InfiniteFuture()) {
          DLRM_LOG(INFO) << "coordinator " << options_.address << ": watching job " << job_id
                         << " again";
          lost_at = absl::InfiniteFuture();
          backoff = kWatchFirstBackoff;
        }
        if (on_event && !on_event(event)) {
          stopped = true;
          context->TryCancel();
          break;
        }
      }
      status = reader->Finish();
      expired = first_event.expired();
    }
    if (stopped) return last;
    if (expired) {
      status =
          grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                       absl::StrCat("no answer within ",
                                    absl::FormatDuration(std::min(options_.timeout, timeout))));
    }
    // A coordinator that restarts (its jobs are in its store) ends the stream with UNAVAILABLE,
    // and may not answer at once when it is back: a watch that had events watches again, for
    // up to options.watch_reconnect_for. One that never had any fails as any other call would.
    const bool terminal = seen && IsTerminalJobState(last.state());
    const bool lost = status.error_code() == grpc::StatusCode::UNAVAILABLE || expired;
    if (seen && lost && !terminal && absl::Now() < deadline && (!reconnect || reconnect())) {
      const absl::Time now = absl::Now();
      if (lost_at == absl::InfiniteFuture()) {
        lost_at = now;
        DLRM_LOG(WARNING) << "coordinator " << options_.address << ": lost the watch of job "
                          << job_id << " (" << status.error_message() << "); watching again for "
                          << "up to " << absl::FormatDuration(options_.watch_reconnect_for);
      }
      if (now - lost_at < options_.watch_reconnect_for) {
        absl::SleepFor(
            std::min({backoff, deadline - now, lost_at + options_.watch_reconnect_for - now}));
        backoff = std::min(2 * backoff, kWatchMaxBackoff);
        common::ChannelOptions channel_options;
        channel_options.target = options_.address;
        channel_options.security = options_.security;
        channel_options.private_connections = true;
        channel_options.peer_identity = common::kCoordinatorPeer;
        absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
            common::MakeChannel(channel_options);
        if (channel.ok()) {
          fresh_stub = dlrm::v1::Jobs::NewStub(*channel);
          stub = fresh_stub.get();
        }
        continue;
      }
      return Annotate(Check(status, "WatchJob"),
                      absl::StrCat("lost the watch of job ", job_id, " and tried again for ",
                                   absl::FormatDuration(options_.watch_reconnect_for), " in vain"));
    }
    DLRM_RETURN_IF_ERROR(Check(status, "WatchJob"));
    if (!seen) {
      return absl::InternalError(absl::StrCat("coordinator ", options_.address,
                                              " WatchJob: stream for job ", job_id,
                                              " ended without an event"));
    }
    return last;
  }
}

absl::StatusOr<dlrm::v1::GetClusterViewResponse> CoordinatorClient::Members() {
  dlrm::v1::GetClusterViewResponse response;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(
      coordinator_->GetClusterView(context.get(), dlrm::v1::GetClusterViewRequest(), &response),
      "GetClusterView"));
  return response;
}

void CoordinatorClient::AwaitConnected(absl::Duration wait) {
  // A call made while the channel backs off fails at once and drives no connection attempt;
  // between such calls nothing polls the channel, and over TLS (several round trips) each
  // attempt outran its connect deadline: a worker started before the coordinator never
  // connected, and members lost their leases to a coordinator back after seconds
  // (k8s/checks/run_manifests.py found both). Waiting here polls the attempt through; the call
  // after it still fails fast, with the connection's own error, when the wait was in vain.
  // In slices, back to back (the attempt is polled throughout), so that StopWaiting ends the
  // wait within one: a member's shutdown waited for the rest of it, up to --rpc-timeout.
  const absl::Time deadline = absl::Now() + wait;
  while (!stop_waiting_.load()) {
    const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(100));
    if (channel_->WaitForConnected(absl::ToChronoTime(slice)) || slice >= deadline) return;
  }
}

absl::StatusOr<dlrm::v1::RegisterResponse> CoordinatorClient::Register(
    const dlrm::v1::RegisterRequest& request) {
  dlrm::v1::RegisterResponse response;
  // A member may start before the coordinator (Kubernetes starts pods in any order).
  AwaitConnected(options_.timeout);
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(
      Check(coordinator_->Register(context.get(), request, &response), "Register"));
  return response;
}

absl::StatusOr<dlrm::v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const std::string& member_id, const std::string& member_key) {
  dlrm::v1::HeartbeatRequest request;
  request.set_member_id(member_id);
  request.set_member_key(member_key);
  dlrm::v1::HeartbeatResponse response;
  // While the coordinator restarts, the heartbeat is what reconnects (see Register).
  AwaitConnected(options_.timeout);
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(
      Check(coordinator_->Heartbeat(context.get(), request, &response), "Heartbeat"));
  return response;
}

absl::Status CoordinatorClient::Leave(const std::string& member_id, const std::string& member_key) {
  dlrm::v1::LeaveRequest request;
  request.set_member_id(member_id);
  request.set_member_key(member_key);
  dlrm::v1::LeaveResponse response;
  auto context = MakeClientContext(options_.timeout);
  return Check(coordinator_->Leave(context.get(), request, &response), "Leave");
}

absl::StatusOr<dlrm::v1::JobState> CoordinatorClient::ReportProgress(
    const dlrm::v1::ReportProgressRequest& request) {
  dlrm::v1::ReportProgressResponse response;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(
      Check(coordinator_->ReportProgress(context.get(), request, &response), "ReportProgress"));
  return response.state();
}

absl::Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  dlrm::v1::KvSetRequest request;
  request.set_key(key);
  request.set_value(value);
  dlrm::v1::KvSetResponse response;
  auto context = MakeClientContext(options_.timeout);
  return Check(coordinator_->KvSet(context.get(), request, &response), "KvSet");
}

absl::StatusOr<std::string> CoordinatorClient::KvGet(const std::string& key, absl::Duration wait) {
  dlrm::v1::KvGetRequest request;
  request.set_key(key);
  request.set_wait_timeout_ms(absl::ToInt64Milliseconds(wait));
  dlrm::v1::KvGetResponse response;
  auto context = MakeClientContext(wait + options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(coordinator_->KvGet(context.get(), request, &response), "KvGet"));
  return std::move(*response.mutable_value());
}

absl::StatusOr<int64_t> CoordinatorClient::KvDelete(const std::string& key, bool prefix) {
  dlrm::v1::KvDeleteRequest request;
  request.set_key(key);
  request.set_prefix(prefix);
  dlrm::v1::KvDeleteResponse response;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(
      Check(coordinator_->KvDelete(context.get(), request, &response), "KvDelete"));
  return response.deleted();
}

absl::StatusOr<int64_t> CoordinatorClient::KvAdd(const std::string& key, int64_t delta) {
  dlrm::v1::KvAddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  dlrm::v1::KvAddResponse response;
  auto context = MakeClientContext(options_.timeout);
  DLRM_RETURN_IF_ERROR(Check(coordinator_->KvAdd(context.get(), request, &response), "KvAdd"));
  return response.value();
}

dlrm::v1::RegisterRequest MakeRegisterRequest(dlrm::v1::Role role, const std::string& address,
                                              const std::string& metrics_address,
                                              const std::string& name) {
  dlrm::v1::RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  request.set_metrics_address(metrics_address);
  request.set_name(name);
  request.mutable_capabilities()->set_cpu_cores(
      static_cast<int32_t>(std::thread::hardware_concurrency()));
  return request;
}

bool RegisterRefused(const absl::Status& status) {
  return absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status) ||
         absl::IsInvalidArgument(status);
}

absl::Status RegisterWithRetry(absl::Mutex& mu, const bool* stopping, absl::Duration timeout,
                               absl::string_view who, absl::string_view coordinator, bool tls,
                               absl::FunctionRef<absl::Status()> register_once) {
  absl::Status status;
  const absl::Time give_up = absl::Now() + timeout;
  for (bool first = true; !*stopping; first = false) {
    status = register_once();
    if (status.ok() || absl::Now() > give_up || RegisterRefused(status)) break;
    if (first && !*stopping) {
      DLRM_LOG(WARNING) << who << ": cannot register with coordinator " << coordinator
                        << " yet (dialled " << (tls ? "with mutual TLS" : "in plaintext")
                        << "): " << status.message() << "; trying again for up to " << timeout;
    }
    mu.AwaitWithTimeout(absl::Condition(stopping), absl::Milliseconds(500));
  }
  if (*stopping || status.ok()) return absl::OkStatus();
  if (RegisterRefused(status)) {
    return absl::Status(status.code(),
                        absl::StrCat(who, ": the coordinator refused it: ", status.message()));
  }
  return absl::UnavailableError(absl::StrCat(who, ": cannot register with coordinator ",
                                             coordinator, ": ", status.message()));
}

bool MustRegisterAgain(const absl::Status& status) {
  return absl::IsNotFound(status) || absl::IsFailedPrecondition(status) ||
         (absl::IsPermissionDenied(status) && absl::StrContains(status.message(), "member key"));
}

bool ReplacedByNewerProcess(const absl::Status& status) { return absl::IsAlreadyExists(status); }

absl::Duration HeartbeatInterval(const dlrm::v1::RegisterResponse& response) {
  const int64_t ms = response.heartbeat_interval_ms() > 0
                         ? response.heartbeat_interval_ms()
                         : std::max<int64_t>(response.lease_ttl_ms() / 3, 10);
  return absl::Milliseconds(ms);
}

}  // namespace dlrm::client
