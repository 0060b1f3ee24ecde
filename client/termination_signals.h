// TerminationSignals: SIGINT/SIGTERM handling for the service's processes. The process-wide
// handler only writes the signal number to a pipe (async-signal-safe), so it does not matter
// which thread the kernel picks (OpenBLAS and RocksDB start threads we do not control); a
// TerminationSignals object reads the pipe on its own thread and runs `on_signal` there, where it
// may take locks and call anything (e.g. Coordinator::Shutdown).
//
//   InstallTerminationHandlers();          // early in main: a signal from now on is not lost
//   TerminationSignals signals([&](int) { server->Shutdown(); });
//   server->Wait();
//
// Thread-safe. Children started with fork+exec get the default dispositions back (exec resets
// caught signals).
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace dlrm::client {

// Installs the handlers (idempotent). A signal received before a TerminationSignals exists is
// kept in the pipe and delivered to the first one.
void InstallTerminationHandlers();

// Ignores SIGPIPE for the whole process (idempotent), so that a write to a connection whose peer
// has gone fails with EPIPE in the writer instead of killing the process. Gloo's TCP transport
// writes with writev, which raises SIGPIPE when the peer closed between two writes: a worker whose
// peer was evicted mid-collective would die (exit 141 behind the image's tini) instead of
// reporting the lost peer and taking part in the recovery. gRPC and the metrics endpoint send
// with MSG_NOSIGNAL and need none of this. The service roles (coordinator, ps, worker, local)
// call it first; children started by fork+exec inherit the ignored disposition.
void IgnoreBrokenPipes();

class TerminationSignals {
 public:
  // `on_signal` runs on the watcher thread for every SIGINT/SIGTERM received.
  explicit TerminationSignals(std::function<void(int signal)> on_signal);
  ~TerminationSignals();  // stops the watcher thread (within ~100 ms)
  TerminationSignals(const TerminationSignals&) = delete;
  TerminationSignals& operator=(const TerminationSignals&) = delete;

  // The first signal received, 0 if none.
  int received() const { return received_.load(); }

 private:
  std::function<void(int)> on_signal_;
  std::atomic<bool> done_{false};
  std::atomic<int> received_{0};
  std::thread thread_;
};

}  // namespace dlrm::client
