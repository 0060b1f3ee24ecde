#include "worker/pipeline_metrics.h"

#include <algorithm>

namespace dlrm::worker {

const char* PipelineStageName(PipelineStage stage) {
  switch (stage) {
    case PipelineStage::kRead:
      return "read";
    case PipelineStage::kPrepare:
      return "prepare";
    case PipelineStage::kPrefetch:
      return "prefetch";
    case PipelineStage::kFetch:
      return "fetch";
    case PipelineStage::kCompute:
      return "compute";
    case PipelineStage::kPush:
      return "push";
  }
  return "unknown";
}

const char* PipelineQueueName(int queue) {
  static constexpr const char* kNames[kNumPipelineQueues] = {"parsed", "prepared", "prefetched",
                                                             "fetched", "computed"};
  return queue >= 0 && queue < kNumPipelineQueues ? kNames[queue] : "unknown";
}

PipelineMetricsRecorder::PipelineMetricsRecorder(common::MetricsRegistry* registry) {
  if (registry == nullptr) return;
  for (int s = 0; s < kNumPipelineStages; ++s) {
    const common::MetricLabels labels = {
        {"stage", PipelineStageName(static_cast<PipelineStage>(s))}};
    busy_[s] = &registry->Counter("pipeline_stage_busy_seconds_total",
                                  "Seconds a training-pipeline stage spent working.", labels);
    stall_[s] = &registry->Counter(
        "pipeline_stage_stall_seconds_total",
        "Seconds a training-pipeline stage waited for input, output room or the staleness bound.",
        labels);
  }
  for (int q = 0; q < kNumPipelineQueues; ++q) {
    depth_[q] =
        &registry->Gauge("pipeline_queue_depth", "Batches waiting in a training-pipeline queue.",
                         {{"queue", PipelineQueueName(q)}});
  }
  staleness_ =
      &registry->Histogram("staleness_steps", "Measured staleness of embedding lookups, in steps.",
                           {0, 1, 2, 3, 4, 6, 8, 16, 32});
}

void PipelineMetricsRecorder::AddBusy(PipelineStage stage, double seconds) {
  const int s = static_cast<int>(stage);
  {
    absl::MutexLock lock(&mu_);
    m_.stages[s].busy_seconds += seconds;
  }
  if (busy_[s] != nullptr) busy_[s]->Increment(seconds);
}

void PipelineMetricsRecorder::AddStall(PipelineStage stage, double seconds) {
  const int s = static_cast<int>(stage);
  {
    absl::MutexLock lock(&mu_);
    m_.stages[s].stall_seconds += seconds;
  }
  if (stall_[s] != nullptr) stall_[s]->Increment(seconds);
}

void PipelineMetricsRecorder::AddItem(PipelineStage stage) {
  absl::MutexLock lock(&mu_);
  ++m_.stages[static_cast<int>(stage)].items;
}

void PipelineMetricsRecorder::SetQueueDepth(int queue, int64_t depth) {
  {
    absl::MutexLock lock(&mu_);
    m_.queue_depth[queue] = depth;
  }
  if (depth_[queue] != nullptr) depth_[queue]->Set(static_cast<double>(depth));
}

void PipelineMetricsRecorder::AddStalenessWait(double seconds) {
  absl::MutexLock lock(&mu_);
  m_.staleness_wait_seconds += seconds;
}

void PipelineMetricsRecorder::ObserveStaleness(int64_t steps) {
  steps = std::max<int64_t>(steps, 0);
  {
    absl::MutexLock lock(&mu_);
    if (m_.staleness_counts.size() <= static_cast<size_t>(steps)) {
      m_.staleness_counts.resize(steps + 1, 0);
    }
    ++m_.staleness_counts[steps];
    m_.max_staleness = std::max(m_.max_staleness, steps);
  }
  if (staleness_ != nullptr) staleness_->Observe(static_cast<double>(steps));
}

void PipelineMetricsRecorder::AddLookahead(int64_t early_ids, int64_t late_ids) {
  absl::MutexLock lock(&mu_);
  m_.early_ids += early_ids;
  m_.late_ids += late_ids;
}

void PipelineMetricsRecorder::AddStep(int64_t samples) {
  absl::MutexLock lock(&mu_);
  ++m_.steps;
  m_.samples += samples;
}

PipelineMetrics PipelineMetricsRecorder::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return m_;
}

}  // namespace dlrm::worker
