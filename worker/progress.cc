#include "worker/progress.h"

#include <unistd.h>

#include "absl/strings/str_format.h"

namespace dlrm::worker {

ProgressLine::ProgressLine(const ProgressOptions& options)
    : options_(options), tty_(::isatty(options.fd) == 1) {}

void ProgressLine::Write(const std::string& text) {
  ssize_t ignored = ::write(options_.fd, text.data(), text.size());
  (void)ignored;
}

void ProgressLine::Update(const std::string& phase, int64_t step, int64_t samples, double loss,
                          double samples_per_sec, bool force) {
  auto now = std::chrono::steady_clock::now();
  auto interval = tty_ ? options_.interval_tty : options_.interval_pipe;
  if (!force && last_print_.time_since_epoch().count() != 0 && now - last_print_ < interval) {
    return;
  }
  last_print_ = now;
  std::string text = absl::StrFormat("%s step %d  samples %d  loss %.5f  %.0f samples/s", phase,
                                     step, samples, loss, samples_per_sec);
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
