// ParameterServer: one `dlrm ps` process's server: a PsService on a gRPC server (built through
// common/grpc_util.h), with its work pool, timer thread and metrics. PsProcess (ps_process.h,
// what `dlrm ps` runs) starts it and registers it with the coordinator; workers then call
// LoadJob, Lookup and PushGradients on it.
//
//   DLRM_ASSIGN_OR_RETURN(auto ps, ParameterServer::Start({.listen_address = "0.0.0.0:7001",
//                                                          .data_dir = "/var/lib/dlrm/ps"}));
//   ... ps->port() ...
//   ps->Shutdown();   // from any thread; Wait() returns after it
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "server/ps_service.h"
#include "server/ps_work_pool.h"
#include "server/timer_queue.h"

namespace dlrm::server {

struct PsOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0: any free port (see port())
  std::string data_dir;                        // required: RocksDB tiers of the loaded jobs
  int64_t memory_budget_bytes = 1ll << 30;     // memory tiers of all jobs together
  common::MetricsRegistry* metrics = nullptr;  // not owned; null: a private registry
  int num_threads = 0;  // work-pool threads for lookups and pushes; 0: max(2, cores)
  // Test/benchmark knob (PsServiceOptions::injected_delay): sleep before each Lookup/Push.
  absl::Duration injected_delay = absl::ZeroDuration();
  bool rocksdb_wal = false;
  common::TransportSecurity security;
  // PsServiceOptions::checkpoint_root (`dlrm ps --checkpoint-root`).
  std::string checkpoint_root;
  // PsServiceOptions::store_close_wait.
  absl::Duration store_close_wait = absl::Seconds(10);
};

class ParameterServer {
 public:
  // Creates data_dir when missing and starts serving. The job stores an earlier process left in
  // data_dir (<job>/shard-<i> and its -snapshots) are removed first, unless another process has
  // one open. INVALID_ARGUMENT for bad options, UNAVAILABLE when the address cannot be bound or
  // data_dir cannot be created.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Start(const PsOptions& options);
  // Shuts down (grace 0) if still serving.
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  int port() const { return server_->port(); }
  // "host:port" with the bound port.
  const std::string& address() const { return server_->address(); }

  // Fails parked lookups, stops accepting calls, lets calls in flight finish for up to `grace`,
  // then drains the work pool. Idempotent; any thread.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown has completed.
  void Wait();

  PsService& service() { return *service_; }
  common::MetricsRegistry& metrics() { return *metrics_; }

 private:
  ParameterServer() = default;

  std::unique_ptr<common::MetricsRegistry> owned_metrics_;
  common::MetricsRegistry* metrics_ = nullptr;
  std::unique_ptr<TimerQueue> timers_;
  std::unique_ptr<PsWorkPool> pool_;
  std::unique_ptr<PsWorkPool> admin_pool_;  // LoadJob, UnloadJob (PsServiceOptions::admin_pool)
  // Checkpoint WRITEs (PsServiceOptions::checkpoint_pool): two jobs' at once.
  std::unique_ptr<PsWorkPool> checkpoint_pool_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<common::GrpcServer> server_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace dlrm::server
