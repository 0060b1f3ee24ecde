// WorkerProcess's run of one job (worker_process.h). RunJob reports the outcome (and a failure's
// cause) to the coordinator; WorkerProcess::JobRun is the run itself: SetUp (the parameter
// servers, the collectives, the trainer, resume and recovery, the checkpointer), Train (the
// pipelined or plain step loop, with progress reports, checkpoint cuts and evaluations at step
// boundaries) and Finish (the final checkpoint, evaluation and report). Membership and the job
// loop are in worker_process.cc, the job's hot rows in worker_hot_rows.cc.
#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <new>
#include <numeric>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/checkpoint.h"
#include "worker/gloo_allreducer.h"
#include "worker/gpu_allreducer.h"
#include "worker/hot_refresh.h"
#include "worker/job_input.h"
#include "worker/network_bytes.h"
#include "worker/pipeline.h"
#include "worker/ps_client.h"
#include "worker/train_command.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"
#include "worker/worker_process.h"

namespace dlrm::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Steps between two decision boundaries of a job with checkpoints (worker_job.cc TrainJob): the
// most a checkpoint asked for by time or by `dlrmctl checkpoint` waits, in steps.
constexpr int64_t kCheckpointDecisionSteps = 50;

// How long a worker's calls retry a parameter server that cannot be reached (PsClientOptions).
constexpr absl::Duration kPsRetryBudget = absl::Seconds(5);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A reader that counts the batches of the epoch in progress and the rewinds, so a checkpoint
// taken at a drained step boundary knows where the input stands (the pipeline reads ahead only
// between boundaries).
class CountingReader : public BatchReader {
 public:
  CountingReader(BatchReader* reader, int64_t already_read)
      : reader_(reader), batches_(already_read) {}
  absl::StatusOr<bool> Next(Batch* batch) override {
    absl::StatusOr<bool> more = reader_->Next(batch);
    if (more.ok() && *more) ++batches_;
    return more;
  }
  absl::Status Rewind() override {
    ++rewinds_;
    batches_ = 0;
    return reader_->Rewind();
  }
  int64_t records_read() const override { return reader_->records_read(); }
  int64_t skipped() const override { return reader_->skipped(); }
  int64_t rewinds() const { return rewinds_; }
  int64_t batches_in_epoch() const { return batches_; }

 private:
  BatchReader* reader_;
  int64_t batches_;
  int64_t rewinds_ = 0;
};

}  // namespace

// What a run holds open for its peers: RunJob owns it, so that it outlives TrainJob until the
// outcome is reported.
struct WorkerProcess::JobResources {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<GlooAllReducer> gloo;      // declared after the backend: destroyed before it
  std::unique_ptr<GlooAllReducer> hot_gloo;  // the overlapped hot-row exchange's own connections
  std::unique_ptr<NcclAllReducer> nccl;
};

void WorkerProcess::RunJob(const dlrm::v1::WorkerAssignment& assignment) {
  const std::string& job_id = assignment.job().job_id();
  DLRM_LOG(INFO) << "job " << job_id << ": rank " << assignment.rank() << " of "
                 << assignment.job().world_size() << ", " << assignment.job().ps_addresses_size()
                 << " parameter server(s)";
  const WorkerMetrics metrics = RegisterWorkerMetrics(options_.metrics);
  if (metrics.job_running != nullptr) metrics.job_running->Set(1);
  // Declared before the try: a failure is reported to the coordinator while the collectives are
  // still open, so the peers see this rank go only after the coordinator has the cause.
  JobResources resources;
  absl::Status status;
  try {
    status = TrainJob(assignment, &resources);
  } catch (const std::bad_alloc& e) {
    // The spec's limits (common/limits.h) keep a job's allocations sane, but a job can still be
    // too big for this machine: it fails with the reason at once, and the worker lives on.
    status = absl::ResourceExhaustedError(absl::StrCat("job ", job_id, " rank ", assignment.rank(),
                                                       ": out of memory on this worker (", e.what(),
                                                       ")"));
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("job ", job_id, " rank ", assignment.rank(),
                                              ": exception in training: ", e.what()));
  }
  if (metrics.job_running != nullptr) {
    metrics.job_running->Set(0);
    const bool stopped = cancel_job_.load() || status.code() == absl::StatusCode::kCancelled;
    (status.ok() ? metrics.jobs_succeeded
     : stopped   ? metrics.jobs_stopped
                 : metrics.jobs_failed)
        ->Increment();
  }
  if (status.ok()) return;
  if (cancel_job_.load() || status.code() == absl::StatusCode::kCancelled) {
    DLRM_LOG(INFO) << "job " << job_id << " stopped on rank " << assignment.rank() << ": "
                   << status.message();
    return;
  }
  const bool peer_lost = PeerLost(status);
  DLRM_LOG(ERROR) << "job " << job_id << " failed on rank " << assignment.rank()
                  << (peer_lost ? " (a peer was lost; the job recovers): " : ": ")
                  << status.ToString();
  dlrm::v1::ReportProgressRequest report = NewReport(assignment);
  report.set_failed(true);
  report.set_peer_unreachable(peer_lost);
  // The coordinator refuses messages over common::kMaxMessageBytes: keep the start of a long one.
  std::string message = status.ToString();
  if (message.size() > 4096) message = absl::StrCat(message.substr(0, 4096), "... (truncated)");
  report.set_message(message);
  absl::StatusOr<dlrm::v1::JobState> state = client_->ReportProgress(report);
  if (!state.ok()) DLRM_LOG(WARNING) << "reporting the failure: " << state.status().message();
}

