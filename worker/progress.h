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
