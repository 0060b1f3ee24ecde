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
};

// Registered when the process starts, so that an idle worker exports its series too.
WorkerMetrics RegisterWorkerMetrics(common::MetricsRegistry* registry);

}  // namespace dlrm::worker