dlrm::v1::ReportProgressRequest WorkerProcess::NewReport(
    const dlrm::v1::WorkerAssignment& assignment) {
  dlrm::v1::ReportProgressRequest report;
  report.set_job_id(assignment.job().job_id());
  report.set_rank(assignment.rank());
  report.set_job_epoch(assignment.job().job_epoch());
  absl::MutexLock lock(&mu_);
  report.set_member_id(member_id_);
  report.set_member_key(member_key_);
  return report;
}

// One run of a job on this rank, from its set-up to the report that ends it (TrainJob): what the
// run holds, and a method for each of its parts. A nested class of WorkerProcess, so that it
// reaches the worker's coordinator client, options and cancellation.
class WorkerProcess::JobRun {
 public:
  JobRun(WorkerProcess& worker, const dlrm::v1::WorkerAssignment& assignment,
         JobResources* resources)
      : worker_(worker),
        assignment_(assignment),
        job_(assignment.job()),
        job_id_(job_.job_id()),
        rank_(assignment.rank()),
        world_(job_.world_size()),
        resources_(resources) {}
  // Gives the worker back its plain cancel hook once nothing calls the store, before the store
  // is destroyed.
  ~JobRun();
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  // The parameter servers, the peers, the input, the trainer, the checkpoint this run starts
  // from, its hot rows and its checkpointer.
  absl::Status SetUp();
  // Trains what is left of the job: pipelined, or step by step.
  absl::Status Train();
  // The final checkpoint (the trained model), rank 0's evaluation, and the report that ends the
  // job.
  absl::Status Finish();

 private:
  absl::Status ConnectStore();
  absl::Status ConnectPeers();
  // Where this run starts (the spec's resume_from, or after a recovery the newest checkpoint
  // that verifies, as rank 0 chose) and the state restored from it.
  absl::Status Restore();
  absl::Status CreateCheckpointer();

  // Progress: every progress_interval (or when forced), to the coordinator; its answer tells if
  // the job still runs.
  absl::Status ReportProgress(bool force);
  absl::Status OnStep(int64_t batch_size, float loss);

  // Step boundaries of every rank (the pipeline drained).
  TrainPosition Position(int64_t run_steps) const;
  absl::Status Barrier();
  absl::Status Cut(int64_t run_steps);
  absl::Status Evaluate(int64_t run_steps);
  absl::StatusOr<bool> CheckpointDue(int64_t run_steps);

  absl::Status RunPipeline();
  absl::Status RunStepByStep();
  absl::StatusOr<std::string> KvGetUntilStopped(const std::string& key);

  WorkerProcess& worker_;
  const dlrm::v1::WorkerAssignment& assignment_;
  const dlrm::v1::JobAssignment& job_;
  const std::string job_id_;
  const int rank_;
  const int world_;
  JobResources* resources_;

  common::JobSpec submitted_;  // as submitted: its batch_size is the job's global batch
  common::JobSpec spec_;       // this rank's: batch_size is its share of every step
  std::unique_ptr<GrpcPsClient> store_;
  std::function<void()> store_hook_;  // stops the run and cancels the store's calls
  bool hook_installed_ = false;
  DenseAllReducer* reducer_ = nullptr;      // dense gradients (Gloo or NCCL); null alone
  DenseAllReducer* hot_reducer_ = nullptr;  // the overlapped hot-row exchange's own (Gloo)
  JobInput input_;
  std::unique_ptr<Trainer> trainer_;
  TrainPosition base_;  // where this run starts in the job's numbering
  std::vector<std::vector<int64_t>> resumed_hot_ids_;
  bool resumed_ = false;
  std::unique_ptr<HotSetRefresher> refresher_;
  std::unique_ptr<ClusterCheckpointer> checkpointer_;
  WorkerMetrics metrics_;

  Clock::time_point start_;
  Clock::time_point last_report_;
  Clock::time_point last_step_;
  NetworkSnapshot network_start_;
  int64_t samples_ = 0;  // this run's, on this rank
  int64_t steps_ = 0;    // this run's
  double loss_avg_ = 0;
  int64_t migrations_reported_ = 0;
  int64_t total_steps_ = -1;                 // the job's steps, -1 when unknown
  std::map<std::string, double> last_eval_;  // rank 0's latest periodic evaluation
  bool evaluated_ = false;
  std::unique_ptr<CountingReader> train_reader_;  // what this run reads, for checkpoints

  int epochs_left_ = 0;
  int64_t max_steps_left_ = 0;
  bool nothing_left_ = false;
  int64_t checkpoint_every_ = 0;
  int64_t refresh_every_ = 0;
  int64_t eval_every_ = 0;
  int64_t decide_every_ = 0;
  int64_t requests_served_ = 0;
};

WorkerProcess::JobRun::~JobRun() {
  // What may still call the store (the checkpoint writer, the trainer's threads) goes first,
  // while a stop still cancels the store's calls.
  checkpointer_.reset();
  refresher_.reset();
  trainer_.reset();
  if (!hook_installed_) return;
  absl::MutexLock lock(&worker_.mu_);
  worker_.cancel_hook_ = [w = &worker_] { w->cancel_job_.store(true); };
}

