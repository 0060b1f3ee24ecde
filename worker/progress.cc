#include "worker/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlrm::worker {

ProgressLine::ProgressLine(const ProgressOptions& options)
    : options_(options), tty_(::isatty(options.fd) == 1) {}

void ProgressLine::Write(const std::string& text) {
  ssize_t ignored = ::write(options_.fd, text.data(), text.size());
  (void)ignored;
}

namespace {

// "m:ss", or "h:mm:ss" from an hour up.
std::string FormatEta(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

void ProgressLine::Update(const std::string& phase, int64_t step, int64_t samples, double loss,
                          double samples_per_sec, bool force, int64_t total_steps,
                          std::optional<double> steps_per_sec) {
  auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step;
    first_update_ = now;
  }
  auto interval = tty_ ? options_.interval_tty : options_.interval_pipe;
  if (!force && last_print_.time_since_epoch().count() != 0 && now - last_print_ < interval) {
    return;
  }
  last_print_ = now;
  std::string text;
  if (total_steps > 0) {
    const double done = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_steps));
    text = absl::StrFormat("%s [%3.0f%%] step %d/%d  samples %d  loss %.5f  %.0f samples/s", phase,
                           100 * done, step, total_steps, samples, loss, samples_per_sec);
    const double seconds = std::chrono::duration<double>(now - first_update_).count();
    const double rate = steps_per_sec.has_value() ? *steps_per_sec
                        : step > first_step_ && seconds > 0
                            ? static_cast<double>(step - first_step_) / seconds
                            : 0;
    if (rate > 0) {
      absl::StrAppend(
          &text, "  ETA ",
          FormatEta(static_cast<double>(std::max<int64_t>(0, total_steps - step)) / rate));
    }
  } else {
    text = absl::StrFormat("%s step %d  samples %d  loss %.5f  %.0f samples/s", phase, step,
                           samples, loss, samples_per_sec);
  }
  if (tty_) {
    Write("\r\033[K" + text);
    pending_ = true;
  } else {
    Write(text + "\n");
  }
}

void ProgressLine::Finish() {
  if (tty_ && pending_) Write("\n");
  pending_ = false;
}

}  // namespace dlrm::worker
