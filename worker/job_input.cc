#include "worker/job_input.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

// A job reads its data more than once (a count for the eval split, each epoch, the eval set
// after a probe), which a pipe or a device cannot give: its second open waited for a writer for
// good, or read nothing and trained a third of the epochs. Refused up front, naming the path.
// Missing paths are left to the readers (NOT_FOUND).
absl::Status CheckDataFiles(const char* key, const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": ", path,
        std::filesystem::is_directory(status)
            ? " is a folder; list the data files in it"
            : " is not a regular file (a pipe or a device): a job reads its data more than once "
              "(to split off the eval set, once per epoch), so write it to a file first"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobInput> OpenJobInput(const common::JobSpec& spec, const JobInputOptions& options) {
  DLRM_RETURN_IF_ERROR(CheckModelFitsCriteoInput(spec));
  if (spec.train_paths.empty()) return absl::InvalidArgumentError("data.train: no training files");
  DLRM_RETURN_IF_ERROR(CheckDataFiles("data.train", spec.train_paths));
  DLRM_RETURN_IF_ERROR(CheckDataFiles("data.eval", spec.eval_paths));
  DLRM_ASSIGN_OR_RETURN(InputFormat format, ParseInputFormat(spec.format));

  std::vector<int64_t> rows;
  for (const auto& t : spec.tables) rows.push_back(t.rows);

  BatchReaderOptions train;
  train.paths = spec.train_paths;
  train.format = format;
  train.strict = spec.strict;
  train.on_issue = options.on_issue;
  train.batch_size = spec.batch_size;
  train.table_rows = rows;
  train.rank = options.rank;
  train.world_size = options.world_size;
  train.even_shards = options.even_shards;
  train.interleave_block = options.world_size > 1 ? spec.batch_size : 0;

  BatchReaderOptions eval = train;
  eval.rank = 0;
  eval.world_size = 1;
  eval.even_shards = false;
  eval.on_issue = nullptr;  // logged, not given to the training data's sink

  bool has_eval = true;
  int64_t train_records = -1;
  if (spec.eval_paths.empty()) {
    DLRM_ASSIGN_OR_RETURN(int64_t total, CountRecords(spec.train_paths, format, spec.strict));
    DLRM_ASSIGN_OR_RETURN(TrainEvalSplit split, SplitTrainEval(total, spec.eval_fraction));
    // The range that ends with the data is left open (-1): its reader reads on to the data's end,
    // and so reports the malformed lines after the last valid record (a file cut off mid-line).
    train.begin = split.train_begin;
    train.end = split.train_end == total ? -1 : split.train_end;
    eval.begin = split.eval_begin;
    eval.end = split.eval_end == total ? -1 : split.eval_end;
    has_eval = split.eval_end > split.eval_begin;
    train_records = split.train_end - split.train_begin;
  } else {
    eval.paths = spec.eval_paths;
  }
  JobInput input;
  if (train_records >= 0) {
    const int64_t records = train_records;
    const int64_t world = std::max(1, options.world_size);
    input.train_records = options.even_shards ? records / world : (records + world - 1) / world;
  }
  DLRM_ASSIGN_OR_RETURN(input.train, BatchReader::Create(train));
  if (has_eval) {
    DLRM_ASSIGN_OR_RETURN(input.eval, BatchReader::Create(eval));
  }
  return input;
}

int64_t TotalSteps(const common::JobSpec& spec, int64_t train_records) {
  if (train_records < 0 || spec.batch_size <= 0) return -1;
  const int64_t per_epoch = (train_records + spec.batch_size - 1) / spec.batch_size;
  int64_t total = per_epoch * spec.epochs;
  if (spec.max_steps > 0) total = std::min(total, spec.max_steps);
  return total;
}

absl::Status SkipTrainedBatches(BatchReader* reader, int64_t batches, int64_t epoch,
                                const std::string& who) {
  Batch skipped;
  for (int64_t b = 0; b < batches; ++b) {
    DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&skipped));
    if (more) continue;
    DLRM_LOG(WARNING) << who << "the checkpoint stands " << batches << " batch(es) into epoch "
                      << epoch + 1 << ", but the training data read here has only " << b
                      << " (it changed since?): going on with the next epoch";
    break;
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
