// `dlrm local` as a library: a whole cluster on this machine. LocalCluster starts a coordinator,
// N parameter servers and M workers as CHILD PROCESSES of the `dlrm` binary on free loopback
// ports (the coordinator binds port 0 and writes the bound port to a file; parameter servers and
// workers bind port 0 and register with it), with their data directories and logs under one
// folder, and stops them again: SIGTERM, a grace period, then SIGKILL. Children die with the
// parent (PR_SET_PDEATHSIG), so even a SIGKILLed `dlrm local` leaves no orphans; the temporary
// folder it made (without --data-dir) is removed by the next `dlrm local` that makes one, which
// finds its lock file unheld (a folder kept on purpose, for its logs, has none). Once the
// cluster is up, a child that dies is started again with the same flags (the coordinator on the
// port it had, with the same data folder, so it resumes its jobs; a parameter server or worker
// registers as a new member and replaces the dead one), as Kubernetes restarts a pod: after
// 200 ms, doubling up to 10 s while a child keeps exiting on its own within 10 s of its start.
//
// RunLocalCommand submits a job spec to such a cluster through the client library, shows its
// progress, prints the final metrics as `dlrm train` does (and writes --metrics-out with the same
// JSON, and --report: the HTML run report of worker/run_report.h, also for a job that fails or is
// interrupted), and returns the job's result as an exit code: 0 SUCCEEDED, 1 FAILED or
// CANCELLED, 2 bad arguments or spec, 130 interrupted (SIGINT/SIGTERM, forwarded to the children).
//
// Threading: LocalCluster::Stop may be called from any thread, more than once.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"

namespace dlrm::client {

struct LocalClusterOptions {
  std::string dlrm_binary;    // "" = this executable (/proc/self/exe)
  int num_ps = 1;             // 1..kMaxLocalMembers (common/limits.h)
  int num_workers = 1;        // 1..kMaxLocalMembers
  std::string data_dir;       // "" = a fresh temporary folder, removed by Stop()
  std::string memory_budget;  // each parameter server's --memory-budget ("" = its default)
  absl::Duration lease_ttl = absl::Seconds(14);
  std::string device = "auto";  // workers' --device
  int worker_threads = 0;       // workers' --threads; 0 = cores / workers (at least 1)
  bool worker_pipeline = true;  // false: workers run the plain Trainer::Step loop
  // false: workers exchange hot-row gradients before the next step (--sync-hot-exchange)
  bool worker_overlap_hot_exchange = true;
  // false: workers allreduce the dense gradients after the backward (--sync-dense-allreduce)
  bool worker_overlap_dense_allreduce = true;
  // false: workers send every collective around Gloo's ring (--ring-collectives)
  bool worker_direct_collectives = true;
  bool worker_hot_rows = true;  // false: workers keep no hot rows (every row on the PS)
  std::string log_level;        // children's --log-level ("" = theirs)
  // Every child serves Prometheus metrics on 127.0.0.1: the coordinator on metrics_base_port,
  // parameter server i on base + 1 + i, worker i after the parameter servers (9100.. matches the
  // dlrm-local job of deploy/prometheus/prometheus.yml); base 0: free ports chosen at launch.
  bool metrics = false;
  int metrics_base_port = 9100;
  absl::Duration ready_timeout = absl::Seconds(60);
  absl::Duration stop_grace = absl::Seconds(10);  // SIGTERM -> SIGKILL
  bool restart_children = true;  // start a child that dies again (see the file comment)
  // Mutual TLS between the children (and this process's calls), with a CA and certificates made
  // for this cluster at launch in data_dir/tls (the layout of `dlrm certs`; dlrmctl takes
  // --tls-dir data_dir/tls/admin). false: plaintext gRPC on loopback.
  bool tls = true;
};

class LocalCluster {
 public:
  // Validates the options and makes the data folder; starts nothing yet.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Create(const LocalClusterOptions& options);
  ~LocalCluster();  // Stop()

  // Starts every child and waits until the coordinator answers and every parameter server and
  // worker holds a lease. On failure the error names the child and its log (call Stop() to
  // clean up). CANCELLED when Stop() is called meanwhile (e.g. by a signal thread).
  absl::Status Launch();