absl::Status WorkerProcess::TrainJob(const dlrm::v1::WorkerAssignment& assignment,
                                     JobResources* resources) {
  JobRun run(*this, assignment, resources);
  DLRM_RETURN_IF_ERROR(run.SetUp());
  DLRM_RETURN_IF_ERROR(run.Train());
  return run.Finish();
}

absl::Status WorkerProcess::JobRun::SetUp() {
  DLRM_ASSIGN_OR_RETURN(submitted_,
                        common::ParseJobSpec(job_.job_spec_yaml(), absl::StrCat("job ", job_id_)));
  // training.batch_size is the job's global batch: this rank trains on its share of every step,
  // and the gradients are averaged over the ranks (Trainer), so the model is the one a single
  // process trains. Everything below reads its batch size from `spec_`.
  spec_ = submitted_;
  DLRM_ASSIGN_OR_RETURN(spec_.batch_size, common::WorkerBatchSize(submitted_, world_));
  if (job_.ps_addresses_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, ": no parameter-server addresses"));
  }
  const WorkerProcessOptions& options = worker_.options_;
  DLRM_ASSIGN_OR_RETURN(
      resources_->backend,
      CreateBackendForDevice(
          options.device.empty() || options.device == "auto" ? spec_.device : options.device,
          spec_.math_mode, options.threads));
  DLRM_RETURN_IF_ERROR(ConnectStore());
  DLRM_RETURN_IF_ERROR(ConnectPeers());

  DLRM_ASSIGN_OR_RETURN(
      input_, OpenJobInput(spec_, {.rank = rank_, .world_size = world_, .even_shards = true}));
  TrainerOptions trainer_options;
  trainer_options.spec = spec_;
  trainer_options.backend = resources_->backend.get();
  trainer_options.store = store_.get();
  trainer_options.allreducer = reducer_;
  trainer_options.device_allreducer = resources_->nccl.get();
  trainer_options.hot_allreducer = hot_reducer_;
  trainer_options.overlap_dense_allreduce = options.overlap_dense_allreduce;
  trainer_options.threads = options.threads;
  DLRM_ASSIGN_OR_RETURN(trainer_, Trainer::Create(trainer_options));

  DLRM_RETURN_IF_ERROR(Restore());
  DLRM_ASSIGN_OR_RETURN(refresher_,
                        worker_.SetUpHotRows(spec_, job_, rank_, world_, trainer_.get(), reducer_,
                                             resumed_, std::move(resumed_hot_ids_)));
  DLRM_RETURN_IF_ERROR(CreateCheckpointer());
  metrics_ = RegisterWorkerMetrics(options.metrics);
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::ConnectStore() {
  const WorkerProcessOptions& options = worker_.options_;
  // The embedding tables live on the parameter servers.
  PsClientOptions ps_options;
  ps_options.ps_addresses.assign(job_.ps_addresses().begin(), job_.ps_addresses().end());
  ps_options.job_id = job_id_;
  ps_options.security = options.security;
  ps_options.job_epoch = job_.job_epoch();
  ps_options.worker_rank = rank_;
  ps_options.job_grant = assignment_.job_grant();
  // A parameter server refusing connections for this long is gone: the run fails with the peer
  // lost and the job recovers at once, not when the server's lease runs out (14 s).
  ps_options.retry_budget = kPsRetryBudget;
  ps_options.tables = TableConfigsFromSpec(spec_);
  PsJobParams ps_params;
  DLRM_ASSIGN_OR_RETURN(ps_params.optimizer, SparseOptimizerFromSpec(spec_));
  ps_params.seed = spec_.seed;
  ps_params.staleness = spec_.staleness;
  ps_params.num_workers = world_;
  // After a recovery the job starts over from its checkpoint: the servers drop what an older
  // epoch left in its tables.
  ps_params.restart = job_.recovery() > 0;
  ps_params.periodic_checkpoints =
      !spec_.checkpoint.dir.empty() &&
      (spec_.checkpoint.every_steps > 0 || spec_.checkpoint.every_seconds > 0);
  DLRM_ASSIGN_OR_RETURN(store_, GrpcPsClient::Create(ps_options));
  // From here on, stopping the run also cancels the store's calls (a retry against a server that
  // is gone, a checkpoint write), so that a recovery does not wait for their deadlines.
  store_hook_ = [w = &worker_, s = store_.get()] {
    w->cancel_job_.store(true);
    s->Cancel();
  };
  {
    absl::MutexLock lock(&worker_.mu_);
    if (worker_.stopping_ || worker_.cancel_job_.load()) {
      return absl::CancelledError("job stopped");
    }
    worker_.cancel_hook_ = store_hook_;
    hook_installed_ = true;
  }
  return store_->LoadJobOnAll(ps_params);
}

