// Minimal logging to stderr (our abseil has no absl/log).
//
//   DLRM_LOG(INFO) << "listening on " << address;
//   DLRM_CHECK(rows > 0) << "programmer invariant, never user input";
//
// Thread-safe: each message is formatted in its own buffer and written with one call.
// DLRM_CHECK aborts; use it only for invariants, never for I/O, peers or user input.
#pragma once

#include <sstream>
#include <string_view>

namespace dlrm::common {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below this severity are dropped. Set once from main (e.g. from a --log-level flag).
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();
// Parses "debug", "info", "warning", "error"; returns false on anything else.
bool ParseLogSeverity(std::string_view text, LogSeverity* out);
// Name shown in front of every line, e.g. "ps-1". Set once from main.
void SetLogProcessName(std::string_view name);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream when a message is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace dlrm::common

#define DLRM_LOG_SEVERITY_DEBUG ::dlrm::common::LogSeverity::kDebug
#define DLRM_LOG_SEVERITY_INFO ::dlrm::common::LogSeverity::kInfo
#define DLRM_LOG_SEVERITY_WARNING ::dlrm::common::LogSeverity::kWarning
#define DLRM_LOG_SEVERITY_ERROR ::dlrm::common::LogSeverity::kError
#define DLRM_LOG_SEVERITY_FATAL ::dlrm::common::LogSeverity::kFatal

#define DLRM_LOG(severity)                                            \
  !(DLRM_LOG_SEVERITY_##severity >= ::dlrm::common::MinLogSeverity()) \
      ? (void)0                                                       \
      : ::dlrm::common::LogVoidify() &                                \
            ::dlrm::common::LogMessage(DLRM_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

#define DLRM_CHECK(cond)                                                                           \
  (cond) ? (void)0                                                                                 \
         : ::dlrm::common::LogVoidify() &                                                          \
               ::dlrm::common::LogMessage(::dlrm::common::LogSeverity::kFatal, __FILE__, __LINE__) \
                       .stream()                                                                   \
                   << "Check failed: " #cond " "
