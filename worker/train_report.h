// The result of a training run, as printed at the end and written by --metrics-out: one JSON
// object with at least auc, logloss, accuracy, samples_per_sec and steps. `dlrm train` and
// `dlrm local` write the same shape.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlrm::worker {

struct TrainReport {
  double auc = 0;
  double logloss = 0;
  double accuracy = 0;
  double samples_per_sec = 0;
  int64_t steps = 0;
  int64_t train_samples = 0;
  int64_t eval_samples = 0;
  double train_seconds = 0;
  int64_t skipped_lines = 0;
  // Embedding traffic (distributed runs; 0 in dlrm train, whose tables are in process).
  // gRPC bytes to and from the parameter servers per sample: rank 0's, of every call (its
  // evaluations' lookups and checkpoint calls too).
  double ps_bytes_per_sample = 0;
  double hot_hit_rate = 0;     // share of id lookups served by the workers' hot rows
  int64_t hot_rows = 0;        // hot rows replicated on each worker at the end
  int64_t hot_migrations = 0;  // rows moved between hot and cold while training
  // training.target_auc: the target (0 = none), and the step whose periodic evaluation reached
  // it, where training stopped (-1 = not reached). Written to the JSON only with a target; `dlrm
  // train` fills them.
  double target_auc = 0;
  int64_t reached_target_step = -1;
  // Distributed runs: bytes per sample on the network, measured (worker/network_bytes.h):
  // network_bytes_per_sample, its parts network_<part>_bytes_per_sample and the kernel's
  // tcp_{sent,received}_bytes_per_sample. Written as top-level keys.
  std::map<std::string, double> network;
};

// True for the keys of TrainReport::network.
bool IsNetworkKey(absl::string_view key);
std::string TrainReportToJson(const TrainReport& report);
absl::StatusOr<TrainReport> TrainReportFromJson(const std::string& json);
// Writes the JSON to `path` as an OutputFile (worker/input/output_file.h): a regular file is
// replaced atomically, so a failed write leaves the old one whole. Errors name `what` and the
// path, with the reason.
absl::Status WriteTrainReport(const std::string& path, const TrainReport& report,
                              const std::string& what = "--metrics-out");
// "AUC 0.7812  logloss 0.4620  accuracy 0.7901  (eval 20000 samples; 1234 steps, 56789 samples/s)"
std::string TrainReportSummary(const TrainReport& report);
// An AUC as the summaries print it: "0.7812", or "n/a (one class)" for NaN (eval data of one
// class).
std::string FormatAuc(double auc);

}  // namespace dlrm::worker
