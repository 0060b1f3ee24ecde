// A small synchronous client of the coordinator, for dlrmctl, `dlrm local`, and the worker and
// parameter-server processes. Every call has a deadline (options.timeout, or the one given);
// a coordinator that is gone answers UNAVAILABLE or DEADLINE_EXCEEDED within it, never hangs.
// Errors keep the server's code and message (NOT_FOUND naming the job, INVALID_ARGUMENT with
// the job-spec parser's message, ...), prefixed with the method.
//
//   DLRM_ASSIGN_OR_RETURN(auto client, CoordinatorClient::Create({.address = "127.0.0.1:50051"}));
//   DLRM_ASSIGN_OR_RETURN(dlrm::v1::Job job, client->Submit(yaml, {.workers = 2}));
//   DLRM_ASSIGN_OR_RETURN(job, client->Watch(job.job_id(), [](const dlrm::v1::JobEvent& e) {
//     std::cout << e.job().progress().step() << "\n";
//     return true;  // keep watching
//   }));
//
// Thread-safe (gRPC stubs are); one client may be shared.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/jobs.grpc.pb.h"

namespace dlrm::client {

struct CoordinatorClientOptions {
  std::string address = "127.0.0.1:50051";
  absl::Duration timeout = absl::Seconds(10);  // deadline of each unary call
  common::TransportSecurity security = {};
  // How long Watch keeps watching again after it lost a stream that had events (see Watch).
  absl::Duration watch_reconnect_for = absl::Seconds(60);
};

struct SubmitOptions {
  int workers = 1;  // workers the job runs on
  int ps = 0;       // parameter servers; 0: every PS alive when the job starts
};

class CoordinatorClient {
 public:
  // Called for every event of a watch; return false to stop watching.
  using EventCallback = std::function<bool(const dlrm::v1::JobEvent&)>;

  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(
      const CoordinatorClientOptions& options);

  const std::string& address() const { return options_.address; }

  // --- jobs ---
  absl::StatusOr<dlrm::v1::Job> Submit(const std::string& spec_yaml,
                                       const SubmitOptions& options = {});
  absl::StatusOr<dlrm::v1::Job> Get(const std::string& job_id);
  // Every job (or every one in state `filter`), oldest first: ListJobs a page at a time, each
  // page a call of its own within the timeout. page_size 0: the coordinator's (1000).
  absl::StatusOr<std::vector<dlrm::v1::Job>> List(
      dlrm::v1::JobState filter = dlrm::v1::JOB_STATE_UNSPECIFIED, int page_size = 0);
  absl::StatusOr<dlrm::v1::Job> Cancel(const std::string& job_id, const std::string& reason = "");
  // Asks a running job for a checkpoint now (Jobs.CheckpointJob).
  absl::StatusOr<dlrm::v1::Job> RequestCheckpoint(const std::string& job_id);
  // Streams the job's events to `on_event` until it reaches a terminal state, `on_event`
  // returns false, or `timeout` passes (DEADLINE_EXCEEDED). Returns the last job seen. The first
  // event (the job as it is) must come within options.timeout, as any call's answer must: before
  // it, a coordinator that cannot be reached, refuses the caller or does not answer fails the
  // watch at once with that call's error (UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED, ...).
  // Once events came, a stream that ends with UNAVAILABLE or a new one that does not answer (a
  // coordinator restarting: its jobs are in its store) is watched again, logged once, with a
  // backoff of up to 2 s, for up to options.watch_reconnect_for (60 s) and while `reconnect`
  // (when given) returns true.
  absl::StatusOr<dlrm::v1::Job> Watch(const std::string& job_id, const EventCallback& on_event,
                                      absl::Duration timeout = absl::Hours(24 * 7),
                                      const std::function<bool()>& reconnect = nullptr);

  // --- cluster ---
  absl::StatusOr<dlrm::v1::GetClusterViewResponse> Members();