  const std::string& coordinator_address() const { return coordinator_address_; }
  // How this process's own calls to the cluster are secured (the admin identity under TLS).
  common::TransportSecurity client_security() const;
  // --tls-dir for dlrmctl, "" without TLS.
  std::string admin_tls_dir() const;
  const std::string& data_dir() const { return data_dir_; }
  // Log file of each child, e.g. {"coordinator", ".../logs/coordinator.log"}.
  std::vector<std::pair<std::string, std::string>> logs() const;
  // Keeps a temporary data_dir (and the logs in it) when the cluster stops, e.g. after a failure.
  void KeepDataDir();
  // With options.metrics: the scrape targets, {component, "127.0.0.1:port"} per child, in the
  // order coordinator, parameter servers, workers. Empty before Launch.
  const std::vector<std::pair<std::string, std::string>>& metrics_targets() const {
    return metrics_targets_;
  }
  // Pids of the children still running.
  std::vector<pid_t> pids() const;
  // Times the child `name` ("coordinator", "ps-0", "worker-1") was restarted.
  int restarts(const std::string& name) const;

  // SIGTERMs the workers (up to 2 s to leave), then every child; SIGKILLs what is left after
  // options.stop_grace; reaps all. Removes a temporary data_dir. Idempotent, any thread.
  void Stop();

 private:
  struct Child {
    std::string name;
    std::vector<std::string> args;  // after the binary (and --log-level)
    std::string log_path;
    pid_t pid = -1;
    absl::Time started;
    absl::Time restart_at = absl::InfiniteFuture();  // when dead: when to start it again
    absl::Duration backoff;
    int restarts = 0;
  };

  explicit LocalCluster(const LocalClusterOptions& options) : options_(options) {}
  absl::Status Spawn(const std::string& name, const std::vector<std::string>& args);
  // Forks and execs `child` (its log truncated, or appended to for a restart).
  absl::Status StartChildLocked(Child* child, bool append_log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The supervisor thread: reaps dead children and starts them again until Stop().
  void Supervise();
  void JoinSupervisor();
  absl::Status WaitReady();
  // Polls for the coordinator's port file.
  absl::Status WaitForPortFile(const std::string& path);
  // SIGTERMs the children whose name starts with `prefix` and reaps them for up to `wait`.
  void SignalAndWait(const std::string& prefix, absl::Duration wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LogTail(const std::string& name) const;
  // The --metrics-port/--metrics-listen flags of the next child of `component` (none without
  // options.metrics), recording its scrape target.
  absl::StatusOr<std::vector<std::string>> MetricsArgs(const std::string& component);
  // --tls-dir of `identity` (coordinator, ps, worker) under TLS, nothing otherwise.
  std::vector<std::string> TlsArgs(const std::string& identity) const;

  LocalClusterOptions options_;
  std::string binary_;
  std::string data_dir_;
  bool temp_dir_ = false;
  // The flock on data_dir_'s lock file while a temporary folder is this run's (-1: none): a later
  // `dlrm local` removes the temporary folders whose lock nobody holds.
  int temp_lock_fd_ = -1;
  std::string coordinator_address_;
  std::vector<std::pair<std::string, std::string>> metrics_targets_;

  mutable absl::Mutex mu_;
  std::vector<Child> children_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool keep_data_dir_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serialises joining the supervisor (Stop and the destructor)
  std::thread supervisor_;
};

struct LocalCommandOptions {
  std::string config_path;
  std::string resume_from;    // "" = a fresh job; else the spec's checkpoint.resume_from
  std::string metrics_out;    // "" = none
  std::string report;         // --report: the HTML run report (worker/run_report.h); "" = none
  bool keep_running = false;  // after the job, keep the cluster up until Ctrl-C
  bool show_progress = true;
  LocalClusterOptions cluster;
};

// Runs `dlrm local`; returns the process exit code (see the file comment).
int RunLocalCommand(const LocalCommandOptions& options);

}  // namespace dlrm::client
