// CoordinatorClient::Watch against coordinators that misbehave: one that cannot be reached or
// does not answer fails the watch within the client's timeout, as any call would; one that drops
// a stream that had events is watched again, for a bounded time. Fake Jobs services on loopback
// play them, so each behaviour is exact.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/dlrmctl.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/client_fixture.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;

dlrm::v1::JobEvent Event(dlrm::v1::JobState state, int64_t step) {
  dlrm::v1::JobEvent event;
  event.mutable_job()->set_job_id("job-1");
  event.mutable_job()->set_state(state);
  event.mutable_job()->mutable_progress()->set_step(step);
  return event;
}

// A Jobs service whose WatchJob streams play a script: stream i sends `events[i]` then ends with
// `endings[i]` (the last entry for every later stream). `hang` streams send nothing and end only
// when the client goes away (a coordinator that accepted the call but never answers).
class ScriptedJobs final : public dlrm::v1::Jobs::Service {
 public:
  struct Stream {
    std::vector<dlrm::v1::JobEvent> events = {};
    grpc::Status ending = grpc::Status::OK;
    bool hang = false;
  };
  explicit ScriptedJobs(std::vector<Stream> streams) : streams_(std::move(streams)) {}

  grpc::Status WatchJob(grpc::ServerContext* context, const dlrm::v1::WatchJobRequest*,
                        grpc::ServerWriter<dlrm::v1::JobEvent>* writer) override {
    const int i = calls_.fetch_add(1);
    const Stream& stream = streams_[std::min<size_t>(i, streams_.size() - 1)];
    for (const auto& event : stream.events) writer->Write(event);
    while (stream.hang && !context->IsCancelled() && !stopping_.HasBeenNotified()) {
      stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
    }
    return stream.ending;
  }
  int calls() const { return calls_.load(); }
  void Stop() {
    if (!stopping_.HasBeenNotified()) stopping_.Notify();
  }

 private:
  const std::vector<Stream> streams_;
  std::atomic<int> calls_{0};
  absl::Notification stopping_;
};

// The service on a loopback port, and a client to it.
class WatchTest : public ::testing::Test {
 protected:
  void Serve(std::vector<ScriptedJobs::Stream> streams) {
    service_ = std::make_unique<ScriptedJobs>(std::move(streams));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Stop();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::unique_ptr<CoordinatorClient> Client(absl::Duration timeout,
                                            absl::Duration reconnect_for = absl::Seconds(60)) {
    auto client = CoordinatorClient::Create(
        {.address = address(), .timeout = timeout, .watch_reconnect_for = reconnect_for});
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<ScriptedJobs> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A port where nothing listens: the watch fails at once, like any call (it kept dialling for
// 60 s).
TEST_F(WatchTest, UnreachableCoordinatorFailsAtOnce) {
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.BuildAndStart()->Shutdown();
  }
  auto client = Client(absl::Seconds(1));
  const absl::Time start = absl::Now();
  auto job = client->Watch("job-1", nullptr, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(absl::IsUnavailable(job.status())) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr(address()));

  std::string out, err;
  const absl::Time ctl_start = absl::Now();
  EXPECT_EQ(RunCtl(address(), {"--timeout", "1", "watch", "job-1"}, &out, &err), kExitUnavailable)
      << err;
  EXPECT_LT(absl::Now() - ctl_start, absl::Seconds(3));
  EXPECT_THAT(err, HasSubstr("is a coordinator running"));
}

// A coordinator that takes the call but never answers (stopped, hung): the first event must come
// within the client's timeout, as any call's answer must.
TEST_F(WatchTest, CoordinatorThatDoesNotAnswerFailsWithinTheTimeout) {
  Serve({{.hang = true}});
  auto client = Client(absl::Seconds(1));
  const absl::Time start = absl::Now();
  auto job = client->Watch("job-1", nullptr, absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_TRUE(absl::IsDeadlineExceeded(job.status())) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("no answer within 1s"));
  EXPECT_EQ(service_->calls(), 1);  // not dialled again: it never had an event

  std::string out, err;
  const absl::Time ctl_start = absl::Now();
  EXPECT_EQ(RunCtl(address(), {"--timeout", "1", "watch", "job-1"}, &out, &err), kExitUnavailable)
      << err;
  EXPECT_LT(absl::Now() - ctl_start, absl::Seconds(3));
  EXPECT_THAT(err, HasSubstr("no answer within 1s"));
}

// Once events came, a lost stream (a coordinator restarting) is watched again, and the watch
// goes on to the job's end.
TEST_F(WatchTest, LostStreamIsWatchedAgainAfterEvents) {
  Serve({{.events = {Event(dlrm::v1::JOB_STATE_RUNNING, 10)},
          .ending = grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down")},
         {.ending = grpc::Status(grpc::StatusCode::UNAVAILABLE, "still starting")},
         {.hang = true},  // accepted, no answer: tried again too
         {.events = {Event(dlrm::v1::JOB_STATE_RUNNING, 20),
                     Event(dlrm::v1::JOB_STATE_SUCCEEDED, 30)}}});
  auto client = Client(absl::Seconds(1));
  std::vector<int64_t> steps;
  auto job = client->Watch("job-1", [&](const dlrm::v1::JobEvent& e) {
    steps.push_back(e.job().progress().step());
    return true;
  });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), dlrm::v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(steps, ::testing::ElementsAre(10, 20, 30));
  EXPECT_EQ(service_->calls(), 4);
}

// `reconnect` (dlrm local: not while it stops) vetoes watching again.
TEST_F(WatchTest, ReconnectCallbackCanRefuse) {
  Serve({{.events = {Event(dlrm::v1::JOB_STATE_RUNNING, 10)},
          .ending = grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down")},
         {.events = {Event(dlrm::v1::JOB_STATE_SUCCEEDED, 30)}}});
  auto client = Client(absl::Seconds(1));
  auto job = client->Watch("job-1", nullptr, absl::Hours(1), [] { return false; });
  EXPECT_TRUE(absl::IsUnavailable(job.status())) << job.status();
  EXPECT_EQ(service_->calls(), 1);
}

// Watching again is bounded: after options.watch_reconnect_for it gives up with the last error,
// and the attempts back off (they came every 500 ms for 60 s).
TEST_F(WatchTest, WatchingAgainIsBounded) {
  Serve({{.events = {Event(dlrm::v1::JOB_STATE_RUNNING, 10)},
          .ending = grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down")},
         {.ending = grpc::Status(grpc::StatusCode::UNAVAILABLE, "still down")}});
  auto client = Client(absl::Seconds(1), /*reconnect_for=*/absl::Seconds(4));
  const absl::Time start = absl::Now();
  auto job = client->Watch("job-1", nullptr, absl::Hours(1));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsUnavailable(job.status())) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("still down"));
  EXPECT_THAT(job.status().message(), HasSubstr("tried again for 4s in vain"));
  EXPECT_GE(took, absl::Seconds(4));
  EXPECT_LT(took, absl::Seconds(8));
  // Pauses of 0.25, 0.5, 1, 2 and the 0.25 s left of the window: 6 streams in all, where one
  // every 500 ms made 9.
  EXPECT_LE(service_->calls(), 7);
}

}  // namespace
}  // namespace dlrm::client
