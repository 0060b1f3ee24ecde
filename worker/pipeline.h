// TrainingPipeline: the worker's training loop with the stages of a step (worker/trainer.h) on
// their own threads, joined by bounded queues, so that reading, id preparation and embedding
// traffic of coming batches overlap the compute of the current one (DESIGN.md, "One training
// step"):
//
//   read     BatchReader::Next                                    (batch t+4)
//   prepare  Trainer::CheckBatch + PrepareSparse: dedup per table  (batch t+3)
//   prefetch EmbeddingStore::Lookup of the ids that no pending push can change (lookahead)
//   fetch    EmbeddingStore::Lookup of the remaining ids, once the staleness bound allows
//   compute  Trainer::Compute: forward, backward, allreduce, dense optimizer   (batch t)
//   push     Trainer::PushGradients                                (batch t-1)
//
// Staleness bound k (stale-synchronous): the rows used by step t include every update of steps
// <= t-1-k. The worker enforces it itself (the parameter servers enforce it across workers):
// the lookup of an id waits for the push of step t-1-k if that step touched the id; ids that
// step t-1-k did not touch are looked up early (BagPipe-style lookahead; pushes of steps <= t-2-k
// are always complete by then). So k = 0 gives exactly the model of the unpipelined loop
// (Trainer::Step over the same batches), and k >= 1 lets lookups run k steps ahead of pushes.
// Every lookup, early or not, carries its own step t, so a parameter server that enforces the
// bound across workers parks it until all workers' pushes of steps <= t-1-k are in: correct
// with any store, but the early lookups only gain time where the store does not make them wait
// (one worker, or a server told which ids are in flight).
//
// With `store_enforces_staleness` (a store that parks a lookup for step t until the pushes of
// steps <= t-1-k are applied: the parameter servers through GrpcPsClient, or a DelayedStore with
// enforce_staleness) the worker does not wait for pushes: there is no lookahead split, and the
// fetch stage sends the lookup of all of step t's ids as soon as step t-1-k has been computed
// (so its push is on its way), letting the request travel while that push is in flight. The
// critical path from the compute of t-1-k to the compute of t then holds one store round trip
// instead of two (push, then lookup). The measured staleness is then an upper bound:
// t-1-max(t-1-k, latest push completed before the lookup was sent).
//
// Errors: the first error of any stage (reader, store, compute, progress callback) or Cancel()
// stops every thread promptly; Run() joins them and returns that error. A store call already in
// flight is not interrupted: the pipeline stops when it returns. Steps already computed are
// still pushed (unless a push failed), so that afterwards the dense model and the store hold
// the same trainer->steps_done() steps; batches not yet computed are dropped.
//
// Threading: Run() blocks the calling thread; Cancel() and metrics() may be called from any
// thread, before, during or after Run(). The trainer, store and reader are used only by the
// pipeline's threads while Run() is in progress.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "embedding/embedding_store.h"
#include "worker/input/batch_reader.h"
#include "worker/pipeline_metrics.h"
#include "worker/trainer.h"

namespace dlrm::worker {

// Reported after the gradients of a step have been pushed, on the push thread, in step order.
struct StepProgress {
  int64_t step = 0;  // the trainer's step number
  float loss = 0;    // mean loss of the batch
  int batch_size = 0;
  int64_t steps_done = 0;    // steps pushed by this Run
  int64_t samples_done = 0;  // their samples
};

struct PipelineOptions {
  // Not owned; must outlive the pipeline. `store` is the trainer's embedding store.
  Trainer* trainer = nullptr;
  embedding::EmbeddingStore* store = nullptr;
  BatchReader* reader = nullptr;               // read from its current position
  common::MetricsRegistry* metrics = nullptr;  // optional: export to prometheus

  int staleness = 0;      // k >= 0 (job spec training.staleness)
  bool lookahead = true;  // look up ids no pending push can change before that push completes
  // The store enforces the staleness bound itself (see above); `lookahead` is then unused.
  // Wrong with a store that does not (LocalEmbeddingStore): k would not be enforced.
  bool store_enforces_staleness = false;
  int epochs = 1;         // >= 1; the reader is rewound between epochs
  int64_t max_steps = 0;  // 0 = until the data ends
  // Added to the steps that error messages name, so that they are the job's: a cluster worker's
  // trainer counts from 0 in each run, a run resumed at step 400 from 400.
  int64_t message_step_offset = 0;
  int read_ahead = 4;      // capacity of the queue of parsed batches (>= 1)
  int queue_capacity = 2;  // capacity of every other queue (>= 1)

