// WorkerProcess::JobRun, one run of a job on this rank (worker_job.cc: RunJob, TrainJob and
// Finish; job_run_setup.cc: SetUp; job_run_train.cc: Train, with its progress reports and step
// boundaries), and what those files share. Not part of the worker's API (worker_process.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <new>
#include <numeric>
#include <utility>

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
#include "worker/progress.h"
#include "worker/ps_client.h"
#include "worker/train_command.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"
#include "worker/worker_process.h"

namespace dlrm::worker {
namespace job_run_internal {

using Clock = std::chrono::steady_clock;

// Steps between two decision boundaries of a job with checkpoints (JobRun::CheckpointDue): the
// most a checkpoint asked for by time or by `dlrmctl checkpoint` waits, in steps.
inline constexpr int64_t kCheckpointDecisionSteps = 50;

// How long a worker's calls retry a parameter server that cannot be reached (PsClientOptions).
inline constexpr absl::Duration kPsRetryBudget = absl::Seconds(5);

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A reader that counts the batches of the epoch in progress and the rewinds, so a checkpoint
// taken at a drained step boundary knows where the input stands (the pipeline reads ahead only
// between boundaries). After Stop() it has no more batches in any epoch and stays where it is, so
// training ends at that step (training.target_auc) as when the data ends.
class CountingReader : public BatchReader {
 public:
  CountingReader(BatchReader* reader, int64_t already_read)
      : reader_(reader), batches_(already_read) {}
  absl::StatusOr<bool> Next(Batch* batch) override {
    if (stopped_) return false;
    absl::StatusOr<bool> more = reader_->Next(batch);
    if (more.ok() && *more) ++batches_;
    return more;
  }
  absl::Status Rewind() override {
    if (stopped_) return absl::OkStatus();
    ++rewinds_;
    batches_ = 0;
    return reader_->Rewind();
  }
  void Stop() { stopped_ = true; }
  int64_t records_read() const override { return reader_->records_read(); }
  int64_t skipped() const override { return reader_->skipped(); }
  int64_t rewinds() const { return rewinds_; }
  int64_t batches_in_epoch() const { return batches_; }

 private:
  BatchReader* reader_;
  int64_t batches_;
  int64_t rewinds_ = 0;
  bool stopped_ = false;
};

}  // namespace job_run_internal

// What a run holds open for its peers: RunJob owns it, so that it outlives TrainJob until the
// outcome is reported.
struct WorkerProcess::JobResources {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<GlooAllReducer> gloo;      // declared after the backend: destroyed before it
  std::unique_ptr<GlooAllReducer> hot_gloo;  // the overlapped hot-row exchange's own connections
  std::unique_ptr<NcclAllReducer> nccl;
};

// One run of a job on this rank, from its set-up to the report that ends it (TrainJob): what the
// run holds, and a method for each of its parts. A nested class of WorkerProcess, so that it
// reaches the worker's coordinator client, options and cancellation.
class WorkerProcess::JobRun {
 public:
  using Clock = job_run_internal::Clock;

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
  // Chooses and installs the job's hot rows (when its spec has a hot_budget; after a resume the
  // checkpoint's set, read from the parameter servers) and sets refresher_ when they are
  // re-checked every hot_refresh_steps (worker_hot_rows.cc).
  absl::Status SetUpHotRows();
  absl::Status CreateCheckpointer();

  // Progress: every progress_interval (or when forced), to the coordinator; its answer tells if
  // the job still runs.
  absl::Status ReportProgress(bool force);
  absl::Status OnStep(int64_t batch_size, float loss);

  // Step boundaries of every rank (the pipeline drained).
  TrainPosition Position(int64_t run_steps) const;
  absl::Status Barrier();
  absl::Status Cut(int64_t run_steps);
  // Rank 0 evaluates; with training.target_auc every rank learns whether the evaluation reached
  // it (then target_reached_ is set on every rank, and the reader stopped).
  absl::Status Evaluate(int64_t run_steps);
  absl::StatusOr<bool> CheckpointDue(int64_t run_steps);
  // This run's step `run_steps` is the job's last or past it (total_steps_, when known): no
  // boundary comes before it, since no batch follows (Finish evaluates and checkpoints).
  bool AfterLastStep(int64_t run_steps) const;

  absl::Status RunPipeline();
  absl::Status RunStepByStep();

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
  Collectives* reducer_ = nullptr;      // dense gradients (Gloo or NCCL); null alone
  Collectives* hot_reducer_ = nullptr;  // the overlapped hot-row exchange's own (Gloo)
  JobInput input_;
  std::unique_ptr<Trainer> trainer_;
  TrainPosition base_;  // where this run starts in the job's numbering
  std::vector<std::vector<int64_t>> resumed_hot_ids_;
  bool resumed_ = false;
  std::string restored_from_;  // the checkpoint folder this run restored, "" for none
  std::unique_ptr<HotSetRefresher> refresher_;
  std::unique_ptr<ClusterCheckpointer> checkpointer_;
  WorkerMetrics metrics_;

  Clock::time_point start_;
  Clock::time_point last_report_;
  Clock::time_point last_step_;
  NetworkSnapshot network_start_;
  int64_t samples_ = 0;  // this run's, on this rank
  int64_t steps_ = 0;    // this run's
  LossAverage loss_avg_;
  int64_t migrations_reported_ = 0;
  // dlrm_hot_hit_ratio: the share of the ids since the last progress report that hot rows served.
  RatioSinceLastRead hot_hits_;
  int64_t total_steps_ = -1;                 // the job's steps, -1 when unknown
  std::map<std::string, double> last_eval_;  // rank 0's latest periodic evaluation
  bool evaluated_ = false;
  bool target_reached_ = false;  // training.target_auc: every rank stops at this boundary
  std::unique_ptr<job_run_internal::CountingReader>
      train_reader_;  // what this run reads, for checkpoints

  int epochs_left_ = 0;
  int64_t max_steps_left_ = 0;
  bool nothing_left_ = false;
  int64_t checkpoint_every_ = 0;
  int64_t refresh_every_ = 0;
  int64_t eval_every_ = 0;
  int64_t decide_every_ = 0;
  int64_t requests_served_ = 0;
};

}  // namespace dlrm::worker
