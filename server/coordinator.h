// `dlrm coordinator` as a library: membership, jobs, rendezvous and progress behind one gRPC
// server (Coordinator + Jobs services, grpc.health.v1 and server reflection), its state kept in
// RocksDB under data_dir, and Prometheus metrics.
//
//   DLRM_ASSIGN_OR_RETURN(auto coordinator, Coordinator::Create(options));
//   DLRM_RETURN_IF_ERROR(coordinator->Start());
//   std::cout << "listening on " << coordinator->address();
//   coordinator->Wait();  // until another thread (e.g. a signal handler's) calls Shutdown()
//
// Thread-safe: Shutdown may be called from any thread, more than once.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/metrics.h"

namespace dlrm::server {

class CoordinatorState;
class CoordinatorStore;
class CoordinatorServiceImpl;
class JobsServiceImpl;
class JobWatchers;
class RendezvousStore;
class RpcCounter;
class TimerQueue;

struct CoordinatorOptions {
  std::string listen_address = "0.0.0.0:50051";  // port 0: any free port (see port())
  std::string data_dir;                          // required: RocksDB lives here
  absl::Duration lease_ttl = absl::Seconds(14);  // members heartbeat within this
  // How often leases are checked; 0: lease_ttl / 10, within [10 ms, 1 s].
  absl::Duration expiry_check_interval = absl::ZeroDuration();
  int metrics_port = -1;          // < 0: no endpoint; 0: any free port
  std::string metrics_host = {};  // where the endpoint binds; "" = the host of listen_address
  common::TransportSecurity security = {};
  // WatchJob streams served at once; past it a new one is RESOURCE_EXHAUSTED.
  int64_t max_watch_streams = common::kMaxWatchStreams;
};

class Coordinator {
 public:
  // Opens the store and loads its state; INVALID_ARGUMENT for bad options, FAILED_PRECONDITION
  // when data_dir is held by another coordinator.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(const CoordinatorOptions& options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Binds and starts serving; UNAVAILABLE naming the address when it cannot bind.
  absl::Status Start();
  // Blocks until Shutdown has finished.
  void Wait();
  // Fails pending rendezvous gets and watch streams with UNAVAILABLE, stops the server and the
  // lease checker. Idempotent.
  void Shutdown();

  int port() const;             // bound gRPC port (after Start)
  std::string address() const;  // "host:port" (after Start)
  int metrics_port() const;     // bound metrics port, 0 if none
  CoordinatorState& state() { return *state_; }
  common::MetricsRegistry& metrics() { return *metrics_; }
  // The keys its grants are made with (common/grants.h); the RPC fuzzer signs with them.
  const common::GrantKeys& keys() const { return *keys_; }

 private:
  explicit Coordinator(const CoordinatorOptions& options);
  void ExpiryLoop();

  const CoordinatorOptions options_;
  std::unique_ptr<common::MetricsRegistry> metrics_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<CoordinatorState> state_;
  std::unique_ptr<TimerQueue> timers_;
  std::unique_ptr<RendezvousStore> kv_;
  std::unique_ptr<JobWatchers> watchers_;
  std::unique_ptr<RpcCounter> rpcs_;
  std::unique_ptr<common::GrantKeys> keys_;
  std::unique_ptr<CoordinatorServiceImpl> coordinator_service_;
  std::unique_ptr<JobsServiceImpl> jobs_service_;
  std::unique_ptr<common::GrpcServer> server_;

  absl::Mutex shutdown_mu_;
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread expiry_thread_;
  absl::Notification stopped_;
};

}  // namespace dlrm::server
