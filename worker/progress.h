// ProgressLine: the training progress shown on stderr. On a terminal the line is redrawn in place
// (carriage return + erase) at most every `interval_tty`; otherwise a full line is printed every
// `interval_pipe`, so logs stay readable. Not thread-safe: one thread reports.
#pragma once

#include <chrono>
#include <cstdint>
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
  // Reports the running totals; prints when the interval has passed (or `force`).
  void Update(const std::string& phase, int64_t step, int64_t samples, double loss,
              double samples_per_sec, bool force = false);
  // Ends an in-place line with a newline (no-op when nothing is pending).
  void Finish();
  bool is_tty() const { return tty_; }

 private:
  void Write(const std::string& text);

  ProgressOptions options_;
  bool tty_ = false;
  bool pending_ = false;
  std::chrono::steady_clock::time_point last_print_{};
};

}  // namespace dlrm::worker
