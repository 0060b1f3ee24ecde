// Child processes for the integration tests: run a binary with a timeout and capture its output,
// or start it in the background and signal / wait for it later. Also finds a process's
// children through /proc, to check that `dlrm local` leaves none behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dlrm::testing {

// Path of a binary built next to the tests (DLRM_BIN_DIR/name).
std::string BinPath(const std::string& name);

struct ProcessResult {
  int exit_code = -1;      // -1 when killed by a signal or timed out
  int term_signal = 0;     // the signal that ended it, 0 if none
  bool timed_out = false;  // it had to be killed after `timeout`
  double seconds = 0;      // wall time
  std::string out;         // stdout
  std::string err;         // stderr
};

class Process {
 public:
  // Starts argv[0] with argv; stdout and stderr go to files under `log_dir` named `name`. With
  // a `cwd` the child runs in it (relative paths in argv are then under it), else in the test's.
  Process(const std::vector<std::string>& argv, const std::string& log_dir, const std::string& name,
          const std::string& cwd = "");
  ~Process();  // SIGKILLs and reaps the process if it still runs

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits up to `timeout`; on timeout SIGKILLs it and sets timed_out.
  ProcessResult Wait(absl::Duration timeout);
  bool Running();
  std::string Stdout() const;
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
  std::string out_path_;
  std::string err_path_;
  absl::Time start_;
};

// Runs to completion (or `timeout`) and returns what happened.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& log_dir,
                         const std::string& name, absl::Duration timeout,
                         const std::string& cwd = "");

// Pids whose parent is `parent` (from /proc/*/stat).
std::vector<pid_t> ChildrenOf(pid_t parent);
// True when a process with this pid exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// The command line of a process, arguments joined by spaces ("" when gone).
std::string CommandLine(pid_t pid);
// Whether the process ignores signal `sig` (its SigIgn mask in /proc/PID/status; false when gone).
bool IgnoresSignal(pid_t pid, int sig);

std::string ReadFileOrEmpty(const std::string& path);

// A TCP port on 127.0.0.1 that was free a moment ago (bound, read, closed): for a process that
// must be given its address before it starts.
int FreePort();

// A new folder /tmp/<prefix>-XXXXXX holding train.tsv from `dlrm gen-data --rows rows --max-rows
// max_rows --seed seed` (the integration suites' data). Returns the folder; on failure records
// a test failure naming the problem and returns "".
std::string MakeGeneratedDataDir(const std::string& prefix, int64_t rows, int64_t max_rows,
                                 int seed);

// The `tables:` block of the integration tests' job specs: the 26 Criteo Kaggle tables capped at
// 1000 rows (what `dlrm gen-data --max-rows 1000` draws ids for).
inline constexpr char kCappedKaggleTablesYaml[] = R"(tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                  3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                  142572]
  max_rows: 1000
)";

}  // namespace dlrm::testing
