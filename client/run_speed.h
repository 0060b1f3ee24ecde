// How fast a watched job trains, from the jobs of its watch events: RunSpeed for `dlrmctl watch`
// (client/job_format.h's JobEventLine) and JobProgressMeter for `dlrm local`'s progress line.
// Pure: no RPC, no clock (the coordinator's report times).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "proto/jobs.pb.h"

namespace dlrm::client {

// How fast the current run of a job trains, as a watcher measures it from the jobs of the events
// it sees: steps and samples per second over the last 30 s of progress reports (by the
// coordinator's report times). Only what the run trained while watched counts: a job resumed from
// a checkpoint reports totals (step, samples) that start at the checkpoint's, a rank's first
// report after a start can add a whole checkpoint's samples at once, and a recovery rolls the
// totals back; none of that is a sample trained. A run starts over when the job leaves RUNNING,
// its recoveries change or its step or a rank's samples go back.
class RunSpeed {
 public:
  // Feeds the job of the next event (of one job).
  void Observe(const dlrm::v1::Job& job);
  // nullopt until the reports seen of the run span a second.
  std::optional<double> steps_per_sec() const;
  std::optional<double> samples_per_sec() const;

 private:
  std::optional<double> Seconds() const;  // the span of the window; nullopt under a second
  struct Point {
    int64_t time_ms = 0;  // the report's time (JobProgress.time_ms)
    int64_t step = 0;
    int64_t trained = 0;  // samples the ranks trained since the run's first point
  };
  void Restart();

  std::string job_id_;
  int32_t recoveries_ = 0;
  std::vector<int64_t> rank_samples_;  // at the newest point; 0: no report yet this run
  std::deque<Point> points_;           // oldest first, within the window (at least two)
};

// True once every rank of the job's run has reported progress (Job.rank_samples all > 0). Until
// then Job.total_samples lacks what the silent ranks hold: a resumed job's ranks each bring their
// share of the checkpoint's samples with their first report, which a curve of total samples over
// time would draw as a burst of training (dlrm local --report measures from here).
bool EveryRankReported(const dlrm::v1::Job& job);

// What `dlrm local`'s progress line (worker::ProgressLine::Update) shows of a job.
struct ProgressFigures {
  int64_t step = 0;
  int64_t samples = 0;  // the job's total (Job.total_samples), a checkpoint's included
  double loss = 0;
  double samples_per_sec = 0;  // what this run trains (RunSpeed), not the total over the time
  std::optional<double> steps_per_sec;  // RunSpeed's, for the ETA
  int64_t total_steps = -1;             // -1: unknown
};

// `dlrm local`'s progress line for the job it watches: the figures to draw for each event's job,
// the rate measured by a RunSpeed, so that a job resumed from a checkpoint shows what it trains
// now and not its checkpoint's samples over the time since the command started, and an ETA at
// the steps/s of the same window (after a recovery, which takes the job's step back, too).
class JobProgressMeter {
 public:
  // Feeds the job of the next event (of one job). nullopt while the job is not RUNNING or its
  // rate is not measured yet (the first second of its reports): no line that shows no rate.
  std::optional<ProgressFigures> Observe(const dlrm::v1::Job& job);

 private:
  RunSpeed speed_;
};

}  // namespace dlrm::client
