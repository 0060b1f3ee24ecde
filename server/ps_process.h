// PsProcess: `dlrm ps` as a library. Starts a ParameterServer, registers it with the
// coordinator (role PS, its advertised address), keeps the lease with a heartbeat thread
// (registering again when told the lease expired) and serves until Shutdown(). Workers load
// jobs on it themselves (LoadJob); when a job this PS was serving disappears from the
// heartbeat's PsAssignment (finished, failed, cancelled), the PS unloads it and frees its memory
// and disk.
//
//   DLRM_ASSIGN_OR_RETURN(auto ps, PsProcess::Create({.coordinator = "10.0.0.2:50051",
//                                                     .server = {.listen_address = "0.0.0.0:7001",
//                                                                .data_dir = "/data"}}));
//   std::thread stopper([&] { WaitForSignal(); ps->Shutdown(); });
//   absl::Status status = ps->Run();   // returns after Shutdown()
//
// Or in one call: RunParameterServer(options, &stop_notification).
//
// Thread-safe: Shutdown may be called from any thread, more than once, before or during Run.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "server/ps_server.h"

namespace dlrm::server {

struct PsProcessOptions {
  std::string coordinator = "127.0.0.1:50051";
  PsOptions server;
  // host:port workers reach this PS at; empty: the bound address (with 0.0.0.0 / [::] replaced
  // by 127.0.0.1, which suits a single machine only).
  std::string advertise_address;
  std::string metrics_address;  // advertised to the coordinator, may be empty
  std::string name;             // a label shown by `dlrmctl members`
  absl::Duration coordinator_rpc_timeout = absl::Seconds(10);  // each call to the coordinator
  // How long Run keeps trying to register at start-up (the coordinator may start after us).
  absl::Duration register_timeout = absl::Seconds(60);
};

class PsProcess {
 public:
  // Starts the gRPC server (so port() is known at once); registration happens in Run.
  static absl::StatusOr<std::unique_ptr<PsProcess>> Create(const PsProcessOptions& options);
  ~PsProcess();

  // Registers, heartbeats and serves until Shutdown(). UNAVAILABLE naming the coordinator when it
  // cannot be reached within register_timeout.
  absl::Status Run();
  // Leaves the cluster (from Run), stops the server; Run returns.
  void Shutdown();

  ParameterServer& server() { return *server_; }
  const std::string& advertise_address() const { return advertise_address_; }

 private:
  explicit PsProcess(const PsProcessOptions& options);
  absl::Status RegisterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unloads the loaded jobs that this heartbeat's answer (of cluster epoch `epoch`) does not list
  // as running, unless loaded at a newer epoch.
  void SyncJobs(const dlrm::v1::PsAssignment& assignment, int64_t epoch);

  PsProcessOptions options_;
  std::string advertise_address_;
  std::unique_ptr<ParameterServer> server_;
  std::unique_ptr<client::CoordinatorClient> client_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why Run stops on its own: a newer process registered with this parameter server's name.
  absl::Status replaced_ ABSL_GUARDED_BY(mu_);
  std::string member_id_ ABSL_GUARDED_BY(mu_);
  std::string member_key_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
};

// Create + Run, returning when `stop` is notified (not owned; may be null: run until the
// process ends). The status of start-up or registration otherwise.
absl::Status RunParameterServer(const PsProcessOptions& options, absl::Notification* stop);

}  // namespace dlrm::server