  // --- member side (parameter servers and workers) ---
  absl::StatusOr<dlrm::v1::RegisterResponse> Register(const dlrm::v1::RegisterRequest& request);
  // Ends the waits for a connection that Register and Heartbeat make first (each then goes on at
  // once, and fails fast while the channel is down): a member stopped while its coordinator is
  // away exits now, not after the rest of a wait of up to `timeout`. For shutdown: it stays so.
  // Safe from any thread.
  void StopWaiting() { stop_waiting_.store(true); }
  // `member_key`: RegisterResponse.member_key, the member's proof of its id.
  absl::StatusOr<dlrm::v1::HeartbeatResponse> Heartbeat(const std::string& member_id,
                                                        const std::string& member_key);
  absl::Status Leave(const std::string& member_id, const std::string& member_key);
  absl::StatusOr<dlrm::v1::JobState> ReportProgress(const dlrm::v1::ReportProgressRequest& request);

  // --- rendezvous ---
  absl::Status KvSet(const std::string& key, const std::string& value);
  // Waits up to `wait` for the key (NOT_FOUND naming it after that); the call's deadline is
  // `wait` plus options.timeout.
  absl::StatusOr<std::string> KvGet(const std::string& key,
                                    absl::Duration wait = absl::ZeroDuration());
  absl::StatusOr<int64_t> KvDelete(const std::string& key, bool prefix = false);
  absl::StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta);

 private:
  CoordinatorClient(const CoordinatorClientOptions& options,
                    std::shared_ptr<grpc::Channel> channel);
  absl::Status Check(const grpc::Status& status, const char* method) const;
  // Waits up to `wait` for the channel to connect (at once when it is).
  void AwaitConnected(absl::Duration wait);

  CoordinatorClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<dlrm::v1::Coordinator::Stub> coordinator_;
  std::unique_ptr<dlrm::v1::Jobs::Stub> jobs_;
  std::atomic<bool> stop_waiting_{false};
};

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminalJobState(dlrm::v1::JobState state);

// The request a member process (parameter server, worker) registers with: its role, addresses,
// name and this machine's cores.
dlrm::v1::RegisterRequest MakeRegisterRequest(dlrm::v1::Role role, const std::string& address,
                                              const std::string& metrics_address,
                                              const std::string& name);
// How often a registered member heartbeats: the coordinator's suggestion, else a third of the
// lease (at least 10 ms).
absl::Duration HeartbeatInterval(const dlrm::v1::RegisterResponse& response);
// A Register that trying again cannot fix: the coordinator refused the caller's identity
// (UNAUTHENTICATED, PERMISSION_DENIED) or the request (INVALID_ARGUMENT). Members stop at once
// with it instead of retrying until their register timeout.
bool RegisterRefused(const absl::Status& status);
// Registers a member process (`who`: "worker", "parameter server") with the coordinator at
// `coordinator`: calls register_once, with mu held, until it succeeds, the coordinator refuses it
// (RegisterRefused), `timeout` has passed or *stopping is set, waiting up to 500 ms on mu between
// tries, since the coordinator may start after its members (dlrm local, Kubernetes). OK when it
// registered or *stopping was set (the caller checks which); otherwise the last error, saying who
// could not register where. The first failed try is logged as a warning, saying whether it
// dialled with TLS (`tls`) or in plaintext: a member whose coordinator is down, at a wrong address
// or speaking the other protocol waited out `timeout` without a word.
absl::Status RegisterWithRetry(absl::Mutex& mu, const bool* stopping, absl::Duration timeout,
                               absl::string_view who, absl::string_view coordinator, bool tls,
                               absl::FunctionRef<absl::Status()> register_once)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
// A Heartbeat answer that means the member must register again: the coordinator no longer knows
// it (lease expired, restarted without its data) or no longer accepts its key.
bool MustRegisterAgain(const absl::Status& status);
// A Heartbeat answer that means a newer process registered with this member's name (the member
// restarted elsewhere, or a second process was started under the same name): this one must stop.
bool ReplacedByNewerProcess(const absl::Status& status);

}  // namespace dlrm::client
