// The worker process's Prometheus series (dlrm_samples_trained_total, dlrm_step_seconds,
// dlrm_worker_jobs_total{result}, ...), registered when the process starts so that an idle worker
// exports them too. Null members when no registry was given.
#pragma once

#include "common/metrics.h"

namespace dlrm::worker {

// Process-wide training metrics; null members when no registry was given.
struct WorkerMetrics {
  prometheus::Gauge* hot_hit_ratio = nullptr;
  prometheus::Gauge* ps_bytes_per_sample = nullptr;
  prometheus::Counter* hot_migrations = nullptr;
  prometheus::Counter* samples = nullptr;
  prometheus::Counter* steps = nullptr;
  prometheus::Histogram* step_seconds = nullptr;
  prometheus::Counter* jobs_succeeded = nullptr;
  prometheus::Counter* jobs_failed = nullptr;
  prometheus::Counter* jobs_stopped = nullptr;
  prometheus::Gauge* job_running = nullptr;
  // Learning curve of the job in progress: the training loss (moving average), the epoch, and
  // rank 0's latest evaluation (training.eval_every_steps, and the final one).
  prometheus::Gauge* train_loss = nullptr;
  prometheus::Gauge* epoch = nullptr;
  // The learning rates of the latest step (optimizer.schedule's, or the optimizers' own).
  prometheus::Gauge* dense_learning_rate = nullptr;
  prometheus::Gauge* sparse_learning_rate = nullptr;
  prometheus::Gauge* eval_auc = nullptr;
  prometheus::Gauge* eval_logloss = nullptr;
  prometheus::Gauge* eval_step = nullptr;
};

// Registered when the process starts, so that an idle worker exports its series too.
WorkerMetrics RegisterWorkerMetrics(common::MetricsRegistry* registry);

}  // namespace dlrm::worker
