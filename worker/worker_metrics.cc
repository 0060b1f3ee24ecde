#include "worker/worker_metrics.h"

namespace dlrm::worker {

WorkerMetrics RegisterWorkerMetrics(common::MetricsRegistry* registry) {
  WorkerMetrics m;
  if (registry == nullptr) return m;
  m.samples =
      &registry->Counter("samples_trained_total", "Training samples processed by this worker.");
  m.steps = &registry->Counter("steps_trained_total", "Training steps taken by this worker.");
  m.step_seconds = &registry->Histogram("step_seconds",
                                        "Wall time of one training step (between completed steps).",
                                        common::MetricsRegistry::LatencyBuckets());
  m.hot_hit_ratio = &registry->Gauge(
      "hot_hit_ratio",
      "Share of embedding id lookups served by the worker's hot rows, over the steps since the "
      "previous progress report (about a second).");
  m.ps_bytes_per_sample = &registry->Gauge(
      "ps_bytes_per_sample",
      "gRPC bytes to and from the parameter servers per sample trained, counted on every "
      "message (serialized bytes and gRPC's 5-byte prefix; not HTTP/2, TLS or TCP framing).");
  m.hot_migrations =
      &registry->Counter("hot_migrations_total",
                         "Embedding rows moved between the hot set and the parameter servers.");
  const char* help =
      "Job runs this worker took part in, by how its part ended: succeeded, failed, or stopped "
      "(cancelled, recovering, or ended elsewhere). A job that recovers ends the run of every "
      "rank, and its next run counts again.";
  m.jobs_succeeded = &registry->Counter("worker_jobs_total", help, {{"result", "succeeded"}});
  m.jobs_failed = &registry->Counter("worker_jobs_total", help, {{"result", "failed"}});
  m.jobs_stopped = &registry->Counter("worker_jobs_total", help, {{"result", "stopped"}});
  m.job_running = &registry->Gauge("worker_job_running", "1 while this worker trains a job.");
  m.train_loss = &registry->Gauge(
      "train_loss", "Training log loss of this worker's recent steps (moving average, 1/50).");
  m.epoch =
      &registry->Gauge("train_epoch", "Epoch in progress of the job this worker trains, 1-based.");
  const char* rate_help =
      "Learning rate of the latest step, by optimizer (optimizer.schedule's, or the optimizer's).";
  m.dense_learning_rate = &registry->Gauge("learning_rate", rate_help, {{"optimizer", "dense"}});
  m.sparse_learning_rate = &registry->Gauge("learning_rate", rate_help, {{"optimizer", "sparse"}});
  m.eval_auc = &registry->Gauge(
      "eval_auc",
      "AUC on the job's eval split at the latest evaluation (set by rank 0; 0 until then).");
  m.eval_logloss = &registry->Gauge(
      "eval_logloss",
      "Log loss on the job's eval split at the latest evaluation (set by rank 0; 0 until then).");
  m.eval_step = &registry->Gauge(
      "eval_step", "Job step of the latest evaluation (set by rank 0; 0 until then).");
  return m;
}

}  // namespace dlrm::worker
