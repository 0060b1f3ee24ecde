// WorkerProcess::JobRun::Train (job_run.h): the pipelined or plain step loop, the progress
// reports, and what happens at a drained step boundary (checkpoint cuts, evaluations).
#include "worker/job_run.h"

namespace dlrm::worker {

using job_run_internal::CountingReader;
using job_run_internal::kCheckpointDecisionSteps;
using job_run_internal::SecondsSince;

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
    const TrainerCounters c = trainer_->counters();
    if (c.samples > 0) {
      metrics_.ps_bytes_per_sample->Set(
          static_cast<double>(PsRpcBytesNow() - PsRpcBytes(network_start_)) / c.samples);
    }
    if (metrics_.hot_hit_ratio != nullptr) {
      if (const std::optional<double> share = hot_hits_.Read(c.hot_ids, c.ids)) {
        metrics_.hot_hit_ratio->Set(*share);
      }
    }
  }
  dlrm::v1::ReportProgressRequest request = worker_.NewReport(assignment_);
  // The job's totals: a resumed job's progress continues from its checkpoint.
  request.set_step(base_.step + steps_);
  request.set_samples(base_.samples / world_ + samples_);
  request.set_loss(loss_avg_.value());
  (*request.mutable_metrics())["samples_per_sec"] = samples_ / std::max(SecondsSince(start_), 1e-9);
  for (const auto& [key, value] : last_eval_) (*request.mutable_metrics())[key] = value;
  if (total_steps_ > 0) (*request.mutable_metrics())["total_steps"] = total_steps_;
  if (rank_ == 0 && job_.recovery() > 0) {
    request.set_restored_from(restored_from_);
    request.set_restored_step(base_.step);
  }
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
  loss_avg_.Add(loss);
  if (metrics_.train_loss != nullptr) {
    metrics_.train_loss->Set(loss_avg_.value());
    const int64_t rewinds = train_reader_ != nullptr ? train_reader_->rewinds() : 0;
    metrics_.epoch->Set(static_cast<double>(base_.epoch + rewinds + 1));
    const Trainer::LearningRates rates = trainer_->learning_rates();
    metrics_.dense_learning_rate->Set(rates.dense);
    metrics_.sparse_learning_rate->Set(rates.sparse);
  }
  return ReportProgress(false);
}

bool WorkerProcess::JobRun::AfterLastStep(int64_t run_steps) const {
  return total_steps_ > 0 && base_.step + run_steps >= total_steps_;
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
// others wait (two barriers: every earlier push is applied, nobody pushes meanwhile). With
// training.target_auc the second barrier is a one-float allreduce of rank 0's verdict (1: the
// evaluation reached the target), so every rank stops at this step or none does.
absl::Status WorkerProcess::JobRun::Evaluate(int64_t run_steps) {
  DLRM_RETURN_IF_ERROR(Barrier());
  const int64_t step = base_.step + run_steps;
  float reached = 0;
  if (rank_ == 0 && input_.eval != nullptr) {
    DLRM_RETURN_IF_ERROR(input_.eval->Rewind());
    const auto eval_start = Clock::now();
    const NetworkSnapshot before = TakeNetworkSnapshot(*trainer_, {reducer_, hot_reducer_});
    DLRM_ASSIGN_OR_RETURN(EvalMetrics e, trainer_->Evaluate(input_.eval.get()));
    // Its lookups are no training traffic (network_*_bytes_per_sample count that only).
    LeaveOut(before, TakeNetworkSnapshot(*trainer_, {reducer_, hot_reducer_}), &network_start_);
    evaluated_ = true;
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
    if (spec_.target_auc > 0 && e.auc >= spec_.target_auc) {
      reached = 1;
      DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": reached target AUC "
                     << spec_.target_auc << " (eval AUC " << e.auc << ") at step " << step
                     << (total_steps_ > 0 ? absl::StrCat(" of ", total_steps_) : "")
                     << ": training stops";
      total_steps_ = step;  // the job's steps: the progress shows it done
    }
    DLRM_RETURN_IF_ERROR(ReportProgress(true));
  }
  if (spec_.target_auc <= 0) return Barrier();
  // Also a barrier: no rank has the sum before every rank has given its part.
  if (reducer_ != nullptr) DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(&reached, 1));
  if (reached > 0) {
    target_reached_ = true;
    train_reader_->Stop();  // the pipeline reads no further batch: its last step is this one
    if (rank_ != 0) {
      DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_
                     << ": rank 0's evaluation reached target AUC " << spec_.target_auc
                     << " at step " << step << ": training stops";
      total_steps_ = step;
    }
  }
  return absl::OkStatus();
}

