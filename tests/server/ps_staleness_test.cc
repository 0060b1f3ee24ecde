// The stale-synchronous bound through gRPC: two fake workers on loopback. A lookup for step t
// waits (parked, holding no thread) until every worker has pushed step t-1-k, then sees their
// updates; it fails with DEADLINE_EXCEEDED naming the step and the lagging worker otherwise.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::PackFloats;
using testing::PackIds;
using testing::PsStub;
using testing::PsTempDir;
using testing::TestJob;
using testing::TestPsOptions;
using testing::UnpackFloats;

constexpr int kDim = 4;

class PsStalenessTest : public ::testing::Test {
 protected:
  void Start(int staleness, int pool_threads = 2) {
    auto ps = ParameterServer::Start(TestPsOptions(dir_.path(), 1 << 20, pool_threads));
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    stub_ = PsStub(ps_->address());
    dlrm::v1::LoadJobResponse resp;
    ASSERT_TRUE(stub_
                    ->LoadJob(common::MakeClientContext(absl::Seconds(10)).get(),
                              TestJob("s", {{10, kDim}}, 0, 1, staleness, /*num_workers=*/2), &resp)
                    .ok());
  }
  grpc::Status Lookup(int rank, int64_t step, absl::Duration timeout, std::vector<float>* row) {
    dlrm::v1::LookupRequest r;
    r.set_job_id("s");
    r.set_job_epoch(1);
    r.set_step(step);
    r.set_worker_rank(rank);
    r.add_tables()->set_ids(PackIds({0}));
    dlrm::v1::LookupResponse resp;
    grpc::Status s = stub_->Lookup(common::MakeClientContext(timeout).get(), r, &resp);
    if (s.ok() && row != nullptr) *row = UnpackFloats(resp.tables(0).rows());
    return s;
  }
  // Worker `rank` pushes gradient 1.0 on row 0 for `step`.
  grpc::Status Push(int rank, int64_t step) {
    dlrm::v1::PushGradientsRequest r;
    r.set_job_id("s");
    r.set_job_epoch(1);
    r.set_step(step);
    r.set_worker_rank(rank);
    dlrm::v1::TableGradients* t = r.add_tables();
    t->set_ids(PackIds({0}));
    t->set_grads(PackFloats(std::vector<float>(kDim, 1.0f)));
    dlrm::v1::PushGradientsResponse resp;
    return stub_->PushGradients(common::MakeClientContext(absl::Seconds(10)).get(), r, &resp);
  }

  PsTempDir dir_;
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<dlrm::v1::ParameterServer::Stub> stub_;
};

TEST_F(PsStalenessTest, LookupWaitsForEveryWorkersPreviousStep) {
  Start(/*staleness=*/0, /*pool_threads=*/1);
  std::vector<float> initial;
  ASSERT_TRUE(Lookup(0, 0, absl::Seconds(5), &initial).ok()) << "step 0 never waits";
  ASSERT_TRUE(Push(0, 0).ok());

  // Worker 0 asks for step 1 while worker 1 has not pushed step 0: it must wait. Several such
  // lookups are parked at once on a one-thread pool, which must stay free for other calls.
  constexpr int kParked = 3;
  std::atomic<int> done{0};
  std::vector<std::vector<float>> rows(kParked);
  std::vector<grpc::Status> statuses(kParked);
  std::vector<std::thread> lookups;
  for (int i = 0; i < kParked; ++i) {
    lookups.emplace_back([&, i] {
      statuses[i] = Lookup(0, 1, absl::Seconds(10), &rows[i]);
      ++done;
    });
  }
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(done.load(), 0) << "a lookup for step 1 returned before worker 1 pushed step 0";
  std::vector<float> eval;
  EXPECT_TRUE(Lookup(0, -1, absl::Seconds(5), &eval).ok()) << "evaluation lookups never wait";
  EXPECT_EQ(eval[0], initial[0] - 0.1f) << "worker 0's push is visible";

  ASSERT_TRUE(Push(1, 0).ok());
  for (auto& t : lookups) t.join();
  for (int i = 0; i < kParked; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    // SGD lr 0.1, gradient 1 from each of the two workers.
    EXPECT_FLOAT_EQ(rows[i][0], initial[0] - 0.2f);
  }
}

