// WorkerProcess: `dlrm worker` as a library. It registers with the coordinator (role WORKER),
// keeps its lease with a heartbeat thread (registering again when told the lease expired), and
// serves jobs one after another: when a heartbeat carries an assignment (job, rank, world size,
// spec, parameter-server addresses in shard order) it
//
//   1. loads the job's tables on every parameter server (GrpcPsClient::LoadJobOnAll, idempotent),
//   2. bootstraps an allreducer through the coordinator's rendezvous (world size > 1): NCCL
//      between GPU workers (dense gradients summed in device memory), Gloo between CPU workers,
//   3. reads its slice of the input (OpenJobInput with rank/world and even shards, so every
//      rank takes the same number of steps),
//   4. trains with the same Trainer as `dlrm train` (through the TrainingPipeline, or the plain
//      Trainer::Step loop when options.use_pipeline is false),
//   5. reports progress (ReportProgress every progress_interval) and, after a barrier, rank 0
//      evaluates on the eval split and reports the final metrics with done = true.
//
// A failure is reported as failed with its message; one caused by a lost peer (PeerLost) says so,
// and the coordinator then recovers the job instead of failing it. When the job disappears from
// the heartbeat answer (cancelled, failed, RECOVERING), comes back at another job epoch (run
// again after a recovery), or ReportProgress answers a state other than RUNNING, the worker
// stops the run promptly (the parameter-server client's calls are cancelled) and takes the next
// assignment. A run after a recovery (JobAssignment.recovery > 0) asks the servers for fresh
// tables (LoadJob restart) and rolls back to the newest valid checkpoint in the spec's
// checkpoint.dir (rank 0 picks it and tells the others through the rendezvous store), or to the
// job's start when there is none.
//
//   DLRM_ASSIGN_OR_RETURN(auto worker, WorkerProcess::Create({.coordinator = "10.0.0.2:50051"}));
//   std::thread stopper([&] { WaitForSignal(); worker->Shutdown(); });
//   absl::Status status = worker->Run();   // returns after Shutdown()
//
// Thread-safe: Shutdown may be called from any thread (e.g. a signal thread), more than once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "proto/coordinator.pb.h"
#include "worker/hot_refresh.h"

namespace dlrm::worker {

// The final report of a run that the coordinator could not take yet, kept to be sent again
// (WorkerProcess::SendFinalReport), and what it is for the logs. A report is told from the one
// that replaced it by the generation Keep gave it, not by its bytes: rank 0's end carries the
// metrics map, whose serialization order differs between copies of the message, so a delivered
// report never matched its copy, stayed, and was sent again (and refused) at every heartbeat.
class UndeliveredReport {
 public:
  struct Entry {
    dlrm::v1::ReportProgressRequest report;
    std::string what;
    uint64_t generation = 0;
  };
  // Replaces whatever report was kept.
  void Keep(const dlrm::v1::ReportProgressRequest& report, std::string what)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of the kept report, if any.
  std::optional<Entry> Get() const ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator answered `entry` (took or refused it): forgets it, unless a newer report was
  // kept since.
  void Done(const Entry& entry) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::optional<Entry> entry_ ABSL_GUARDED_BY(mu_);
  uint64_t generations_ ABSL_GUARDED_BY(mu_) = 0;
};

struct WorkerProcessOptions {
  std::string coordinator = "127.0.0.1:50051";
  // Of the calls to the coordinator and the parameter servers (mutual TLS or plaintext).
  common::TransportSecurity security;
  std::string device = "auto";  // auto | cpu | cuda: overrides the spec's training.device
  // The CUDA device this worker trains on when its device is CUDA (NCCL needs one a rank: `dlrm
  // local` gives worker i device i). kNoCudaDevice (-1): none of its own, so a job asking for
  // cuda fails and one asking auto trains on the CPU (`dlrm local`, fewer GPUs than workers).
  int cuda_device = 0;
  // Address Gloo binds and advertises to the other ranks; "" = resolve this host's name.
  std::string advertise_host;
  std::string metrics_address;  // advertised to the coordinator ("host:port"), may be empty
  std::string name;             // a label shown by `dlrmctl members`
  int threads = 0;              // CPU threads for BLAS; 0 = all cores
  // true: the pipelined trainer (stages on threads, staleness k from the spec); false: the plain
  // Trainer::Step loop. Both give the same model for k = 0.
  bool use_pipeline = true;
  bool use_hot_rows = true;  // replicate the job's hot rows here when its spec has a hot_budget
  // With hot rows, more than one worker, CPU collectives and staleness >= 1: exchange the hot
  // rows' gradients over connections of their own while the next step computes, one step stale
  // (TrainerOptions::hot_allreducer). false: on the compute thread, before the next step.
  bool overlap_hot_exchange = true;
  // CPU workers of a multi-worker job: allreduce the dense gradients in buckets while the
  // backward runs (TrainerOptions::overlap_dense_allreduce). false: after the backward.
  bool overlap_dense_allreduce = true;
  // CPU workers of a multi-worker job: small collectives go by direct exchange (every payload to
  // every peer into receives posted ahead; GlooAllReducer). false: Gloo's ring for every size.
  bool direct_collectives = true;
  absl::Duration progress_interval = absl::Seconds(1);
  absl::Duration coordinator_rpc_timeout = absl::Seconds(10);  // each call to the coordinator
  absl::Duration collective_timeout = absl::Seconds(120);
  common::MetricsRegistry* metrics = nullptr;  // not owned; may be null
};

// A failure caused by a peer that is gone or cannot be reached (a parameter server or another
// rank): UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, or a server that no longer has the job.
bool PeerLost(const absl::Status& status);

class WorkerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Create(const WorkerProcessOptions& options);
  ~WorkerProcess();

