#include "client/run_speed.h"

#include <algorithm>

namespace dlrm::client {

// The window RunSpeed measures over, and the least span of reports it measures.
constexpr int64_t kSpeedWindowMs = 30'000;
constexpr int64_t kSpeedMinSpanMs = 1'000;

void RunSpeed::Restart() {
  rank_samples_.clear();
  points_.clear();
}

void RunSpeed::Observe(const dlrm::v1::Job& job) {
  if (job.job_id() != job_id_ || job.recoveries() != recoveries_ ||
      job.state() != dlrm::v1::JOB_STATE_RUNNING ||
      static_cast<size_t>(job.rank_samples_size()) != rank_samples_.size()) {
    Restart();
    job_id_ = job.job_id();
    recoveries_ = job.recoveries();
    if (job.state() != dlrm::v1::JOB_STATE_RUNNING) return;
  }
  const int64_t time_ms = job.progress().time_ms();
  if (time_ms <= 0) return;  // no report yet
  if (!points_.empty() && time_ms < points_.back().time_ms) Restart();
  // The step of the newest report, which ranks make at their own times: the furthest one seen.
  const int64_t step = std::max(job.progress().step(), points_.empty() ? 0 : points_.back().step);
  int64_t trained = points_.empty() ? 0 : points_.back().trained;
  if (rank_samples_.empty()) rank_samples_.assign(job.rank_samples_size(), 0);
  for (int r = 0; r < job.rank_samples_size(); ++r) {
    const int64_t now = job.rank_samples(r);
    int64_t& then = rank_samples_[r];
    if (now < then) {  // this rank went back: measure afresh
      Restart();
      Observe(job);
      return;
    }
    // A rank's first report of the run holds what it trained before (a checkpoint's samples):
    // only what it adds after that counts.
    if (then > 0) trained += now - then;
    then = now;
  }
  if (!points_.empty() && time_ms == points_.back().time_ms) {
    points_.back() = {.time_ms = time_ms, .step = step, .trained = trained};
    return;  // no new report (another change of the job), or one more rank at the same time
  }
  points_.push_back({.time_ms = time_ms, .step = step, .trained = trained});
  while (points_.size() > 2 && points_[1].time_ms <= time_ms - kSpeedWindowMs) {
    points_.pop_front();
  }
}

std::optional<double> RunSpeed::Seconds() const {
  if (points_.size() < 2 || points_.back().time_ms - points_.front().time_ms < kSpeedMinSpanMs) {
    return std::nullopt;
  }
  return (points_.back().time_ms - points_.front().time_ms) / 1000.0;
}

std::optional<double> RunSpeed::steps_per_sec() const {
  const std::optional<double> seconds = Seconds();
  if (!seconds.has_value()) return std::nullopt;
  return (points_.back().step - points_.front().step) / *seconds;
}

std::optional<double> RunSpeed::samples_per_sec() const {
  const std::optional<double> seconds = Seconds();
  if (!seconds.has_value()) return std::nullopt;
  return (points_.back().trained - points_.front().trained) / *seconds;
}

bool EveryRankReported(const dlrm::v1::Job& job) {
  return job.rank_samples_size() > 0 &&
         std::all_of(job.rank_samples().begin(), job.rank_samples().end(),
                     [](int64_t samples) { return samples > 0; });
}

std::optional<ProgressFigures> JobProgressMeter::Observe(const dlrm::v1::Job& job) {
  speed_.Observe(job);
  const std::optional<double> samples_per_sec = speed_.samples_per_sec();
  if (job.state() != dlrm::v1::JOB_STATE_RUNNING || !samples_per_sec.has_value()) {
    return std::nullopt;
  }
  const auto& metrics = job.progress().metrics();
  const auto total = metrics.find("total_steps");
  return ProgressFigures{
      .step = job.progress().step(),
      .samples = job.total_samples(),
      .loss = job.progress().loss(),
      .samples_per_sec = *samples_per_sec,
      .steps_per_sec = speed_.steps_per_sec(),
      .total_steps = total == metrics.end() ? -1 : static_cast<int64_t>(total->second)};
}

}  // namespace dlrm::client
