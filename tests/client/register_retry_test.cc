// RegisterWithRetry, the registration loop of both member processes (worker, parameter server):
// it retries what may heal (the coordinator not up yet), stops at once on what cannot (a refused
// identity or request), gives up after its timeout naming the coordinator, and ends on a stop.
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Member {
  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  int calls = 0;

  absl::Status Register(absl::Duration timeout, const std::vector<absl::Status>& answers) {
    absl::MutexLock lock(&mu);
    return RegisterWithRetry(mu, &stopping, timeout, "worker", "coord:7000", /*tls=*/false, [&] {
      const absl::Status answer = answers[std::min<size_t>(calls, answers.size() - 1)];
      ++calls;
      return answer;
    });
  }
};

TEST(RegisterWithRetryTest, RetriesAnUnreachableCoordinatorUntilItAnswers) {
  Member m;
  ::testing::internal::CaptureStderr();
  const absl::Status status =
      m.Register(absl::Seconds(30), {absl::UnavailableError("connection refused"),
                                     absl::DeadlineExceededError("deadline"), absl::OkStatus()});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(m.calls, 3);
  // The first failure is logged (a worker waited out its minute without a word), once.
  EXPECT_THAT(log, HasSubstr("worker: cannot register with coordinator coord:7000 yet (dialled in "
                             "plaintext): connection refused; trying again for up to 30s"));
  EXPECT_THAT(log, Not(HasSubstr("deadline")));
}

TEST(RegisterWithRetryTest, ARefusalEndsAtOnceAndSaysSo) {
  for (const absl::Status& refusal :
       {absl::PermissionDeniedError("certificate of another CA"),
        absl::UnauthenticatedError("bad token"), absl::InvalidArgumentError("bad address")}) {
    Member m;
    const absl::Status status = m.Register(absl::Seconds(30), {refusal, absl::OkStatus()});
    EXPECT_EQ(status.code(), refusal.code());
    EXPECT_THAT(status.message(), HasSubstr("worker: the coordinator refused it"));
    EXPECT_THAT(status.message(), HasSubstr(refusal.message()));
    EXPECT_EQ(m.calls, 1);
  }
}

TEST(RegisterWithRetryTest, GivesUpAfterItsTimeoutNamingTheCoordinator) {
  Member m;
  const absl::Time start = absl::Now();
  const absl::Status status =
      m.Register(absl::Milliseconds(700), {absl::UnavailableError("connection refused")});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("worker: cannot register with coordinator coord:7000: connection refused"));
  EXPECT_GE(m.calls, 2);  // tried again after the first wait
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(RegisterWithRetryTest, AStopDuringTheWaitEndsItWithoutAnError) {
  Member m;
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    absl::MutexLock lock(&m.mu);
    m.stopping = true;
  });
  const absl::Time start = absl::Now();
  const absl::Status status =
      m.Register(absl::Seconds(60), {absl::UnavailableError("connection refused")});
  stopper.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  absl::MutexLock lock(&m.mu);
  EXPECT_TRUE(m.stopping);
}

}  // namespace
}  // namespace dlrm::client