  // Registers and serves jobs until Shutdown(). Returns an error only when the coordinator
  // could not be reached at all at start-up (UNAVAILABLE naming it).
  absl::Status Run();
  // Stops the job in progress, leaves the cluster and makes Run() return.
  void Shutdown();

  // Jobs finished by this worker (any outcome), for tests and logs.
  int64_t jobs_done() const { return jobs_done_.load(); }

 private:
  struct JobResources;  // the backend and collectives of one run (job_run.h)
  class JobRun;         // one run of a job on this rank, set-up to final report (job_run.h)
  explicit WorkerProcess(const WorkerProcessOptions& options);

  absl::Status RegisterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeartbeatLoop();
  // Trains one assignment to the end; reports its outcome to the coordinator.
  void RunJob(const dlrm::v1::WorkerAssignment& assignment);
  // A progress report of `assignment`'s rank, signed with this member's id and key.
  dlrm::v1::ReportProgressRequest NewReport(const dlrm::v1::WorkerAssignment& assignment)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sends a run's final report (its failure, or rank 0's done). One the coordinator could not take
  // (unreachable or timed out: a coordinator restarting) is kept and sent again before each
  // heartbeat until it answers, since only that report moves the job on: without it the job
  // stays RUNNING on workers that already left the run. `what` names it in the logs.
  // Returns the coordinator's answer, or OK for a report kept to send again.
  absl::Status SendFinalReport(const dlrm::v1::ReportProgressRequest& report,
                               const std::string& what) ABSL_LOCKS_EXCLUDED(mu_);
  void ResendUndeliveredReport() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status TrainJob(const dlrm::v1::WorkerAssignment& assignment, JobResources* resources);
  bool JobCancelled(const std::string& job_id);
  // KvGet of `key` from the coordinator, waiting up to collective_timeout for it to be set, in
  // waits of a second: CANCELLED as soon as the job is stopped (a run whose rank 0 died must not
  // wait for a word that never comes).
  absl::StatusOr<std::string> KvGetUntilStopped(const std::string& key);

  WorkerProcessOptions options_;
  std::unique_ptr<client::CoordinatorClient> client_;
  std::thread heartbeat_thread_;
  std::atomic<int64_t> jobs_done_{0};
  std::atomic<bool> cancel_job_{false};
  // JobAssignment.checkpoint_requests of the latest heartbeat (`dlrmctl checkpoint` calls).
  std::atomic<int64_t> checkpoint_requests_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why Run stops on its own: a newer process registered with this worker's name.
  absl::Status replaced_ ABSL_GUARDED_BY(mu_);
  std::string member_id_ ABSL_GUARDED_BY(mu_);
  std::string member_key_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  // The latest assignment a heartbeat carried; cleared when a heartbeat carries none.
  bool has_assignment_ ABSL_GUARDED_BY(mu_) = false;
  dlrm::v1::WorkerAssignment assignment_ ABSL_GUARDED_BY(mu_);
  std::string running_job_ ABSL_GUARDED_BY(mu_);  // "job@epoch" being trained, "" when idle
  bool poll_now_ ABSL_GUARDED_BY(mu_) = false;    // wakes the heartbeat thread early
  std::set<std::string> finished_jobs_ ABSL_GUARDED_BY(mu_);  // "job@epoch" runs done
  // A final report the coordinator has not taken yet, and what it is (SendFinalReport).
  UndeliveredReport undelivered_;
  // Called (under mu_) to stop the training in progress; set by a JobRun.
  std::function<void()> cancel_hook_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlrm::worker
