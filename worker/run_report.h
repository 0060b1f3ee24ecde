// The run report of `dlrm train --report FILE.html` and `dlrm local --report FILE.html`: one
// self-contained HTML page (inline CSS, SVG charts drawn here, no script, nothing fetched) with a
// summary table and the curves of a run: training loss by step, eval AUC and logloss by step,
// throughput by elapsed time.
//
//   RunRecorder recorder;
//   recorder.Start(0, first_step, samples_so_far);
//   for (...) recorder.Record(elapsed_s, step, samples, loss);   // every step, or every update
//   recorder.RecordEval(elapsed_s, step, auc, logloss);          // periodic and final evaluation
//   HtmlReportOptions page{.title = "job demo", .summary = RunSummary("demo", report, "")};
//   DLRM_RETURN_IF_ERROR(WriteHtmlReport("report.html", page, recorder));
//
// The recorder keeps at most `max_points` training points however long the run: it starts with
// one point per step and, when full, merges neighbours pairwise and doubles the interval, so the
// points stay evenly spaced and each one averages the loss over its interval. Not thread-safe:
// one thread records.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/train_report.h"

namespace dlrm::worker {

// The training progress over one interval of steps (start_* are where the interval began).
struct TrainingPoint {
  double start_seconds = 0;
  int64_t start_step = 0;
  int64_t start_samples = 0;
  double seconds = 0;         // elapsed at the end of the interval
  int64_t step = 0;           // the step that ended the interval
  int64_t samples = 0;        // samples trained by then
  double loss = 0;            // mean training loss over the interval (NaN when none was finite)
  double paused_seconds = 0;  // time within the interval that was not training (evaluations)
  // Training throughput over the interval, pauses left out (0 when no time passed).
  double samples_per_sec() const;
};

struct EvalPoint {
  double seconds = 0;
  int64_t step = 0;
  double auc = 0;
  double logloss = 0;
};

struct RunRecorderOptions {
  int max_points = 400;  // training points kept (and evaluations); at least 2
  // An interval also lasts at least this long, so that updates arriving at uneven times (the
  // progress reports of a cluster's workers) do not turn into spikes of throughput.
  double min_interval_seconds = 0;
};

class RunRecorder {
 public:
  explicit RunRecorder(const RunRecorderOptions& options = {});

  // The point the run starts from (step 0, or where a resumed run goes on); without it the first
  // Record() is the start.
  void Start(double seconds, int64_t step, int64_t samples);
  // The run reached `step` (`samples` trained) after `seconds`; `loss` is the loss of the steps
  // since the previous call (one step's loss, or an average). A step that does not advance (a
  // repeated update, a job going back to its last checkpoint) is ignored; non-finite losses are
  // left out of the averages.
  void Record(double seconds, int64_t step, int64_t samples, double loss);
  // `seconds` of the interval in progress were spent on something else than training (an
  // evaluation): its throughput leaves them out.
  void Pause(double seconds);
  // An evaluation of the model at `step`. A second evaluation at the same step replaces the
  // first (the final evaluation after a periodic one at the last step).
  void RecordEval(double seconds, int64_t step, double auc, double logloss);

  // The finished intervals and the one in progress, in step order; an interval in progress shorter
  // than min_interval_seconds is part of the last finished one.
  std::vector<TrainingPoint> training() const;
  const std::vector<EvalPoint>& eval() const { return eval_; }
  int64_t last_step() const { return last_step_; }
  int64_t last_samples() const { return last_samples_; }
  double last_seconds() const { return last_seconds_; }

 private:
  void CloseInterval();
  void Halve();

  int max_points_;
  double min_interval_seconds_;
  int64_t interval_steps_ = 1;  // doubles at each Halve()
  std::vector<TrainingPoint> points_;
  std::vector<double> loss_weights_;  // finite-loss steps behind each point's mean
  TrainingPoint open_;                // the interval being filled
  double open_loss_sum_ = 0;
  double open_loss_weight_ = 0;
  bool started_ = false;
  int64_t last_step_ = 0;
  int64_t last_samples_ = 0;
  double last_seconds_ = 0;
  std::vector<EvalPoint> eval_;
};

struct HtmlReportOptions {
  std::string title;  // the page's heading, e.g. "dlrm train: job demo"
  // Rows of the summary table, in order (label, value); both are escaped.
  std::vector<std::pair<std::string, std::string>> summary;
};

// The summary rows of a run: job, outcome ("succeeded", or `failure` when not empty), final AUC,
// logloss and accuracy (when it was evaluated), steps, samples, seconds, samples/s and the date.
std::vector<std::pair<std::string, std::string>> RunSummary(const std::string& job,
                                                            const TrainReport& report,
                                                            const std::string& failure);

// The page as a string.
std::string RenderHtmlReport(const HtmlReportOptions& options, const RunRecorder& recorder);
// Writes the page to `path` as every output of the commands is written (OutputFile: a regular
// file atomically through "<path>.tmp", a symlink's target, a FIFO or device in place); an
// unwritable path is an error naming it. Check it before a run with CheckOutputPath and
// CheckOutputIsNotAnInput (worker/input/output_file.h).
absl::Status WriteHtmlReport(const std::string& path, const HtmlReportOptions& options,
                             const RunRecorder& recorder);

// `text` with & < > " ' replaced by entities.
std::string HtmlEscape(const std::string& text);

}  // namespace dlrm::worker
