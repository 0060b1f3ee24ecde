// WorkerProcess's run of one job (worker_process.h): collectives, the trainer over the parameter
// servers, checkpoints and resume, the pipelined or plain step loop, progress reports, the final
// evaluation and the report of a failure. Membership and the job loop are in worker_process.cc,
// the job's hot rows in worker_hot_rows.cc.
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

absl::Status WorkerProcess::TrainJob(const dlrm::v1::WorkerAssignment& assignment,
                                     JobResources* resources) {
  const dlrm::v1::JobAssignment& job = assignment.job();
  const std::string& job_id = job.job_id();
  const int rank = assignment.rank();
  const int world = job.world_size();
  DLRM_ASSIGN_OR_RETURN(const common::JobSpec submitted,
                        common::ParseJobSpec(job.job_spec_yaml(), absl::StrCat("job ", job_id)));
  // training.batch_size is the job's global batch: this rank trains on its share of every step,
  // and the gradients are averaged over the ranks (Trainer), so the model is the one a single
  // process trains. Everything below reads its batch size from `spec`.
  common::JobSpec spec = submitted;
  DLRM_ASSIGN_OR_RETURN(spec.batch_size, common::WorkerBatchSize(submitted, world));
  if (job.ps_addresses_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": no parameter-server addresses"));
  }

  DLRM_ASSIGN_OR_RETURN(
      resources->backend,
      CreateBackendForDevice(
          options_.device.empty() || options_.device == "auto" ? spec.device : options_.device,
          spec.math_mode, options_.threads));
  dense::Backend* backend = resources->backend.get();

  // The embedding tables live on the parameter servers.
  PsClientOptions ps_options;
  ps_options.ps_addresses.assign(job.ps_addresses().begin(), job.ps_addresses().end());
  ps_options.job_id = job_id;
  ps_options.security = options_.security;
  ps_options.job_epoch = job.job_epoch();
  ps_options.worker_rank = rank;
  ps_options.job_grant = assignment.job_grant();
  // A parameter server refusing connections for this long is gone: the run fails with the peer
  // lost and the job recovers at once, not when the server's lease runs out (14 s).
  ps_options.retry_budget = kPsRetryBudget;
  ps_options.tables = TableConfigsFromSpec(spec);
  PsJobParams ps_params;
  DLRM_ASSIGN_OR_RETURN(ps_params.optimizer, SparseOptimizerFromSpec(spec));
  ps_params.seed = spec.seed;
  ps_params.staleness = spec.staleness;
  ps_params.num_workers = world;
  // After a recovery the job starts over from its checkpoint: the servers drop what an older
  // epoch left in its tables.
  ps_params.restart = job.recovery() > 0;
  ps_params.periodic_checkpoints =
      !spec.checkpoint.dir.empty() &&
      (spec.checkpoint.every_steps > 0 || spec.checkpoint.every_seconds > 0);
  DLRM_ASSIGN_OR_RETURN(auto store, GrpcPsClient::Create(ps_options));
  // From here on, stopping the run also cancels the store's calls (a retry against a server that
  // is gone, a checkpoint write), so that a recovery does not wait for their deadlines.
  auto store_hook = [this, s = store.get()] {
    cancel_job_.store(true);
    s->Cancel();
  };
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || cancel_job_.load()) return absl::CancelledError("job stopped");
    cancel_hook_ = store_hook;
  }
  absl::Cleanup restore_hook = [this] {
    absl::MutexLock lock(&mu_);
    cancel_hook_ = [this] { cancel_job_.store(true); };
  };
  DLRM_RETURN_IF_ERROR(store->LoadJobOnAll(ps_params));

  // Collectives: NCCL between GPU workers (dense gradients summed in device memory; hot-row
  // gradients and barriers staged through it), Gloo between CPU workers. Both rendezvous through
  // the coordinator's key-value store under a job-scoped prefix.
  auto kv_set = [this](const std::string& key, const std::string& value) {
    return client_->KvSet(key, value);
  };
  auto kv_get = [this](const std::string& key) {
    return client_->KvGet(key, options_.collective_timeout);
  };
  std::unique_ptr<GlooAllReducer>& gloo = resources->gloo;
  std::unique_ptr<NcclAllReducer>& nccl = resources->nccl;
  DenseAllReducer* reducer = nullptr;
  if (world > 1 && backend->device() == dense::Device::kCuda && NcclAllReducer::Available()) {
    DLRM_ASSIGN_OR_RETURN(
        nccl, NcclAllReducer::Create(
                  {.backend = backend,
                   .rank = rank,
                   .world_size = world,
                   .key = absl::StrCat("job/", job_id, "/", job.job_epoch(), "/nccl/unique_id"),
                   .publish = kv_set,
                   .fetch = kv_get,
                   .init_timeout = options_.collective_timeout}));
    reducer = nccl.get();
    DLRM_LOG(INFO) << "job " << job_id << ": NCCL allreduce, rank " << rank << " of " << world;
  } else if (world > 1) {
    // A job's Gloo connections, under a rendezvous prefix of their own (`name`).
    auto connect = [&](const std::string& name) {
      return GlooAllReducer::Create(
          {.client = client_.get(),
           .prefix = absl::StrCat("job/", job_id, "/", job.job_epoch(), "/", name, "/"),
           .rank = rank,
           .world_size = world,
           .hostname = options_.advertise_host,
           .rendezvous_timeout = options_.collective_timeout,
           .op_timeout = options_.collective_timeout,
           .cancelled = [this] { return cancel_job_.load(); }});
    };
    DLRM_ASSIGN_OR_RETURN(gloo, connect("gloo"));
    reducer = gloo.get();
    if (options_.overlap_hot_exchange && options_.use_hot_rows && spec.hot_budget_bytes != 0 &&
        spec.staleness >= 1) {
      // A second mesh of connections, so that the exchange's collectives never interleave with
      // the compute thread's on one context.
      DLRM_ASSIGN_OR_RETURN(resources->hot_gloo, connect("gloo-hot"));
    }
  }
  DenseAllReducer* hot_reducer = resources->hot_gloo.get();
  auto barrier = [&]() -> absl::Status {
    if (gloo != nullptr) return gloo->Barrier();
    float token = 0;  // a blocking allreduce of one float
    if (nccl != nullptr) return nccl->AllReduceSum(&token, 1);
    return absl::OkStatus();
  };

  DLRM_ASSIGN_OR_RETURN(
      JobInput input, OpenJobInput(spec, {.rank = rank, .world_size = world, .even_shards = true}));
  TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = backend;
  trainer_options.store = store.get();
  trainer_options.allreducer = reducer;
  trainer_options.device_allreducer = nccl.get();
  trainer_options.hot_allreducer = hot_reducer;
  trainer_options.overlap_dense_allreduce = options_.overlap_dense_allreduce;
  trainer_options.threads = options_.threads;
  DLRM_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(trainer_options));

  // Where this run starts: the spec's resume_from, or after a recovery the newest checkpoint of
  // the job's folder that verifies. Rank 0 chooses; the others take its choice, so every rank
  // loads the same one even while a checkpoint is being committed.
  std::string resume_from = spec.checkpoint.resume_from;
  if (job.recovery() > 0 && !spec.checkpoint.dir.empty()) {
    const std::string key = absl::StrCat("job/", job_id, "/", job.job_epoch(), "/resume_from");
    if (rank == 0) {
      absl::StatusOr<ValidCheckpoint> newest = FindValidCheckpoint(spec.checkpoint.dir);
      if (newest.ok()) {
        resume_from = newest->dir;
      } else if (!absl::IsNotFound(newest.status())) {
        return newest.status();
      }
      if (world > 1) DLRM_RETURN_IF_ERROR(client_->KvSet(key, "path:" + resume_from));
    } else {
      DLRM_ASSIGN_OR_RETURN(std::string chosen, client_->KvGet(key, options_.collective_timeout));
      resume_from = std::string(absl::StripPrefix(chosen, "path:"));
    }
    DLRM_LOG(INFO) << "job " << job_id << " rank " << rank << ": recovery " << job.recovery()
                   << " rolls back to "
                   << (resume_from.empty() ? std::string("the start") : resume_from);
  }

  // Resuming: rank 0 loads every row onto the parameter servers (through the client, which
  // places each row on its shard, whatever the number of servers that wrote it); every rank
  // loads the dense state. Steps on the servers start again from 0; `base` is where this run
  // starts in the job's numbering.
  TrainPosition base;
  std::vector<std::vector<int64_t>> resumed_hot_ids;
  const bool resumed = !resume_from.empty();
  if (resumed) {
    DLRM_ASSIGN_OR_RETURN(
        RestoredCheckpoint restored,
        RestoreCheckpoint(
            resume_from,
            {.rank = rank, .world_size = world, .load_rows = rank == 0, .set_steps = false},
            trainer.get(), store.get()));
    base = restored.position;
    base.samples = restored.manifest.samples;
    resumed_hot_ids = std::move(restored.hot_ids);
    // A step is a global batch whatever the number of workers: with another number, each rank
    // skips the same number of (smaller or larger) batches of its new shard, the same share.
    DLRM_RETURN_IF_ERROR(barrier());  // the rows are on the servers before anyone reads them
    DLRM_LOG(INFO) << "job " << job_id << " rank " << rank << ": resumed from " << restored.dir
                   << " at step " << base.step << " (epoch " << base.epoch + 1 << ", "
                   << base.batches << " batch(es) into it)";
  }
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<HotSetRefresher> refresher,
                        SetUpHotRows(spec, job, rank, world, trainer.get(), reducer, resumed,
                                     std::move(resumed_hot_ids)));
  // Rank 0's checkpoint writer waits for the other ranks' keys in short waits, so that a stopped
  // job (a rank is gone and the job recovers) does not wait out the collective timeout.
  auto kv_get_until_stopped = [this](const std::string& key) -> absl::StatusOr<std::string> {
    const absl::Time deadline = absl::Now() + options_.collective_timeout;
    while (true) {
      if (cancel_job_.load()) return absl::CancelledError(absl::StrCat(key, ": job stopped"));
      const absl::Duration left = deadline - absl::Now();
      absl::StatusOr<std::string> value = client_->KvGet(key, std::min(left, absl::Seconds(1)));
      if (value.ok() || !absl::IsNotFound(value.status()) || left <= absl::Seconds(1)) return value;
    }
  };
  std::unique_ptr<ClusterCheckpointer> checkpointer;
  if (!spec.checkpoint.dir.empty()) {
    DLRM_ASSIGN_OR_RETURN(checkpointer,
                          ClusterCheckpointer::Create({.spec = submitted,
                                                       .job_id = job_id,
                                                       .rank = rank,
                                                       .world_size = world,
                                                       .ps = store.get(),
                                                       .base_step = base.step,
                                                       .metrics = options_.metrics,
                                                       .kv_set = kv_set,
                                                       .kv_get = kv_get_until_stopped,
                                                       .kv_delete_prefix =
                                                           [this](const std::string& prefix) {
                                                             (void)client_->KvDelete(prefix, true);
                                                           },
                                                       .job_epoch = job.job_epoch()}));
  }

  const WorkerMetrics metrics = RegisterWorkerMetrics(options_.metrics);
  int64_t migrations_reported = 0;

  // Progress: every progress_interval, to the coordinator; its answer tells us if the job still
  // runs.
  const auto start = Clock::now();
  const NetworkSnapshot network_start = TakeNetworkSnapshot(*trainer, {reducer, hot_reducer});
  auto last_report = Clock::now();
  auto last_step = Clock::now();
  int64_t samples = 0;
  int64_t steps = 0;
  double loss_avg = 0;
  const CountingReader* counting_reader = nullptr;  // set once the training input is open
  // The job's steps (every rank takes the same number), -1 when unknown.
  const int64_t total_steps = TotalSteps(spec, input.train_records);
  std::map<std::string, double> last_eval;  // rank 0's latest periodic evaluation
  auto report_progress = [&](bool force) -> absl::Status {
    if (cancel_job_.load()) return absl::CancelledError(absl::StrCat("job ", job_id, " stopped"));
    const auto now = Clock::now();
    if (!force && now - last_report < absl::ToChronoMilliseconds(options_.progress_interval)) {
      return absl::OkStatus();
    }
    last_report = now;
    if (options_.metrics != nullptr) {
      common::ExportRpcBytes(options_.metrics);
      const int64_t trained = trainer->counters().samples;
      if (trained > 0) {
        metrics.ps_bytes_per_sample->Set(
            static_cast<double>(PsRpcBytesNow() - PsRpcBytes(network_start)) / trained);
      }
    }
    dlrm::v1::ReportProgressRequest request = NewReport(assignment);
    // The job's totals: a resumed job's progress continues from its checkpoint.
    request.set_step(base.step + steps);
    request.set_samples(base.samples / world + samples);
    request.set_loss(loss_avg);
    (*request.mutable_metrics())["samples_per_sec"] = samples / std::max(SecondsSince(start), 1e-9);
    for (const auto& [key, value] : last_eval) (*request.mutable_metrics())[key] = value;
    if (total_steps > 0) (*request.mutable_metrics())["total_steps"] = total_steps;
    absl::StatusOr<dlrm::v1::JobState> state = client_->ReportProgress(request);
    if (state.ok() && *state != dlrm::v1::JOB_STATE_RUNNING) {
      return absl::CancelledError(absl::StrCat("job ", job_id, " is no longer running"));
    }
    if (!state.ok()) {
      if (client::MustRegisterAgain(state.status())) {
        return absl::CancelledError(absl::StrCat("job ", job_id, ": ", state.status().message()));
      }
      DLRM_LOG(WARNING) << "progress report: " << state.status().message();
    }
    return absl::OkStatus();
  };
  auto on_step = [&](int64_t batch_size, float loss) -> absl::Status {
    const auto now = Clock::now();
    if (metrics.step_seconds != nullptr) {
      metrics.step_seconds->Observe(std::chrono::duration<double>(now - last_step).count());
      metrics.samples->Increment(static_cast<double>(batch_size));
      metrics.steps->Increment();
    }
    if (metrics.hot_hit_ratio != nullptr) {
      const TrainerCounters c = trainer->counters();
      if (c.ids > 0) metrics.hot_hit_ratio->Set(static_cast<double>(c.hot_ids) / c.ids);
      if (refresher != nullptr) {
        const HotRefreshStats hs = refresher->stats();
        const int64_t moved = hs.rows_joined + hs.rows_left;
        metrics.hot_migrations->Increment(static_cast<double>(moved - migrations_reported));
        migrations_reported = moved;
      }
    }
    last_step = now;
    samples += batch_size;
    ++steps;
    loss_avg = steps == 1 ? loss : 0.98 * loss_avg + 0.02 * loss;
    if (metrics.train_loss != nullptr) {
      metrics.train_loss->Set(loss_avg);
      const int64_t rewinds = counting_reader != nullptr ? counting_reader->rewinds() : 0;
      metrics.epoch->Set(static_cast<double>(base.epoch + rewinds + 1));
    }
    return report_progress(false);
  };

  // Where a resumed run starts: the batches of its epoch trained before the checkpoint are read
  // and dropped; `train_reader` counts what this run reads, for the checkpoints' positions.
  Batch skipped;
  for (int64_t b = 0; b < base.batches; ++b) {
    DLRM_ASSIGN_OR_RETURN(bool more, input.train->Next(&skipped));
    if (!more) break;
  }
  CountingReader train_reader(input.train.get(), base.batches);
  counting_reader = &train_reader;
  const int epochs_left = static_cast<int>(spec.epochs - base.epoch);
  const int64_t max_steps_left = spec.max_steps > 0 ? spec.max_steps - base.step : 0;
  const bool nothing_left = epochs_left <= 0 || (spec.max_steps > 0 && max_steps_left <= 0);
  auto position = [&](int64_t run_steps) {
    return TrainPosition{.step = base.step + run_steps,
                         .samples = base.samples + samples * world,
                         .epoch = base.epoch + train_reader.rewinds(),
                         .batches = train_reader.batches_in_epoch()};
  };
  // At a drained step boundary of every rank: all pushes of earlier steps are applied (first
  // barrier); rank 0 takes the cut; nobody pushes a later step before it is taken (second).
  auto cut = [&](int64_t run_steps) -> absl::Status {
    DLRM_RETURN_IF_ERROR(trainer->DrainHotExchange());  // the hot rows hold every step's updates
    DLRM_RETURN_IF_ERROR(checkpointer->Prepare(position(run_steps)));
    DLRM_RETURN_IF_ERROR(barrier());
    DLRM_RETURN_IF_ERROR(checkpointer->Cut(*trainer, position(run_steps)));
    return barrier();
  };
  const int64_t checkpoint_every = checkpointer != nullptr ? spec.checkpoint.every_steps : 0;
  const int64_t refresh_every = refresher != nullptr ? spec.hot_refresh_steps : 0;
  // training.eval_every_steps: at a drained boundary, rank 0 evaluates on the eval split while
  // the others wait (two barriers: every earlier push is applied, nobody pushes meanwhile).
  const int64_t eval_every = spec.eval_every_steps;
  bool evaluated = false;
  auto evaluate = [&](int64_t run_steps) -> absl::Status {
    DLRM_RETURN_IF_ERROR(barrier());
    if (rank == 0 && input.eval != nullptr) {
      DLRM_RETURN_IF_ERROR(input.eval->Rewind());
      const auto eval_start = Clock::now();
      DLRM_ASSIGN_OR_RETURN(EvalMetrics e, trainer->Evaluate(input.eval.get()));
      evaluated = true;
      const int64_t step = base.step + run_steps;
      last_eval = {{"eval_auc", e.auc},
                   {"eval_logloss", e.logloss},
                   {"eval_step", static_cast<double>(step)}};
      if (metrics.eval_auc != nullptr) {
        metrics.eval_auc->Set(e.auc);
        metrics.eval_logloss->Set(e.logloss);
        metrics.eval_step->Set(static_cast<double>(step));
      }
      DLRM_LOG(INFO) << "job " << job_id << " step " << step << ": eval AUC " << e.auc
                     << ", logloss " << e.logloss << " (" << e.samples << " samples, "
                     << SecondsSince(eval_start) << " s)";
      DLRM_RETURN_IF_ERROR(report_progress(true));
    }
    return barrier();
  };
  // Checkpoints that rank 0 alone can want (every_seconds, `dlrmctl checkpoint`) are agreed on at
  // a decision boundary every decide_every steps: rank 0's wish reaches the others in a one-float
  // allreduce, so every rank cuts at the same step.
  const int64_t decide_every =
      checkpointer == nullptr ? 0
      : checkpoint_every > 0 && checkpoint_every <= kCheckpointDecisionSteps
          ? checkpoint_every
          : kCheckpointDecisionSteps;
  // A first run serves every request made since the job started RUNNING; a run after a recovery
  // only the ones that come later (the earlier ones were served or lost with the rollback).
  int64_t requests_served = job.recovery() > 0 ? job.checkpoint_requests() : 0;
  auto checkpoint_due = [&](int64_t run_steps) -> absl::StatusOr<bool> {
    if (checkpointer == nullptr) return false;
    const int64_t step = base.step + run_steps;
    if (checkpoint_every > 0 && checkpointer->Due(step)) return true;
    if (run_steps % decide_every != 0 || step <= checkpointer->last_step()) return false;
    const int64_t requests = checkpoint_requests_.load();
    const bool requested = requests > requests_served;
    float wish = rank == 0 && (requested || checkpointer->DueByTime()) ? 1.0f : 0.0f;
    if (reducer != nullptr) DLRM_RETURN_IF_ERROR(reducer->AllReduceSum(&wish, 1));
    if (rank == 0 && requested) {
      requests_served = requests;
      DLRM_LOG(INFO) << "job " << job_id << ": checkpoint at step " << step << " on request";
    }
    return wish > 0;
  };

  if (nothing_left) {
    DLRM_LOG(INFO) << "job " << job_id << ": the checkpoint is at the end of training already";
  } else if (options_.use_pipeline) {
    PipelineOptions pipeline_options = PipelineOptionsFromSpec(spec);
    pipeline_options.epochs = epochs_left;
    pipeline_options.max_steps = max_steps_left;
    pipeline_options.trainer = trainer.get();
    pipeline_options.store = store.get();
    pipeline_options.reader = &train_reader;
    pipeline_options.metrics = options_.metrics;
    // The parameter servers hold a lookup for step t until every worker's pushes of steps
    // <= t-1-k are applied (their StepGate), so the worker sends it without waiting itself.
    pipeline_options.store_enforces_staleness = true;
    pipeline_options.on_step = [&](const StepProgress& p) { return on_step(p.batch_size, p.loss); };
    if (refresh_every > 0 || decide_every > 0 || eval_every > 0) {
      pipeline_options.boundary_every = std::gcd(std::gcd(refresh_every, decide_every), eval_every);
      // A boundary drains the pipeline only when it has work: a checkpoint decision or cut, an
      // evaluation, or a hot-set refresh that pays (HotSetRefresher::Wanted).
      pipeline_options.boundary_needed = [&](int64_t step) -> absl::StatusOr<bool> {
        if ((eval_every > 0 && step % eval_every == 0) ||
            (checkpointer != nullptr &&
             ((decide_every > 0 && step % decide_every == 0) ||
              (checkpoint_every > 0 && checkpointer->Due(base.step + step))))) {
          return true;
        }
        if (refresh_every > 0 && step % refresh_every == 0) return refresher->Wanted(step);
        return false;
      };
      pipeline_options.on_boundary = [&](int64_t step) -> absl::Status {
        if (refresh_every > 0 && step % refresh_every == 0) {
          DLRM_RETURN_IF_ERROR(refresher->Refresh(step));
        }
        DLRM_ASSIGN_OR_RETURN(bool due, checkpoint_due(step));
        if (due) DLRM_RETURN_IF_ERROR(cut(step));
        if (eval_every > 0 && step % eval_every == 0) DLRM_RETURN_IF_ERROR(evaluate(step));
        return absl::OkStatus();
      };
    }
    DLRM_ASSIGN_OR_RETURN(auto pipeline, TrainingPipeline::Create(pipeline_options));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("worker shutting down");
      cancel_hook_ = [store_hook, p = pipeline.get()] {
        store_hook();
        p->Cancel();
      };
    }
    absl::Status status = pipeline->Run();
    {
      absl::MutexLock lock(&mu_);
      cancel_hook_ = store_hook;
    }
    const PipelineMetrics pm = pipeline->metrics();
    std::string stages;
    for (int i = 0; i < kNumPipelineStages; ++i) {
      const StageMetrics& s = pm.stages[i];
      absl::StrAppendFormat(&stages, " %s %.2f/%.2f",
                            PipelineStageName(static_cast<PipelineStage>(i)), s.busy_seconds,
                            s.stall_seconds);
    }
    DLRM_LOG(INFO) << "job " << job_id << " rank " << rank
                   << ": pipeline stages, busy/stalled seconds:" << stages;
    DLRM_RETURN_IF_ERROR(status);
  } else {
    Batch batch;
    bool stop = false;
    for (int epoch = 0; epoch < epochs_left && !stop; ++epoch) {
      if (epoch > 0) DLRM_RETURN_IF_ERROR(train_reader.Rewind());
      while (true) {
        if (refresher != nullptr && steps > 0 && steps % spec.hot_refresh_steps == 0) {
          DLRM_RETURN_IF_ERROR(refresher->Refresh(trainer->steps_done()));
        }
        if (checkpointer != nullptr && steps > 0) {
          DLRM_ASSIGN_OR_RETURN(bool due, checkpoint_due(steps));
          if (due) DLRM_RETURN_IF_ERROR(cut(steps));
        }
        if (eval_every > 0 && steps > 0 && steps % eval_every == 0) {
          DLRM_RETURN_IF_ERROR(evaluate(steps));
        }
        DLRM_ASSIGN_OR_RETURN(bool more, train_reader.Next(&batch));
        if (!more) break;
        DLRM_ASSIGN_OR_RETURN(float loss, trainer->Step(batch));
        DLRM_RETURN_IF_ERROR(on_step(batch.size, loss));
        if (max_steps_left > 0 && steps >= max_steps_left) {
          stop = true;
          break;
        }
      }
    }
  }
  // The last step's hot-row exchange (overlapped) is part of training.
  DLRM_RETURN_IF_ERROR(trainer->DrainHotExchange());
  const double train_seconds = SecondsSince(start);
  {
    // Where the compute stage's time went (TrainerCounters), next to the stages' busy time.
    const TrainerCounters c = trainer->counters();
    DLRM_LOG(INFO) << "job " << job_id << " rank " << rank
                   << absl::StrFormat(
                          ": compute, seconds: pool %.2f dense %.2f allreduce %.2f "
                          "dense_optimizer %.2f sparse %.2f, of %.2f s training",
                          c.pool_seconds, c.dense_seconds, c.allreduce_seconds,
                          c.dense_optimizer_seconds, c.sparse_seconds, train_seconds);
  }
  const NetworkSnapshot network_end = TakeNetworkSnapshot(*trainer, {reducer, hot_reducer});
  if (steps == 0 && !nothing_left) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " rank ", rank,
                                                      ": no training batches in its slice of ",
                                                      spec.train_paths.front()));
  }
  // The trained model: the final checkpoint, committed before the job reports success.
  const bool final_cut =
      checkpointer != nullptr && (checkpointer->last_step() < base.step + steps || nothing_left);
  if (final_cut) DLRM_RETURN_IF_ERROR(checkpointer->Prepare(position(steps)));
  // Every rank's pushes are applied before rank 0 reads the tables for evaluation.
  DLRM_RETURN_IF_ERROR(barrier());
  if (checkpointer != nullptr) {
    if (final_cut) DLRM_RETURN_IF_ERROR(checkpointer->Cut(*trainer, position(steps)));
    DLRM_RETURN_IF_ERROR(checkpointer->Finish());
  }
  DLRM_RETURN_IF_ERROR(report_progress(true));

  dlrm::v1::ReportProgressRequest done = NewReport(assignment);
  done.set_step(base.step + steps);
  done.set_samples(base.samples / world + samples);
  done.set_loss(loss_avg);
  done.set_done(true);
  if (rank == 0) {
    EvalMetrics eval;
    if (input.eval != nullptr) {
      if (evaluated) DLRM_RETURN_IF_ERROR(input.eval->Rewind());
      DLRM_ASSIGN_OR_RETURN(eval, trainer->Evaluate(input.eval.get()));
      if (metrics.eval_auc != nullptr) {
        metrics.eval_auc->Set(eval.auc);
        metrics.eval_logloss->Set(eval.logloss);
        metrics.eval_step->Set(static_cast<double>(base.step + steps));
      }
    }
    // Ranks take the same number of steps in lockstep, so the job's throughput is world times
    // this rank's.
    const double total_samples = static_cast<double>(samples) * world;
    auto& m = *done.mutable_metrics();
    m["auc"] = eval.auc;
    m["logloss"] = eval.logloss;
    m["accuracy"] = eval.accuracy;
    m["eval_samples"] = static_cast<double>(eval.samples);
    m["steps"] = static_cast<double>(base.step + steps);
    m["samples"] = total_samples;
    m["train_seconds"] = train_seconds;
    m["samples_per_sec"] = train_seconds > 0 ? total_samples / train_seconds : 0;
    m["skipped_lines"] = static_cast<double>(input.train->skipped());
    const TrainerCounters c = trainer->counters();
    // Measured between the start and the end of training, per sample this rank trained.
    for (const auto& [key, value] : NetworkBytesPerSample(network_start, network_end, samples)) {
      m[key] = value;
    }
    m["hot_hit_rate"] = c.ids > 0 ? static_cast<double>(c.hot_ids) / c.ids : 0;
    m["hot_rows"] =
        trainer->hot_rows() ? static_cast<double>(trainer->hot_rows()->total_rows()) : 0;
    if (refresher != nullptr) {
      m["hot_migrations"] =
          static_cast<double>(refresher->stats().rows_joined + refresher->stats().rows_left);
    }
    // Where the job's rows live now, summed over the shards (shown by dlrm local).
    absl::StatusOr<std::vector<dlrm::v1::GetStatsResponse>> stats = store->GetStatsAll();
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
    DLRM_LOG(INFO) << "job " << job_id << ": AUC " << eval.auc << ", logloss " << eval.logloss
                   << ", " << steps << " steps, " << m["samples_per_sec"] << " samples/s";
  }
  // The coordinator may be restarting: the result is worth waiting for.
  absl::StatusOr<dlrm::v1::JobState> state = client_->ReportProgress(done);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       !state.ok() && absl::IsUnavailable(state.status()) && absl::Now() < give_up &&
       !cancel_job_.load();) {
    absl::SleepFor(absl::Milliseconds(500));
    state = client_->ReportProgress(done);
  }
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("final report: ", state.status().message()));
  }
  if (rank == 0) {
    // Every rank has pushed its last step (the barrier) and the job is over: free its shards
    // for the next job.
    absl::Status unloaded = store->UnloadJobOnAll();
    if (!unloaded.ok()) DLRM_LOG(WARNING) << "unloading job " << job_id << ": " << unloaded;
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
