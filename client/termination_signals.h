// TerminationSignals: SIGINT/SIGTERM handling for the service's processes. The process-wide
// handler only writes the signal number to a pipe (async-signal-safe); a TerminationSignals
// object reads the pipe on its own thread and runs `on_signal` there, where it may take locks and
// call anything (e.g. Coordinator::Shutdown). InstallTerminationHandlers blocks both signals in
// the calling thread, so every thread started after it (OpenMP's, oneDNN's) has them blocked and
// the kernel delivers them to the TerminationSignals thread, or to a thread started before it
// (OpenBLAS starts its own at load time): never to a thread inside a oneDNN JIT kernel, whose
// rsp may point into the heap (see termination_signals.cc).
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

// Installs the handlers and blocks SIGINT/SIGTERM in the calling thread (idempotent); call it in
// the main thread before any other thread of the process starts. A signal received before a
// TerminationSignals exists is kept (pending, or in the pipe) for the first one.
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
