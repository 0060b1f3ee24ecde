// SIGINT/SIGTERM reach only the TerminationSignals thread (client/termination_signals.h): every
// thread started after InstallTerminationHandlers has them blocked. Debian's oneDNN 2.7 points
// rsp into a heap buffer inside its JIT GEMM kernels, and a handler run on a thread inside one
// wrote its signal frame over the heap: `dlrm train` stopped with SIGTERM during a large GEMM
// aborted with "corrupted size vs. prev_size" in about one try in three (DCNv2 audit). Each case
// runs in a child process of its own (a death test), so this test binary's signals stay as they
// were.
#include "client/termination_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dlrm::client {
namespace {

bool TerminationBlockedHere() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGINT) == 1 && sigismember(&mask, SIGTERM) == 1;
}

TEST(TerminationSignalsDeathTest, OnlyTheWatcherThreadTakesTheSignals) {
  EXPECT_EXIT(
      {
        InstallTerminationHandlers();
        std::atomic<int> got{0};
        std::atomic<bool> watcher_takes{false};
        TerminationSignals signals([&](int sig) {
          watcher_takes = !TerminationBlockedHere();
          got = sig;
        });
        // A thread started afterwards, as OpenMP's and oneDNN's are, and the main thread.
        bool worker_blocked = false;
        std::thread([&] { worker_blocked = TerminationBlockedHere(); }).join();
        if (!worker_blocked) _exit(3);
        if (!TerminationBlockedHere()) _exit(4);
        // A busy thread, as one inside a GEMM: the signal goes to the watcher, not to it.
        std::atomic<bool> stop{false};
        std::thread busy([&] {
          while (!stop.load()) {
          }
        });
        kill(getpid(), SIGTERM);
        for (int i = 0; i < 500 && got.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
        stop = true;
        busy.join();
        if (got.load() != SIGTERM) _exit(5);
        _exit(watcher_takes.load() ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "");
}

// A signal sent before the first TerminationSignals exists is not lost: it waits for it.
TEST(TerminationSignalsDeathTest, ASignalBeforeTheWatcherWaitsForIt) {
  EXPECT_EXIT(
      {
        InstallTerminationHandlers();
        kill(getpid(), SIGINT);
        absl::SleepFor(absl::Milliseconds(50));
        std::atomic<int> got{0};
        TerminationSignals signals([&](int sig) { got = sig; });
        for (int i = 0; i < 500 && got.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
        _exit(got.load() == SIGINT ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dlrm::client
