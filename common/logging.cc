#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

namespace dlrm::common {
namespace {

std::atomic<int> g_min_severity{static_cast<int>(LogSeverity::kInfo)};

std::mutex& NameMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::string& ProcessName() {
  static std::string* name = new std::string("dlrm");
  return *name;
}

char SeverityLetter(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return 'D';
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
    case LogSeverity::kFatal:
      return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { g_min_severity = static_cast<int>(severity); }
LogSeverity MinLogSeverity() { return static_cast<LogSeverity>(g_min_severity.load()); }

bool ParseLogSeverity(std::string_view text, LogSeverity* out) {
  if (text == "debug")
    *out = LogSeverity::kDebug;
  else if (text == "info")
    *out = LogSeverity::kInfo;
  else if (text == "warning")
    *out = LogSeverity::kWarning;
  else if (text == "error")
    *out = LogSeverity::kError;
  else
    return false;
  return true;
}

void SetLogProcessName(std::string_view name) {
  std::lock_guard<std::mutex> lock(NameMutex());
  ProcessName() = std::string(name);
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  localtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
  const char* base = file;
  for (const char* p = file; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  std::string name;
  {
    std::lock_guard<std::mutex> lock(NameMutex());
    name = ProcessName();
  }
  char ms_buf[8];
  std::snprintf(ms_buf, sizeof(ms_buf), ".%03d", ms);
  stream_ << SeverityLetter(severity) << ' ' << ts << ms_buf << ' ' << name << ' ' << base << ':'
          << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string text = stream_.str();
  // One write() call so lines from several threads or processes do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace dlrm::common
