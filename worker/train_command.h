// `dlrm train`: the single-process trainer. The job spec's model trains on its data with an
// in-process embedding store, then is evaluated on the eval split (also every
// training.eval_every_steps steps when the spec asks). Also the reference that the
// distributed service is compared against.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "dense/backend.h"
#include "embedding/local_store.h"
#include "worker/run_report.h"
#include "worker/train_report.h"
#include "worker/trainer.h"

namespace dlrm::worker {

struct TrainRunOptions {
  std::string device_override;  // "" = the spec's training.device
  int threads = 0;              // CPU threads for BLAS and the store; 0 = all cores
  bool show_progress = true;    // the progress line on stderr
  // On a CUDA device: the tables live in GPU memory when they take at most this many bytes with
  // their optimizer state (TrainerOptions::gpu_table_budget_bytes; -1 = 80% of free device
  // memory, 0 = never).
  int64_t gpu_table_budget_bytes = -1;
  // A checkpoint (or a folder of them: the newest committed) to continue from: model, optimizer
  // state, step and input position (docs/CHECKPOINTS.md). "" = the spec's
  // checkpoint.resume_from, or a fresh start when that is empty too. Both set and naming
  // different paths is INVALID_ARGUMENT naming both.
  std::string resume_from;
  // When set, receives the progress (every step) and the evaluations (training.eval_every_steps
  // and the final one), for the run report. Not owned.
  RunRecorder* recorder = nullptr;
  // When set and non-zero (the number of the signal that asked for it, e.g. SIGINT from `dlrm
  // train`'s handler): the run stops after the step in progress with CANCELLED, so that the
  // command still writes its --report page of the steps taken. Not owned.
  const std::atomic<int>* interrupted = nullptr;
};

// Creates the dense backend for `device` ("auto", "cpu", "cuda"; on CUDA device `cuda_device`)
// and logs what "auto" chose, so that a CUDA build on a machine without a GPU says it runs on the
// CPU. `activity` is what the log line says the backend does ("training on cpu(...)";
// "evaluating", "scoring").
absl::StatusOr<std::unique_ptr<dense::Backend>> CreateBackendForDevice(
    const std::string& device, const std::string& math_mode, int cpu_threads, int cuda_device = 0,
    const std::string& activity = "training");

// What a run leaves behind, for tests that compare models.
struct TrainArtifacts {
  std::vector<float> dense_params;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
};

// Trains the spec's model. Without eval data (data.eval_fraction holds out no record, and
// data.eval names no file) the report's auc, logloss and accuracy are NaN (null in its JSON) and
// eval_samples 0.
absl::StatusOr<TrainReport> TrainInProcess(const common::JobSpec& spec,
                                           const TrainRunOptions& options,
                                           TrainArtifacts* artifacts = nullptr);

struct TrainCommandOptions {
  std::string config_path;
  // "" = none. Checked before training (its folder exists and is writable, it is none of the
  // inputs), written atomically (worker/input/output_file.h: OutputFile).
  std::string metrics_out;
  bool strict = false;  // --strict: stop at the first malformed line
  std::string report;   // --report: the HTML run report (worker/run_report.h); "" = none
  TrainRunOptions run;
};

// Loads the spec, trains, prints the summary on stdout and writes --metrics-out and --report (the
// report also when training fails after its first step).
absl::StatusOr<TrainReport> RunTrainCommand(const TrainCommandOptions& options);

// The outputs of a run that trains the job of `config_path` (`dlrm train`, `dlrm local`), before
// any work: --metrics-out and --report ("" = none) can be written, neither is the spec or one of
// its data files (the page or the metrics would replace it), neither lies in a checkpoint folder
// the run writes or resumes from (checkpoint.dir, checkpoint.resume_from, `resume_from`: it
// would replace a checkpoint's file), and they are not one file.
absl::Status CheckRunOutputs(const std::string& config_path, const common::JobSpec& spec,
                             const std::string& metrics_out, const std::string& report,
                             const std::string& resume_from = "");

// `dlrm eval` and `dlrm predict`: the model of a checkpoint, built from the job spec it carries.
struct CheckpointModelOptions {
  std::string checkpoint;         // a checkpoint or a folder of them (the newest committed)
  std::vector<std::string> data;  // input files (TSV or binary); every record is used
  std::string device = "cpu";
  int threads = 0;
};
// Each data file's format is told by its first bytes (binary files start with DLRMBIN1), whatever
// format the model was trained on.
//
// Prints AUC, logloss and accuracy over every record of the data (JSON to metrics_out if set,
// checked before the model is loaded and written as --metrics-out of dlrm train). Data without a
// valid record is FAILED_PRECONDITION.
absl::StatusOr<EvalMetrics> RunEvalCommand(const CheckpointModelOptions& options,
                                           const std::string& metrics_out);
// Writes one click probability per input line to `out`, in input order. Parsing is strict: a
// malformed line, or an empty one within the file, is an error naming file:line, since skipping it
// would shift every later score. A TSV line may leave out the label (39 fields, as Criteo's test
// files do). `out` is written as an OutputFile (worker/input/output_file.h:
// a regular file atomically, a symlink's target, a FIFO or device in place); it must not be one of
// the data files.
absl::Status RunPredictCommand(const CheckpointModelOptions& options, const std::string& out);

}  // namespace dlrm::worker
