// `dlrm train`: the single-process trainer. The job spec's model trains on its data with an
// in-process embedding store, then is evaluated on the eval split. Also the reference that the
// distributed service is compared against.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "embedding/local_store.h"
#include "worker/train_report.h"

namespace dlrm::worker {

struct TrainRunOptions {
  std::string device_override;  // "" = the spec's training.device
  int threads = 0;              // CPU threads for BLAS and the store; 0 = all cores
  bool show_progress = true;    // the progress line on stderr
};

// What a run leaves behind, for tests that compare models.
struct TrainArtifacts {
  std::vector<float> dense_params;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
};

absl::StatusOr<TrainReport> TrainInProcess(const common::JobSpec& spec,
                                           const TrainRunOptions& options,
                                           TrainArtifacts* artifacts = nullptr);

struct TrainCommandOptions {
  std::string config_path;
  std::string metrics_out;  // "" = none
  bool strict = false;      // --strict: stop at the first malformed line
  TrainRunOptions run;
};

// Loads the spec, trains, prints the summary on stdout and writes --metrics-out.
absl::StatusOr<TrainReport> RunTrainCommand(const TrainCommandOptions& options);

}  // namespace dlrm::worker