absl::Status WorkerProcess::JobRun::ConnectPeers() {
  const WorkerProcessOptions& options = worker_.options_;
  dense::Backend* backend = resources_->backend.get();
  // Collectives: NCCL between GPU workers (dense gradients summed in device memory; hot-row
  // gradients and barriers staged through it), Gloo between CPU workers. Both rendezvous through
  // the coordinator's key-value store under a job-scoped prefix.
  if (world_ > 1 && backend->device() == dense::Device::kCuda && NcclAllReducer::Available()) {
    client::CoordinatorClient* client = worker_.client_.get();
    const absl::Duration timeout = options.collective_timeout;
    DLRM_ASSIGN_OR_RETURN(
        resources_->nccl,
        NcclAllReducer::Create(
            {.backend = backend,
             .rank = rank_,
             .world_size = world_,
             .key = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/nccl/unique_id"),
             .publish = [client](const std::string& key,
                                 const std::string& value) { return client->KvSet(key, value); },
             .fetch = [client,
                       timeout](const std::string& key) { return client->KvGet(key, timeout); },
             .init_timeout = timeout}));
    reducer_ = resources_->nccl.get();
    DLRM_LOG(INFO) << "job " << job_id_ << ": NCCL allreduce, rank " << rank_ << " of " << world_;
  } else if (world_ > 1) {
    // A job's Gloo connections, under a rendezvous prefix of their own (`name`).
    auto connect = [&](const std::string& name) {
      return GlooAllReducer::Create(
          {.client = worker_.client_.get(),
           .prefix = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/", name, "/"),
           .rank = rank_,
           .world_size = world_,
           .hostname = options.advertise_host,
           .rendezvous_timeout = options.collective_timeout,
           .op_timeout = options.collective_timeout,
           .cancelled = [w = &worker_] { return w->cancel_job_.load(); }});
    };
    DLRM_ASSIGN_OR_RETURN(resources_->gloo, connect("gloo"));
    reducer_ = resources_->gloo.get();
    if (options.overlap_hot_exchange && options.use_hot_rows && spec_.hot_budget_bytes != 0 &&
        spec_.staleness >= 1) {
      // A second mesh of connections, so that the exchange's collectives never interleave with
      // the compute thread's on one context.
      DLRM_ASSIGN_OR_RETURN(resources_->hot_gloo, connect("gloo-hot"));
    }
  }
  hot_reducer_ = resources_->hot_gloo.get();
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::Restore() {
  // Where this run starts: the spec's resume_from, or after a recovery the newest checkpoint of
  // the job's folder that verifies. Rank 0 chooses; the others take its choice, so every rank
  // loads the same one even while a checkpoint is being committed.
  client::CoordinatorClient* client = worker_.client_.get();
  std::string resume_from = spec_.checkpoint.resume_from;
  if (job_.recovery() > 0 && !spec_.checkpoint.dir.empty()) {
    const std::string key = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/resume_from");
    if (rank_ == 0) {
      absl::StatusOr<ValidCheckpoint> newest = FindValidCheckpoint(spec_.checkpoint.dir);
      if (newest.ok()) {
        resume_from = newest->dir;
      } else if (!absl::IsNotFound(newest.status())) {
        return newest.status();
      }
      if (world_ > 1) DLRM_RETURN_IF_ERROR(client->KvSet(key, "path:" + resume_from));
    } else {
      DLRM_ASSIGN_OR_RETURN(std::string chosen,
                            client->KvGet(key, worker_.options_.collective_timeout));
      resume_from = std::string(absl::StripPrefix(chosen, "path:"));
    }
    DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": recovery " << job_.recovery()
                   << " rolls back to "
                   << (resume_from.empty() ? std::string("the start") : resume_from);
  }
  // Resuming: rank 0 loads every row onto the parameter servers (through the client, which
  // places each row on its shard, whatever the number of servers that wrote it); every rank
  // loads the dense state. Steps on the servers start again from 0; `base_` is where this run
  // starts in the job's numbering.
  resumed_ = !resume_from.empty();
  if (!resumed_) return absl::OkStatus();
  DLRM_ASSIGN_OR_RETURN(
      RestoredCheckpoint restored,
      RestoreCheckpoint(
          resume_from,
          {.rank = rank_, .world_size = world_, .load_rows = rank_ == 0, .set_steps = false},
          trainer_.get(), store_.get()));
  base_ = restored.position;
  base_.samples = restored.manifest.samples;
  resumed_hot_ids_ = std::move(restored.hot_ids);
  // A step is a global batch whatever the number of workers: with another number, each rank
  // skips the same number of (smaller or larger) batches of its new shard, the same share.
  DLRM_RETURN_IF_ERROR(Barrier());  // the rows are on the servers before anyone reads them
  DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": resumed from " << restored.dir
                 << " at step " << base_.step << " (epoch " << base_.epoch + 1 << ", "
                 << base_.batches << " batch(es) into it)";
  return absl::OkStatus();
}

// Rank 0's checkpoint writer waits for the other ranks' keys in short waits, so that a stopped
// job (a rank is gone and the job recovers) does not wait out the collective timeout.
absl::StatusOr<std::string> WorkerProcess::JobRun::KvGetUntilStopped(const std::string& key) {
  const absl::Time deadline = absl::Now() + worker_.options_.collective_timeout;
  while (true) {
    if (worker_.cancel_job_.load()) {
      return absl::CancelledError(absl::StrCat(key, ": job stopped"));
    }
    const absl::Duration left = deadline - absl::Now();
    absl::StatusOr<std::string> value =
        worker_.client_->KvGet(key, std::min(left, absl::Seconds(1)));
    if (value.ok() || !absl::IsNotFound(value.status()) || left <= absl::Seconds(1)) return value;
  }
}

absl::Status WorkerProcess::JobRun::CreateCheckpointer() {
  if (spec_.checkpoint.dir.empty()) return absl::OkStatus();
  client::CoordinatorClient* client = worker_.client_.get();
  DLRM_ASSIGN_OR_RETURN(
      checkpointer_,
      ClusterCheckpointer::Create(
          {.spec = submitted_,
           .job_id = job_id_,
           .rank = rank_,
           .world_size = world_,
           .ps = store_.get(),
           .base_step = base_.step,
           .metrics = worker_.options_.metrics,
           .kv_set = [client](const std::string& key,
                              const std::string& value) { return client->KvSet(key, value); },
           .kv_get = [this](const std::string& key) { return KvGetUntilStopped(key); },
           .kv_delete_prefix =
               [client](const std::string& prefix) { (void)client->KvDelete(prefix, true); },
           .job_epoch = job_.job_epoch()}));
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::ReportProgress(bool force) {
  if (worker_.cancel_job_.load()) {
    return absl::CancelledError(absl::StrCat("job ", job_id_, " stopped"));
  }
  const auto now = Clock::now();
  if (!force &&
      now - last_report_ < absl::ToChronoMilliseconds(worker_.options_.progress_interval)) {
    return absl::OkStatus();
  }
  last_report_ = now;
  if (worker_.options_.metrics != nullptr) {
    common::ExportRpcBytes(worker_.options_.metrics);
    const int64_t trained = trainer_->counters().samples;
    if (trained > 0) {
      metrics_.ps_bytes_per_sample->Set(
          static_cast<double>(PsRpcBytesNow() - PsRpcBytes(network_start_)) / trained);
    }
  }
  dlrm::v1::ReportProgressRequest request = worker_.NewReport(assignment_);
  // The job's totals: a resumed job's progress continues from its checkpoint.
  request.set_step(base_.step + steps_);
  request.set_samples(base_.samples / world_ + samples_);
  request.set_loss(loss_avg_);
  (*request.mutable_metrics())["samples_per_sec"] = samples_ / std::max(SecondsSince(start_), 1e-9);
  for (const auto& [key, value] : last_eval_) (*request.mutable_metrics())[key] = value;
  if (total_steps_ > 0) (*request.mutable_metrics())["total_steps"] = total_steps_;
  absl::StatusOr<dlrm::v1::JobState> state = worker_.client_->ReportProgress(request);
  if (state.ok() && *state != dlrm::v1::JOB_STATE_RUNNING) {
    return absl::CancelledError(absl::StrCat("job ", job_id_, " is no longer running"));
  }
  if (!state.ok()) {
    if (client::MustRegisterAgain(state.status())) {
      return absl::CancelledError(absl::StrCat("job ", job_id_, ": ", state.status().message()));
    }
    DLRM_LOG(WARNING) << "progress report: " << state.status().message();
  }
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::OnStep(int64_t batch_size, float loss) {
  const auto now = Clock::now();
  if (metrics_.step_seconds != nullptr) {
    metrics_.step_seconds->Observe(std::chrono::duration<double>(now - last_step_).count());
    metrics_.samples->Increment(static_cast<double>(batch_size));
    metrics_.steps->Increment();
  }
  if (metrics_.hot_hit_ratio != nullptr) {
    const TrainerCounters c = trainer_->counters();
    if (c.ids > 0) metrics_.hot_hit_ratio->Set(static_cast<double>(c.hot_ids) / c.ids);
    if (refresher_ != nullptr) {
      const HotRefreshStats hs = refresher_->stats();
      const int64_t moved = hs.rows_joined + hs.rows_left;
      metrics_.hot_migrations->Increment(static_cast<double>(moved - migrations_reported_));
      migrations_reported_ = moved;
    }
  }
  last_step_ = now;
  samples_ += batch_size;
  ++steps_;
  loss_avg_ = steps_ == 1 ? loss : 0.98 * loss_avg_ + 0.02 * loss;
  if (metrics_.train_loss != nullptr) {
    metrics_.train_loss->Set(loss_avg_);
    const int64_t rewinds = train_reader_ != nullptr ? train_reader_->rewinds() : 0;
    metrics_.epoch->Set(static_cast<double>(base_.epoch + rewinds + 1));
  }
  return ReportProgress(false);
}

TrainPosition WorkerProcess::JobRun::Position(int64_t run_steps) const {
  return TrainPosition{.step = base_.step + run_steps,
                       .samples = base_.samples + samples_ * world_,
                       .epoch = base_.epoch + train_reader_->rewinds(),
                       .batches = train_reader_->batches_in_epoch()};
}

absl::Status WorkerProcess::JobRun::Barrier() {
  if (resources_->gloo != nullptr) return resources_->gloo->Barrier();
  float token = 0;  // a blocking allreduce of one float
  if (resources_->nccl != nullptr) return resources_->nccl->AllReduceSum(&token, 1);
  return absl::OkStatus();
}

// At a drained step boundary of every rank: all pushes of earlier steps are applied (first
// barrier); rank 0 takes the cut; nobody pushes a later step before it is taken (second).
absl::Status WorkerProcess::JobRun::Cut(int64_t run_steps) {
  DLRM_RETURN_IF_ERROR(trainer_->DrainHotExchange());  // the hot rows hold every step's updates
  DLRM_RETURN_IF_ERROR(checkpointer_->Prepare(Position(run_steps)));
  DLRM_RETURN_IF_ERROR(Barrier());
  DLRM_RETURN_IF_ERROR(checkpointer_->Cut(*trainer_, Position(run_steps)));
  return Barrier();
}

// training.eval_every_steps: at a drained boundary, rank 0 evaluates on the eval split while the
// others wait (two barriers: every earlier push is applied, nobody pushes meanwhile).
absl::Status WorkerProcess::JobRun::Evaluate(int64_t run_steps) {
  DLRM_RETURN_IF_ERROR(Barrier());
  if (rank_ == 0 && input_.eval != nullptr) {
    DLRM_RETURN_IF_ERROR(input_.eval->Rewind());
    const auto eval_start = Clock::now();
    DLRM_ASSIGN_OR_RETURN(EvalMetrics e, trainer_->Evaluate(input_.eval.get()));
    evaluated_ = true;
    const int64_t step = base_.step + run_steps;
    last_eval_ = {
        {"eval_auc", e.auc}, {"eval_logloss", e.logloss}, {"eval_step", static_cast<double>(step)}};
    if (metrics_.eval_auc != nullptr) {
      metrics_.eval_auc->Set(e.auc);
      metrics_.eval_logloss->Set(e.logloss);
      metrics_.eval_step->Set(static_cast<double>(step));
    }
    DLRM_LOG(INFO) << "job " << job_id_ << " step " << step << ": eval AUC " << e.auc
                   << ", logloss " << e.logloss << " (" << e.samples << " samples, "
                   << SecondsSince(eval_start) << " s)";
    DLRM_RETURN_IF_ERROR(ReportProgress(true));
  }
  return Barrier();
}

// Checkpoints that rank 0 alone can want (every_seconds, `dlrmctl checkpoint`) are agreed on at
// a decision boundary every decide_every_ steps: rank 0's wish reaches the others in a one-float
// allreduce, so every rank cuts at the same step.
absl::StatusOr<bool> WorkerProcess::JobRun::CheckpointDue(int64_t run_steps) {
  if (checkpointer_ == nullptr) return false;
  const int64_t step = base_.step + run_steps;
  if (checkpoint_every_ > 0 && checkpointer_->Due(step)) return true;
  if (run_steps % decide_every_ != 0 || step <= checkpointer_->last_step()) return false;
  const int64_t requests = worker_.checkpoint_requests_.load();
  const bool requested = requests > requests_served_;
  float wish = rank_ == 0 && (requested || checkpointer_->DueByTime()) ? 1.0f : 0.0f;
  if (reducer_ != nullptr) DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(&wish, 1));
  if (rank_ == 0 && requested) {
    requests_served_ = requests;
    DLRM_LOG(INFO) << "job " << job_id_ << ": checkpoint at step " << step << " on request";
  }
  return wish > 0;
}

absl::Status WorkerProcess::JobRun::Train() {
  start_ = Clock::now();
  network_start_ = TakeNetworkSnapshot(*trainer_, {reducer_, hot_reducer_});
  last_report_ = Clock::now();
  last_step_ = Clock::now();
  total_steps_ = TotalSteps(spec_, input_.train_records);

  // Where a resumed run starts: the batches of its epoch trained before the checkpoint are read
  // and dropped; `train_reader_` counts what this run reads, for the checkpoints' positions.
  Batch skipped;
  for (int64_t b = 0; b < base_.batches; ++b) {
    DLRM_ASSIGN_OR_RETURN(bool more, input_.train->Next(&skipped));
    if (!more) break;
  }
  train_reader_ = std::make_unique<CountingReader>(input_.train.get(), base_.batches);
  epochs_left_ = static_cast<int>(spec_.epochs - base_.epoch);
  max_steps_left_ = spec_.max_steps > 0 ? spec_.max_steps - base_.step : 0;
  nothing_left_ = epochs_left_ <= 0 || (spec_.max_steps > 0 && max_steps_left_ <= 0);
  checkpoint_every_ = checkpointer_ != nullptr ? spec_.checkpoint.every_steps : 0;
  refresh_every_ = refresher_ != nullptr ? spec_.hot_refresh_steps : 0;
  eval_every_ = spec_.eval_every_steps;
  decide_every_ = checkpointer_ == nullptr ? 0
                  : checkpoint_every_ > 0 && checkpoint_every_ <= kCheckpointDecisionSteps
                      ? checkpoint_every_
                      : kCheckpointDecisionSteps;
  // A first run serves every request made since the job started RUNNING; a run after a recovery
  // only the ones that come later (the earlier ones were served or lost with the rollback).
  requests_served_ = job_.recovery() > 0 ? job_.checkpoint_requests() : 0;

  if (nothing_left_) {
    DLRM_LOG(INFO) << "job " << job_id_ << ": the checkpoint is at the end of training already";
    return absl::OkStatus();
  }
  return worker_.options_.use_pipeline ? RunPipeline() : RunStepByStep();
}

absl::Status WorkerProcess::JobRun::RunPipeline() {
  PipelineOptions pipeline_options = PipelineOptionsFromSpec(spec_);
  pipeline_options.epochs = epochs_left_;
  pipeline_options.max_steps = max_steps_left_;
  pipeline_options.trainer = trainer_.get();
  pipeline_options.store = store_.get();
  pipeline_options.reader = train_reader_.get();
  pipeline_options.metrics = worker_.options_.metrics;
  // The parameter servers hold a lookup for step t until every worker's pushes of steps
  // <= t-1-k are applied (their StepGate), so the worker sends it without waiting itself.
  pipeline_options.store_enforces_staleness = true;
  pipeline_options.on_step = [this](const StepProgress& p) { return OnStep(p.batch_size, p.loss); };
  if (refresh_every_ > 0 || decide_every_ > 0 || eval_every_ > 0) {
    pipeline_options.boundary_every =
        std::gcd(std::gcd(refresh_every_, decide_every_), eval_every_);
    // A boundary drains the pipeline only when it has work: a checkpoint decision or cut, an
    // evaluation, or a hot-set refresh that pays (HotSetRefresher::Wanted).
    pipeline_options.boundary_needed = [this](int64_t step) -> absl::StatusOr<bool> {
      if ((eval_every_ > 0 && step % eval_every_ == 0) ||
          (checkpointer_ != nullptr &&
           ((decide_every_ > 0 && step % decide_every_ == 0) ||
            (checkpoint_every_ > 0 && checkpointer_->Due(base_.step + step))))) {
        return true;
      }
      if (refresh_every_ > 0 && step % refresh_every_ == 0) return refresher_->Wanted(step);
      return false;
    };
    pipeline_options.on_boundary = [this](int64_t step) -> absl::Status {
      if (refresh_every_ > 0 && step % refresh_every_ == 0) {
        DLRM_RETURN_IF_ERROR(refresher_->Refresh(step));
      }
      DLRM_ASSIGN_OR_RETURN(bool due, CheckpointDue(step));
      if (due) DLRM_RETURN_IF_ERROR(Cut(step));
      if (eval_every_ > 0 && step % eval_every_ == 0) DLRM_RETURN_IF_ERROR(Evaluate(step));
      return absl::OkStatus();
    };
  }
  DLRM_ASSIGN_OR_RETURN(auto pipeline, TrainingPipeline::Create(pipeline_options));
  {
    absl::MutexLock lock(&worker_.mu_);
    if (worker_.stopping_) return absl::CancelledError("worker shutting down");
    worker_.cancel_hook_ = [store_hook = store_hook_, p = pipeline.get()] {
      store_hook();
      p->Cancel();
    };
  }
  absl::Status status = pipeline->Run();
  {
    absl::MutexLock lock(&worker_.mu_);
    worker_.cancel_hook_ = store_hook_;
  }
  const PipelineMetrics pm = pipeline->metrics();
  std::string stages;
  for (int i = 0; i < kNumPipelineStages; ++i) {
    const StageMetrics& s = pm.stages[i];
    absl::StrAppendFormat(&stages, " %s %.2f/%.2f",
                          PipelineStageName(static_cast<PipelineStage>(i)), s.busy_seconds,
                          s.stall_seconds);
  }
  DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_
                 << ": pipeline stages, busy/stalled seconds:" << stages;
  return status;
}

absl::Status WorkerProcess::JobRun::RunStepByStep() {
  Batch batch;
  for (int epoch = 0; epoch < epochs_left_; ++epoch) {
    if (epoch > 0) DLRM_RETURN_IF_ERROR(train_reader_->Rewind());
    while (true) {
      if (refresher_ != nullptr && steps_ > 0 && steps_ % spec_.hot_refresh_steps == 0) {
        DLRM_RETURN_IF_ERROR(refresher_->Refresh(trainer_->steps_done()));
      }
      if (checkpointer_ != nullptr && steps_ > 0) {
        DLRM_ASSIGN_OR_RETURN(bool due, CheckpointDue(steps_));
        if (due) DLRM_RETURN_IF_ERROR(Cut(steps_));
      }
      if (eval_every_ > 0 && steps_ > 0 && steps_ % eval_every_ == 0) {
        DLRM_RETURN_IF_ERROR(Evaluate(steps_));
      }
      DLRM_ASSIGN_OR_RETURN(bool more, train_reader_->Next(&batch));
      if (!more) break;
      DLRM_ASSIGN_OR_RETURN(float loss, trainer_->Step(batch));
      DLRM_RETURN_IF_ERROR(OnStep(batch.size, loss));
      if (max_steps_left_ > 0 && steps_ >= max_steps_left_) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::Finish() {
  // The last step's hot-row exchange (overlapped) is part of training.
  DLRM_RETURN_IF_ERROR(trainer_->DrainHotExchange());
  const double train_seconds = SecondsSince(start_);
  {
    // Where the compute stage's time went (TrainerCounters), next to the stages' busy time.
    const TrainerCounters c = trainer_->counters();
    DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_
                   << absl::StrFormat(
                          ": compute, seconds: pool %.2f dense %.2f allreduce %.2f "
                          "dense_optimizer %.2f sparse %.2f, of %.2f s training",
                          c.pool_seconds, c.dense_seconds, c.allreduce_seconds,
                          c.dense_optimizer_seconds, c.sparse_seconds, train_seconds);
  }
  const NetworkSnapshot network_end = TakeNetworkSnapshot(*trainer_, {reducer_, hot_reducer_});
  if (steps_ == 0 && !nothing_left_) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id_, " rank ", rank_,
                                                      ": no training batches in its slice of ",
                                                      spec_.train_paths.front()));
  }
  // The trained model: the final checkpoint, committed before the job reports success.
  const bool final_cut = checkpointer_ != nullptr &&
                         (checkpointer_->last_step() < base_.step + steps_ || nothing_left_);
  if (final_cut) DLRM_RETURN_IF_ERROR(checkpointer_->Prepare(Position(steps_)));
  // Every rank's pushes are applied before rank 0 reads the tables for evaluation.
  DLRM_RETURN_IF_ERROR(Barrier());
  if (checkpointer_ != nullptr) {
    if (final_cut) DLRM_RETURN_IF_ERROR(checkpointer_->Cut(*trainer_, Position(steps_)));
    DLRM_RETURN_IF_ERROR(checkpointer_->Finish());
  }
  DLRM_RETURN_IF_ERROR(ReportProgress(true));

  dlrm::v1::ReportProgressRequest done = worker_.NewReport(assignment_);
  done.set_step(base_.step + steps_);
  done.set_samples(base_.samples / world_ + samples_);
  done.set_loss(loss_avg_);
  done.set_done(true);
  if (rank_ == 0) {
    EvalMetrics eval;
    if (input_.eval != nullptr) {
      if (evaluated_) DLRM_RETURN_IF_ERROR(input_.eval->Rewind());
      DLRM_ASSIGN_OR_RETURN(eval, trainer_->Evaluate(input_.eval.get()));
      if (metrics_.eval_auc != nullptr) {
        metrics_.eval_auc->Set(eval.auc);
        metrics_.eval_logloss->Set(eval.logloss);
        metrics_.eval_step->Set(static_cast<double>(base_.step + steps_));
      }
    }
    // Ranks take the same number of steps in lockstep, so the job's throughput is world times
    // this rank's.
    const double total_samples = static_cast<double>(samples_) * world_;
    auto& m = *done.mutable_metrics();
    m["auc"] = eval.auc;
    m["logloss"] = eval.logloss;
    m["accuracy"] = eval.accuracy;
    m["eval_samples"] = static_cast<double>(eval.samples);
    m["steps"] = static_cast<double>(base_.step + steps_);
    m["samples"] = total_samples;
    m["train_seconds"] = train_seconds;
    m["samples_per_sec"] = train_seconds > 0 ? total_samples / train_seconds : 0;
    m["skipped_lines"] = static_cast<double>(input_.train->skipped());
    const TrainerCounters c = trainer_->counters();
    // Measured between the start and the end of training, per sample this rank trained.
    for (const auto& [key, value] : NetworkBytesPerSample(network_start_, network_end, samples_)) {
      m[key] = value;
    }
    m["hot_hit_rate"] = c.ids > 0 ? static_cast<double>(c.hot_ids) / c.ids : 0;
    m["hot_rows"] =
        trainer_->hot_rows() ? static_cast<double>(trainer_->hot_rows()->total_rows()) : 0;
    if (refresher_ != nullptr) {
      m["hot_migrations"] =
          static_cast<double>(refresher_->stats().rows_joined + refresher_->stats().rows_left);
    }
    // Where the job's rows live now, summed over the shards (shown by dlrm local).
    absl::StatusOr<std::vector<dlrm::v1::GetStatsResponse>> stats = store_->GetStatsAll();
    if (stats.ok()) {
      double memory_rows = 0, reads = 0, writes = 0;
      for (const dlrm::v1::GetStatsResponse& s : *stats) {
        memory_rows += static_cast<double>(s.memory_rows());
        reads += static_cast<double>(s.rocksdb_reads());
        writes += static_cast<double>(s.rocksdb_writes());
      }
      m["ps_memory_rows"] = memory_rows;
      m["ps_rocksdb_reads"] = reads;
      m["ps_rocksdb_writes"] = writes;
    } else {
      DLRM_LOG(WARNING) << "parameter-server stats: " << stats.status().message();
    }
    DLRM_LOG(INFO) << "job " << job_id_ << ": AUC " << eval.auc << ", logloss " << eval.logloss
                   << ", " << steps_ << " steps, " << m["samples_per_sec"] << " samples/s";
  }
  // The coordinator may be restarting: the result is worth waiting for.
  absl::StatusOr<dlrm::v1::JobState> state = worker_.client_->ReportProgress(done);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       !state.ok() && absl::IsUnavailable(state.status()) && absl::Now() < give_up &&
       !worker_.cancel_job_.load();) {
    absl::SleepFor(absl::Milliseconds(500));
    state = worker_.client_->ReportProgress(done);
  }
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("final report: ", state.status().message()));
  }
  if (rank_ == 0) {
    // Every rank has pushed its last step (the barrier) and the job is over: free its shards
    // for the next job.
    absl::Status unloaded = store_->UnloadJobOnAll();
    if (!unloaded.ok()) DLRM_LOG(WARNING) << "unloading job " << job_id_ << ": " << unloaded;
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
