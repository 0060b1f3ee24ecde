#include "client/termination_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

namespace dlrm::client {
namespace {

int g_pipe[2] = {-1, -1};

extern "C" void OnTerminationSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &byte, 1);
  errno = saved_errno;
}

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void InstallTerminationHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction action = {};
    action.sa_handler = &OnTerminationSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    // Blocked in this thread, and so in every thread it starts from now on (OpenMP's, oneDNN's,
    // the pools'): the kernel delivers the signals to the TerminationSignals thread, which
    // unblocks them. Debian's oneDNN 2.7 points rsp into a heap buffer inside its JIT GEMM
    // kernels (oneDNN issue 4845, fixed in 3.11): the handler run on a thread inside one wrote
    // its signal frame over the heap, and `dlrm train` stopped with Ctrl-C died of "corrupted
    // size vs. prev_size" in about one try in three.
    const sigset_t set = TerminationSet();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  });
}

void IgnoreBrokenPipes() {
  struct sigaction action = {};
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  sigaction(SIGPIPE, &action, nullptr);
}

TerminationSignals::TerminationSignals(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
  InstallTerminationHandlers();
  thread_ = std::thread([this] {
    // The one thread of ours that takes the signals.
    const sigset_t set = TerminationSet();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    while (!done_.load()) {
      pollfd fd = {g_pipe[0], POLLIN, 0};
      if (poll(&fd, 1, 100) <= 0) continue;
      unsigned char byte = 0;
      while (read(g_pipe[0], &byte, 1) == 1) {
        const int sig = byte;
        int expected = 0;
        received_.compare_exchange_strong(expected, sig);
        on_signal_(sig);
      }
    }
  });
}

TerminationSignals::~TerminationSignals() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace dlrm::client