// Checkpoints that rank 0 alone can want (every_seconds, `dlrmctl checkpoint`) are agreed on at
// a decision boundary every decide_every_ steps: rank 0's wish reaches the others in a one-float
// allreduce, so every rank cuts at the same step.
absl::StatusOr<bool> WorkerProcess::JobRun::CheckpointDue(int64_t run_steps) {
  if (checkpointer_ == nullptr) return false;
  const int64_t step = base_.step + run_steps;
  if (checkpoint_every_ > 0 && checkpointer_->DueBySteps(step)) return true;
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
  DLRM_RETURN_IF_ERROR(SkipTrainedBatches(input_.train.get(), base_.batches, base_.epoch,
                                          absl::StrCat("job ", job_id_, " rank ", rank_, ": ")));
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
  if (rank_ == 0 && spec_.target_auc > 0 && input_.eval == nullptr) {
    DLRM_LOG(WARNING) << "job " << job_id_ << ": training.target_auc " << spec_.target_auc
                      << " is never checked: no eval data";
  }
  return worker_.options_.use_pipeline ? RunPipeline() : RunStepByStep();
}

absl::Status WorkerProcess::JobRun::RunPipeline() {
  PipelineOptions pipeline_options = PipelineOptionsFromSpec(spec_);
  pipeline_options.epochs = epochs_left_;
  pipeline_options.max_steps = max_steps_left_;
  pipeline_options.message_step_offset = base_.step - trainer_->steps_done();
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
      if (target_reached_) return false;  // training ended at the last one
      if (AfterLastStep(step)) return false;
      if ((eval_every_ > 0 && step % eval_every_ == 0) ||
          (checkpointer_ != nullptr &&
           ((decide_every_ > 0 && step % decide_every_ == 0) ||
            (checkpoint_every_ > 0 && checkpointer_->DueBySteps(base_.step + step))))) {
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
    worker_.cancel_hook_ = [store_hook = store_hook_, p = pipeline.get(),
                            gloo = resources_->gloo.get(), hot = resources_->hot_gloo.get()] {
      store_hook();
      p->Cancel();
      // A peer that is stopped, not dead, keeps its connections open: the compute thread's
      // collective with it would wait out collective_timeout (two minutes) before the run ends.
      for (GlooAllReducer* reducer : {gloo, hot}) {
        if (reducer != nullptr) reducer->Abort("the run is stopping");
      }
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
  DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": run ended at step "
                 << base_.step + steps_ << "; pipeline stages, busy/stalled seconds:" << stages;
  return status;
}

absl::Status WorkerProcess::JobRun::RunStepByStep() {
  Batch batch;
  // As the pipeline's boundaries: each step's once (an epoch that ends right before one comes
  // back to the same step), none after the last step (Finish evaluates and checkpoints).
  int64_t decided = 0;
  for (int epoch = 0; epoch < epochs_left_; ++epoch) {
    if (epoch > 0) DLRM_RETURN_IF_ERROR(train_reader_->Rewind());
    while (true) {
      const bool boundary = steps_ > decided && !AfterLastStep(steps_);
      decided = std::max(decided, steps_);
      if (boundary && refresher_ != nullptr && steps_ % spec_.hot_refresh_steps == 0) {
        DLRM_ASSIGN_OR_RETURN(bool wanted, refresher_->Wanted(trainer_->steps_done()));
        if (wanted) DLRM_RETURN_IF_ERROR(refresher_->Refresh(trainer_->steps_done()));
      }
      if (boundary && checkpointer_ != nullptr) {
        DLRM_ASSIGN_OR_RETURN(bool due, CheckpointDue(steps_));
        if (due) DLRM_RETURN_IF_ERROR(Cut(steps_));
      }
      if (boundary && eval_every_ > 0 && steps_ % eval_every_ == 0) {
        DLRM_RETURN_IF_ERROR(Evaluate(steps_));
        if (target_reached_) return absl::OkStatus();
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

}  // namespace dlrm::worker