TEST_F(PsStalenessTest, ALaterPushCompletesEarlierStepsAndStalenessLetsLookupsRunAhead) {
  Start(/*staleness=*/1);
  // k = 1: step 1 needs nothing (1 - 1 - 1 < 0).
  EXPECT_TRUE(Lookup(1, 1, absl::Seconds(5), nullptr).ok());
  // Step 3 needs step 1 of both workers; worker 0 pushes step 2 only (implies 0 and 1).
  ASSERT_TRUE(Push(0, 2).ok());
  ASSERT_TRUE(Push(1, 1).ok());
  EXPECT_TRUE(Lookup(0, 3, absl::Seconds(5), nullptr).ok());
}

TEST_F(PsStalenessTest, LookupFailsAtItsDeadlineNamingTheLaggingWorker) {
  Start(/*staleness=*/0);
  ASSERT_TRUE(Push(0, 0).ok());
  ASSERT_TRUE(Push(0, 1).ok());
  ASSERT_TRUE(Push(1, 0).ok());
  const absl::Time start = absl::Now();
  grpc::Status s = Lookup(0, 2, absl::Milliseconds(400), nullptr);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(took, absl::Seconds(3));
  // Client and server deadlines coincide, so either side may report it; when the server's
  // timer wins, its message names the step and the laggard (checked exactly in the next test).
  if (s.error_message().find("timed out waiting") != std::string::npos) {
    EXPECT_THAT(s.error_message(), AllOf(HasSubstr("step 2"), HasSubstr("worker 1")));
  }
}

TEST_F(PsStalenessTest, GateMessageNamesStepAndLaggingWorker) {
  TimerQueue timers;
  auto gate = StepGate::Create(/*num_workers=*/3, /*staleness=*/1, &timers);
  gate->Complete(0, 5);
  gate->Complete(1, 2);
  absl::Notification done;
  absl::Status result;
  gate->WhenVisible(6, 0, absl::Now() + absl::Milliseconds(100), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.message(),
              AllOf(HasSubstr("lookup for step 6"), HasSubstr("updates of step 4"),
                    HasSubstr("worker 1 has completed step 2"),
                    HasSubstr("worker 2 has completed step -1")));
  EXPECT_EQ(gate->parked(), 0);
}

TEST_F(PsStalenessTest, ShutdownFailsParkedLookupsPromptly) {
  Start(/*staleness=*/0);
  grpc::Status status;
  std::thread lookup([&] { status = Lookup(0, 3, absl::Seconds(30), nullptr); });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  ps_->Shutdown(absl::Seconds(5));
  lookup.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// A LoadJob still running when the server starts shutting down (it runs on the admin pool, after
// FailParkedLookups closed the gates it saw) loads its job with a closed gate: a lookup that would
// wait fails at once rather than holding the shutdown until its deadline.
TEST_F(PsStalenessTest, AJobLoadedAfterParkedLookupsFailedDoesNotParkLookups) {
  Start(/*staleness=*/0);
  ps_->service().FailParkedLookups(absl::UnavailableError("parameter server is shutting down"));
  dlrm::v1::LoadJobRequest other = TestJob("s2", {{10, kDim}}, 0, 1, 0, /*num_workers=*/2);
  dlrm::v1::LoadJobResponse loaded;
  ASSERT_TRUE(
      stub_->LoadJob(common::MakeClientContext(absl::Seconds(10)).get(), other, &loaded).ok());
  dlrm::v1::LookupRequest r;
  r.set_job_id("s2");
  r.set_job_epoch(1);
  r.set_step(3);
  r.set_worker_rank(0);
  r.add_tables()->set_ids(PackIds({0}));
  dlrm::v1::LookupResponse resp;
  const absl::Time start = absl::Now();
  grpc::Status s = stub_->Lookup(common::MakeClientContext(absl::Seconds(30)).get(), r, &resp);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

}  // namespace
}  // namespace dlrm::server
