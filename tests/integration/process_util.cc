#include "tests/integration/process_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dlrm::testing {

std::string BinPath(const std::string& name) { return absl::StrCat(DLRM_BIN_DIR, "/", name); }

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Process::Process(const std::vector<std::string>& argv, const std::string& log_dir,
                 const std::string& name, const std::string& cwd)
    : out_path_(absl::StrCat(log_dir, "/", name, ".out")),
      err_path_(absl::StrCat(log_dir, "/", name, ".err")),
      start_(absl::Now()) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  // TMPDIR is the test's own folder: what a child keeps there (`dlrm local` keeps its
  // dlrm-local-* folder of logs when a job fails, as many tests make it) goes with the test's
  // folder instead of staying in /tmp after every `make test`. Made before the fork: the child
  // only calls async-signal-safe functions.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env.emplace_back(*e);
  }
  env.push_back(absl::StrCat("TMPDIR=", log_dir));
  std::vector<char*> cenv;
  for (std::string& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const int out_fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // As a container or a shell starts it: whatever this test ignores, the child must choose
    // for itself (MetricsTest checks that every role ignores SIGPIPE).
    signal(SIGPIPE, SIG_DFL);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    execve(cargs[0], cargs.data(), cenv.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
}

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &wait_status_, 0);
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool Process::Running() {
  if (reaped_) return false;
  const pid_t r = waitpid(pid_, &wait_status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

ProcessResult Process::Wait(absl::Duration timeout) {
  ProcessResult result;
  const absl::Time deadline = absl::Now() + timeout;
  while (Running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  if (!reaped_) {
    result.timed_out = true;
    kill(pid_, SIGKILL);
    waitpid(pid_, &wait_status_, 0);
    reaped_ = true;
  }
  if (WIFEXITED(wait_status_)) result.exit_code = WEXITSTATUS(wait_status_);
  if (WIFSIGNALED(wait_status_)) result.term_signal = WTERMSIG(wait_status_);
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  result.out = Stdout();
  result.err = Stderr();
  return result;
}

std::string Process::Stdout() const { return ReadFileOrEmpty(out_path_); }
std::string Process::Stderr() const { return ReadFileOrEmpty(err_path_); }

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& log_dir,
                         const std::string& name, absl::Duration timeout, const std::string& cwd) {
  Process p(argv, log_dir, name, cwd);
  return p.Wait(timeout);
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    const std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      out.push_back(pid);
    }
  }
  closedir(dir);
  return out;
}

bool ProcessAlive(pid_t pid) {
  const std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

std::string CommandLine(pid_t pid) {
  std::string cmd = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/cmdline"));
  for (char& c : cmd) {
    if (c == '\0') c = ' ';
  }
  return cmd;
}

bool IgnoresSignal(pid_t pid, int sig) {
  const std::string status = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "SigIgn:")) continue;
    uint64_t mask = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &mask)) return false;
    return (mask >> (sig - 1)) & 1;
  }
  return false;
}

std::string MakeGeneratedDataDir(const std::string& prefix, int64_t rows, int64_t max_rows,
                                 int seed) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << strerror(errno);
    return "";
  }
  ProcessResult gen = RunProcess(
      {BinPath("dlrm"), "gen-data", "--out", tmpl + "/train.tsv", "--rows", std::to_string(rows),
       "--max-rows", std::to_string(max_rows), "--seed", std::to_string(seed)},
      tmpl, "gen-data", absl::Seconds(120));
  if (gen.exit_code != 0) {
    ADD_FAILURE() << "dlrm gen-data: " << gen.err;
    return "";
  }
  return tmpl;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace dlrm::testing
