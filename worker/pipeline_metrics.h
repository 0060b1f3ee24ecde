// Metrics of the training pipeline (worker/pipeline.h): per stage busy and stall seconds, queue
// depths, and the measured staleness of every fetch. Kept in a plain struct the caller can read
// at any time (PipelineMetricsRecorder::Snapshot) and, when a registry is given, exported to
// prometheus as
//
//   dlrm_pipeline_stage_busy_seconds_total{stage}   time a stage spent working
//   dlrm_pipeline_stage_stall_seconds_total{stage}  time it waited for input, for room in its
//                                                   output queue, or for the staleness bound
//   dlrm_pipeline_queue_depth{queue}                items waiting in each queue
//   dlrm_staleness_steps                            histogram of the measured staleness
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace dlrm::worker {

// Stages in pipeline order. kPrefetch looks up the ids no in-flight step can change; kFetch
// looks up the rest once the staleness bound allows it.
enum class PipelineStage { kRead, kPrepare, kPrefetch, kFetch, kCompute, kPush };
inline constexpr int kNumPipelineStages = 6;
// Queue i joins stage i and stage i + 1; it is named after what it holds.
inline constexpr int kNumPipelineQueues = kNumPipelineStages - 1;

const char* PipelineStageName(PipelineStage stage);  // "read", "prepare", ...
const char* PipelineQueueName(int queue);            // "parsed", "prepared", ...

struct StageMetrics {
  double busy_seconds = 0;
  double stall_seconds = 0;
  int64_t items = 0;  // batches the stage finished
};

struct PipelineMetrics {
  std::array<StageMetrics, kNumPipelineStages> stages;
  std::array<int64_t, kNumPipelineQueues> queue_depth{};
  // staleness_counts[s]: fetches whose measured staleness was s steps. A fetch for step t has
  // staleness t - 1 - u, where u is the latest step such that every update of steps <= u to the
  // rows it read had been applied when it read them (the pipeline enforces s <= k).
  std::vector<int64_t> staleness_counts;
  int64_t max_staleness = 0;
  double staleness_wait_seconds = 0;  // part of the fetch stalls spent waiting for pushes
  // Ids looked up ahead of the pending push (lookahead) and after it.
  int64_t early_ids = 0;
  int64_t late_ids = 0;
  int64_t steps = 0;    // steps whose gradients were pushed
  int64_t samples = 0;  // their samples

  const StageMetrics& stage(PipelineStage s) const { return stages[static_cast<int>(s)]; }
};

// Thread-safe accumulator behind PipelineMetrics. The registry is optional and not owned.
class PipelineMetricsRecorder {
 public:
  explicit PipelineMetricsRecorder(common::MetricsRegistry* registry);

  void AddBusy(PipelineStage stage, double seconds);
  void AddStall(PipelineStage stage, double seconds);
  void AddItem(PipelineStage stage);
  void SetQueueDepth(int queue, int64_t depth);
  void AddStalenessWait(double seconds);
  void ObserveStaleness(int64_t steps);
  void AddLookahead(int64_t early_ids, int64_t late_ids);
  void AddStep(int64_t samples);

  PipelineMetrics Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  PipelineMetrics m_ ABSL_GUARDED_BY(mu_);
  // Prometheus metrics, all null without a registry.
  std::array<prometheus::Counter*, kNumPipelineStages> busy_{};
  std::array<prometheus::Counter*, kNumPipelineStages> stall_{};
  std::array<prometheus::Gauge*, kNumPipelineQueues> depth_{};
  prometheus::Histogram* staleness_ = nullptr;
};

}  // namespace dlrm::worker
