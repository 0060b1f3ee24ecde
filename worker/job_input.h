// The input of a job: the training and evaluation readers a job spec describes, for one rank.
// With no eval paths, the last eval_fraction of the training records is held out (the same
// records on every rank; each rank trains on its own contiguous slice of the rest).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/criteo_shape.h"
#include "common/job_spec.h"
#include "worker/input/batch_reader.h"

namespace dlrm::worker {

struct JobInput {
  std::unique_ptr<BatchReader> train;
  std::unique_ptr<BatchReader> eval;  // null when the job has no eval data
  // Training records of this rank per epoch, when known without an extra pass over the data
  // (the eval split is held out of the training files); -1 otherwise.
  int64_t train_records = -1;
};

// Steps a job takes: epochs x ceil(train_records / batch_size), at most max_steps; -1 when
// train_records is unknown.
int64_t TotalSteps(const common::JobSpec& spec, int64_t train_records);

// Resuming mid-epoch: reads and drops the `batches` batches of epoch `epoch` (0-based) that the
// checkpoint trained, so that the next batch is the one the uninterrupted run would take. Data
// that runs out first (it changed since?) is logged, after `who` ("" or "job j rank 1: "), and
// the run goes on with the next epoch.
absl::Status SkipTrainedBatches(BatchReader* reader, int64_t batches, int64_t epoch,
                                const std::string& who);

struct JobInputOptions {
  int rank = 0;
  int world_size = 1;
  // Every rank gets the same number of training records (the remainder is dropped), so that
  // synchronous workers take the same number of steps.
  bool even_shards = false;
  // With world_size > 1 each rank's training records are interleaved in blocks of the spec's
  // batch_size (its share of the global batch, RecordReaderOptions::interleave_block): step k of
  // every rank together trains on the records step k of a single process trains on.
  ParseIssueSink on_issue = nullptr;
};

// INVALID_ARGUMENT naming the key when the spec's model does not match Criteo input (13 dense
// features and 26 tables, one-hot or multi-hot alike). Defined in common/criteo_shape.h, where
// the coordinator's SubmitJob uses it too.
using common::CheckModelFitsCriteoInput;

// Checks the model (CheckModelFitsCriteoInput) and opens the readers. Missing files are NOT_FOUND
// naming the path.
absl::StatusOr<JobInput> OpenJobInput(const common::JobSpec& spec, const JobInputOptions& options);

}  // namespace dlrm::worker
