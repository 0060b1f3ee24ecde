// WorkerProcess's run of one job (worker_process.h). RunJob reports the outcome (and a failure's
// cause) to the coordinator. The run itself is WorkerProcess::JobRun (job_run.h): SetUp
// (job_run_setup.cc: the parameter servers, the collectives, the trainer, resume and recovery,
// the checkpointer), Train (job_run_train.cc: the pipelined or plain step loop, with progress
// reports, checkpoint cuts and evaluations at step boundaries) and Finish (here: the final
// checkpoint, evaluation and report). Membership and the job loop are in worker_process.cc, the
// job's hot rows in worker_hot_rows.cc.
#include <optional>
#include <string>
#include <utility>

#include "worker/job_run.h"

namespace dlrm::worker {

using job_run_internal::SecondsSince;

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
  const absl::Status sent = SendFinalReport(
      report, absl::StrCat("the failure of run ", job_id, "@", assignment.job().job_epoch()));
  if (!sent.ok()) DLRM_LOG(WARNING) << "reporting the failure: " << sent.message();
}

namespace {

// The coordinator did not answer (restarting, or its address not yet back): worth sending again.
bool Unreached(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace

absl::Status WorkerProcess::SendFinalReport(const dlrm::v1::ReportProgressRequest& report,
                                            const std::string& what) {
  const absl::StatusOr<dlrm::v1::JobState> state = client_->ReportProgress(report);
  if (state.ok() || !Unreached(state.status())) return state.status();
  DLRM_LOG(WARNING) << "the coordinator did not take " << what << " (" << state.status().message()
                    << "); sending it again until it answers";
  undelivered_.Keep(report, what);
  return absl::OkStatus();
}

void WorkerProcess::ResendUndeliveredReport() {
  const std::optional<UndeliveredReport::Entry> kept = undelivered_.Get();
  if (!kept.has_value()) return;
  const absl::StatusOr<dlrm::v1::JobState> state = client_->ReportProgress(kept->report);
  if (!state.ok() && Unreached(state.status())) return;  // still away: at the next heartbeat
  if (state.ok()) {
    DLRM_LOG(INFO) << "the coordinator took " << kept->what << " at last";
  } else {
    // E.g. a recovery replaced the run meanwhile: the report has nothing left to move.
    DLRM_LOG(WARNING) << "the coordinator refused " << kept->what << ": "
                      << state.status().message();
  }
  // A newer run's report may have taken the slot meanwhile; only this one is done.
  undelivered_.Done(*kept);
}

void UndeliveredReport::Keep(const dlrm::v1::ReportProgressRequest& report, std::string what) {
  absl::MutexLock lock(&mu_);
  entry_ = Entry{.report = report, .what = std::move(what), .generation = ++generations_};
}

std::optional<UndeliveredReport::Entry> UndeliveredReport::Get() const {
  absl::MutexLock lock(&mu_);
  return entry_;
}

void UndeliveredReport::Done(const Entry& entry) {
  absl::MutexLock lock(&mu_);
  if (entry_.has_value() && entry_->generation == entry.generation) entry_.reset();
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
  if (steps_ == 0 && base_.batches > 0 && !nothing_left_) {
    // Resumed from a checkpoint taken after the last batch of its epoch (a position of epoch e,
    // all of its batches: the final checkpoint), and that epoch was the last: the batches it
    // skipped were all there was. Not an empty slice.
    DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_
                   << ": the checkpoint is at the end of training already";
    nothing_left_ = true;
  }
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
    checkpointer_->ReleaseFolder();
  }
  DLRM_RETURN_IF_ERROR(ReportProgress(true));

  dlrm::v1::ReportProgressRequest done = worker_.NewReport(assignment_);
  done.set_step(base_.step + steps_);
  done.set_samples(base_.samples / world_ + samples_);
  done.set_loss(loss_avg_.value());
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
    if (eval.samples > 0) {  // no eval data: no metrics, rather than AUC 0.5 and logloss 0
      m["auc"] = eval.auc;
      m["logloss"] = eval.logloss;
      m["accuracy"] = eval.accuracy;
    }
    m["eval_samples"] = static_cast<double>(eval.samples);
    m["steps"] = static_cast<double>(base_.step + steps_);
    m["samples"] = total_samples;
    m["train_seconds"] = train_seconds;
    m["samples_per_sec"] = train_seconds > 0 ? total_samples / train_seconds : 0;
    m["skipped_lines"] = static_cast<double>(input_.train->skipped());
    if (spec_.target_auc > 0) {
      // training.target_auc: the run ended at the step whose evaluation reached it, if one did.
      m["target_auc"] = spec_.target_auc;
      m["reached_target_step"] = target_reached_ ? static_cast<double>(base_.step + steps_) : -1;
      if (target_reached_) {
        done.set_message(absl::StrCat("reached target AUC ", spec_.target_auc, " at step ",
                                      base_.step + steps_));
      }
    }
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
      double memory_rows = 0, reads = 0, hits = 0, created = 0, writes = 0;
      for (const dlrm::v1::GetStatsResponse& s : *stats) {
        memory_rows += static_cast<double>(s.memory_rows());
        reads += static_cast<double>(s.rocksdb_reads());
        hits += static_cast<double>(s.rocksdb_hits());
        created += static_cast<double>(s.rows_created());
        writes += static_cast<double>(s.rocksdb_writes());
      }
      m["ps_memory_rows"] = memory_rows;
      m["ps_rocksdb_reads"] = reads;  // memory-tier misses: hits + created
      m["ps_rocksdb_hits"] = hits;
      m["ps_rows_created"] = created;
      m["ps_rocksdb_writes"] = writes;
    } else {
      DLRM_LOG(WARNING) << "parameter-server stats: " << stats.status().message();
    }
    DLRM_LOG(INFO) << "job " << job_id_ << ": AUC " << eval.auc << ", logloss " << eval.logloss
                   << ", " << steps_ << " steps, " << m["samples_per_sec"] << " samples/s";
  }
  // The coordinator may be restarting: then the report waits for it (SendFinalReport).
  const absl::Status sent = worker_.SendFinalReport(
      done, absl::StrCat("the end of run ", job_id_, "@", job_.job_epoch()));
  if (!sent.ok()) return absl::Status(sent.code(), absl::StrCat("final report: ", sent.message()));
  if (rank_ == 0) {
    // Every rank has pushed its last step (the barrier) and the job is over: free its shards
    // for the next job.
    absl::Status unloaded = store_->UnloadJobOnAll();
    if (!unloaded.ok() && store_->cancelled()) {
      // Stopped first (`dlrm local` stops its cluster once the job has ended): nothing is lost,
      // the servers drop the job's rows when they stop or load the next job.
      DLRM_LOG(INFO) << "job " << job_id_ << ": its shards were not unloaded: the worker was "
                     << "stopped first";
    } else if (!unloaded.ok()) {
      DLRM_LOG(WARNING) << "unloading job " << job_id_ << ": " << unloaded;
    }
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