  // Called after each step's push, before the step counts as pushed (so a boundary after it, and
  // a lookup waiting for it, see its on_step done). A non-OK return stops the pipeline with that
  // error.
  std::function<absl::Status(const StepProgress&)> on_step;

  // Every `boundary_every` steps (0 = never): before the batch of step s (s a multiple of it,
  // after the first step of this Run) is read, the pipeline drains (every earlier step pushed)
  // and calls on_boundary(s) on the read thread while no other stage has work: the place to
  // change the hot set (Trainer::MigrateHotSet). A non-OK return stops the pipeline. Each step's
  // boundary is decided once, also when an epoch ends right before it (the next epoch's first
  // batch is step s too).
  int64_t boundary_every = 0;
  std::function<absl::Status(int64_t step)> on_boundary;
  // Optional: asked on the read thread at each such step before anything drains, while the other
  // stages still work on earlier steps. false: no drain and no on_boundary(s) (e.g. a hot-set
  // refresh that would not pay for itself); an error stops the pipeline. Null: always true.
  std::function<absl::StatusOr<bool>(int64_t step)> boundary_needed;
};

// staleness, epochs and max_steps of the job spec; the pointers are left null.
PipelineOptions PipelineOptionsFromSpec(const common::JobSpec& spec);

class TrainingPipeline {
 public:
  // INVALID_ARGUMENT naming the option when a pointer is null or a number is out of range.
  static absl::StatusOr<std::unique_ptr<TrainingPipeline>> Create(const PipelineOptions& options);
  ~TrainingPipeline();  // REQUIRES: no Run() in progress

  // Trains until the data (or max_steps) ends; every pushed step has been applied when it
  // returns. Returns the first error, CANCELLED after Cancel(), FAILED_PRECONDITION when called
  // a second time.
  absl::Status Run();

  // Stops a Run in progress (or the next one) with CANCELLED.
  void Cancel();

  PipelineMetrics metrics() const { return recorder_.Snapshot(); }

 private:
  // A step as error messages name it: the job's (options_.message_step_offset added).
  int64_t JobStep(int64_t step) const { return step + options_.message_step_offset; }
  struct StepItem;
  class Queue;

  explicit TrainingPipeline(const PipelineOptions& options);

  // Records the first error and wakes every thread. Unless `drop_computed`, steps already
  // computed are still pushed.
  void Fail(absl::Status status, bool drop_computed = false);
  bool Failed() const;
  // Blocks until the push of `step` has completed (or the pipeline failed); adds the time to
  // *stall. Returns the latest pushed step, or the pipeline's error.
  absl::StatusOr<int64_t> WaitPushed(int64_t step, double* stall);
  // Blocks until `step` has been computed (so its push will be sent) or the pipeline failed;
  // adds the time to *stall. Returns the latest pushed step, or the pipeline's error.
  absl::StatusOr<int64_t> WaitComputed(int64_t step, double* stall);
  // Lookup through the store, with the step named in errors.
  absl::Status Lookup(int64_t step, absl::Span<embedding::TableRows> requests);

  void ReadLoop();
  // Pops items from queue `in`, runs `work` on each and pushes them to queue in + 1.
  void StageLoop(PipelineStage stage,
                 const std::function<absl::Status(StepItem&, double* stall)>& work);
  absl::Status Prepare(StepItem& item);
  absl::Status Prefetch(StepItem& item, double* stall);
  absl::Status FetchLate(StepItem& item, double* stall);
  absl::Status Compute(StepItem& item);
  void PushLoop();

  PipelineOptions options_;
  PipelineMetricsRecorder recorder_;
  std::vector<std::unique_ptr<Queue>> queues_;  // kNumPipelineQueues
  int64_t first_step_ = 0;
  // Unique ids per table of recent steps, kept by the prefetch thread for the lookahead split.
  std::deque<std::pair<int64_t, std::vector<std::vector<int64_t>>>> recent_ids_;

  mutable absl::Mutex mu_;
  absl::CondVar pushed_cv_;  // signalled when a step is pushed or computed, and on failure
  int64_t last_pushed_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t last_computed_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dlrm::worker
