// ProgressLine: the training progress shown on stderr ("epoch 1/2 [ 45%] step 102/226  samples
// ...  loss ...  samples/s  ETA 0:12" when the total is known). On a terminal the line is redrawn
// in place (carriage return + erase) at most every `interval_tty`; otherwise a full line is printed
// every `interval_pipe`, so logs stay readable. Not thread-safe: one thread reports.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace dlrm::worker {

// The training loss a run shows while it goes (the progress line, `dlrmctl status`,
// dlrm_train_loss): a moving average of the recent steps' losses, each step's weight 1/50 and
// decaying by 0.98 a step, divided by the weights' sum so far as Adam corrects its moments. Started
// at the first loss instead, the average kept that loss at weight 0.98^(n-1) after n steps (0.56
// after 30: a job that stopped there showed 0.84 where its logloss was 0.61).
class LossAverage {
 public:
  void Add(double loss) {
    sum_ = kDecay * sum_ + (1 - kDecay) * loss;
    weight_ = kDecay * weight_ + (1 - kDecay);
  }
  // 0 before the first Add.
  double value() const { return weight_ > 0 ? sum_ / weight_ : 0; }

 private:
  static constexpr double kDecay = 0.98;
  double sum_ = 0;
  double weight_ = 0;
};

// The share of a running count (hot ids among all ids) over what was added since the last read:
// what dlrm_hot_hit_ratio shows. The share since the start hid a hot set that had gone stale (0.62
// long after a refresh had emptied it).
class RatioSinceLastRead {
 public:
  // The share of (part - part at the last read) in (whole - whole at the last read), from running
  // totals; nullopt when nothing was added since (the last read stays).
  std::optional<double> Read(int64_t part, int64_t whole) {
    if (whole <= whole_) return std::nullopt;
    const double share = static_cast<double>(part - part_) / static_cast<double>(whole - whole_);
    part_ = part;
    whole_ = whole;
    return share;
  }

 private:
  int64_t part_ = 0;
  int64_t whole_ = 0;
};

struct ProgressOptions {
  std::chrono::milliseconds interval_tty{200};
  std::chrono::milliseconds interval_pipe{5000};
  int fd = 2;  // stderr
};

class ProgressLine {
 public:
  explicit ProgressLine(const ProgressOptions& options = {});
  // Reports the running totals; prints when the interval has passed (or `force`). With
  // `total_steps` > 0 the line also shows the percent done and the time left at `steps_per_sec`
  // when given (a rate the caller measured, e.g. over a recent window), else at the rate so far
  // (steps since the first Update over the time since).
  void Update(const std::string& phase, int64_t step, int64_t samples, double loss,
              double samples_per_sec, bool force = false, int64_t total_steps = -1,
              std::optional<double> steps_per_sec = std::nullopt);
  // Ends an in-place line with a newline (no-op when nothing is pending).
  void Finish();
  bool is_tty() const { return tty_; }

 private:
  void Write(const std::string& text);

  ProgressOptions options_;
  bool tty_ = false;
  bool pending_ = false;
  std::chrono::steady_clock::time_point last_print_{};
  std::chrono::steady_clock::time_point first_update_{};
  int64_t first_step_ = -1;
};

}  // namespace dlrm::worker
