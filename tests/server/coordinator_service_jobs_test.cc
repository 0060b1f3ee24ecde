// The coordinator's jobs over real gRPC: watch streams (bounded, streaming until the job ends),
// a restarted coordinator that knows its jobs, bad requests and ListJobs' pages.
#include <atomic>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/coordinator_client.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/jobs.grpc.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/ps_load_request.h"
#include "tests/common/temp_dir.h"
#include "tests/server/coordinator_service_fixture.h"
#include "tests/server/garbage_calls.h"
#include "tests/server/test_specs.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;

TEST_F(CoordinatorServiceTest, WatchStreamsAreBounded) {
  coordinator_->Shutdown();
  StartCoordinator(dir_.Sub("bounded"), absl::Milliseconds(300), /*max_watch_streams=*/2);
  const std::string job_id = Submit(1);  // stays PENDING: its streams stay open
  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<dlrm::v1::JobEvent>> reader;
  };
  auto watch = [&] {
    Watch w{common::MakeClientContext(absl::Seconds(20)), nullptr};
    dlrm::v1::WatchJobRequest request;
    request.set_job_id(job_id);
    w.reader = jobs_->WatchJob(w.ctx.get(), request);
    return w;
  };
  std::vector<Watch> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(watch());
    dlrm::v1::JobEvent event;
    ASSERT_TRUE(open.back().reader->Read(&event)) << "stream " << i;
  }
  Watch third = watch();
  dlrm::v1::JobEvent event;
  EXPECT_FALSE(third.reader->Read(&event));
  const grpc::Status refused = third.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("WatchJob: 2 streams are open"));
  open.front().ctx->TryCancel();
  open.front().reader->Finish();
  // The server forgets the cancelled stream once its cancellation reaches it.
  bool reopened = false;
  for (int attempt = 0; attempt < 50 && !reopened; ++attempt) {
    Watch again = watch();
    reopened = again.reader->Read(&event);
    again.ctx->TryCancel();
    again.reader->Finish();
    if (!reopened) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(reopened);
  for (Watch& w : open) w.ctx->TryCancel();
  for (size_t i = 1; i < open.size(); ++i) open[i].reader->Finish();
}

TEST_F(CoordinatorServiceTest, WatchJobStreamsUntilTerminal) {
  const std::string job_id = Submit(1);
  std::vector<dlrm::v1::Job> events;
  grpc::Status watch_status;
  absl::Notification first_event;
  std::thread watcher([&] {
    dlrm::v1::WatchJobRequest request;
    request.set_job_id(job_id);
    auto ctx = common::MakeClientContext(absl::Seconds(20));
    auto reader = jobs_->WatchJob(ctx.get(), request);
    dlrm::v1::JobEvent event;
    while (reader->Read(&event)) {
      events.push_back(event.job());
      if (!first_event.HasBeenNotified()) first_event.Notify();
    }
    watch_status = reader->Finish();
  });
  first_event.WaitForNotification();
  Register(dlrm::v1::ROLE_PS);
  const std::string worker = Register(dlrm::v1::ROLE_WORKER);
  for (int step = 1; step <= 3; ++step) {
    dlrm::v1::ReportProgressRequest r = Report(worker, job_id, 0);
    r.set_step(step * 10);
    r.set_samples(step * 100);
    r.set_done(step == 3);
    if (step == 3) (*r.mutable_metrics())["auc"] = 0.7;
    dlrm::v1::ReportProgressResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    ASSERT_TRUE(stub_->ReportProgress(ctx.get(), r, &response).ok());
  }
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().state(), dlrm::v1::JOB_STATE_PENDING);
  EXPECT_EQ(events.back().state(), dlrm::v1::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(events.back().final_metrics().auc(), 0.7);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GT(events[i].version(), events[i - 1].version());
  }

  // Watching a finished job sends its final state and ends; an unknown job is NOT_FOUND.
  dlrm::v1::WatchJobRequest request;
  request.set_job_id("job-777");
  auto ctx = common::MakeClientContext(absl::Seconds(5));
  auto reader = jobs_->WatchJob(ctx.get(), request);
  dlrm::v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("job-777"));
}

TEST_F(CoordinatorServiceTest, RestartedCoordinatorKnowsItsJobs) {
  const std::string dir = dir_.Sub("restart");
  coordinator_->Shutdown();
  coordinator_.reset();
  StartCoordinator(dir);
  const std::string job_id = Submit(4);
  coordinator_->Shutdown();
  coordinator_.reset();
  StartCoordinator(dir);
  dlrm::v1::GetJobRequest request;
  request.set_job_id(job_id);
  dlrm::v1::Job job;
  auto ctx = common::MakeClientContext(absl::Seconds(5));
  grpc::Status s = jobs_->GetJob(ctx.get(), request, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.state(), dlrm::v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.requested_workers(), 4);
  EXPECT_EQ(job.spec_yaml(), dlrm::testing::kTinySpec);
}

TEST_F(CoordinatorServiceTest, BadRequestsGetCodesNamingTheValue) {
  dlrm::v1::SubmitJobRequest bad;
  bad.set_spec_yaml(dlrm::testing::kBadSpec);
  dlrm::v1::SubmitJobResponse submitted;
  auto ctx = common::MakeClientContext(absl::Seconds(5));
  grpc::Status s = jobs_->SubmitJob(ctx.get(), bad, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("model.bottom_mlp"));

  dlrm::v1::CancelJobRequest cancel;
  cancel.set_job_id("job-31337");
  dlrm::v1::Job job;
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = jobs_->CancelJob(ctx.get(), cancel, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("job-31337"));

  dlrm::v1::ReportProgressRequest progress =
      Report(Register(dlrm::v1::ROLE_WORKER), "job-31337", 0);
  dlrm::v1::ReportProgressResponse reported;
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = stub_->ReportProgress(ctx.get(), progress, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  dlrm::v1::RegisterRequest coordinator_role;
  coordinator_role.set_role(dlrm::v1::ROLE_COORDINATOR);
  dlrm::v1::RegisterResponse registered;
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = stub_->Register(ctx.get(), coordinator_role, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("COORDINATOR"));
}

// ListJobs pages: page_size 0 and sizes above the cap give the whole (short) list in one
// page, a negative one is refused naming it, and next_page_token leads to the next page.
TEST_F(CoordinatorServiceTest, ListJobsPagesAndRefusesANegativePageSize) {
  for (int i = 0; i < 3; ++i) Submit(1);
  auto list = [&](int page_size, const std::string& token, dlrm::v1::ListJobsResponse* response) {
    dlrm::v1::ListJobsRequest request;
    request.set_page_size(page_size);
    request.set_page_token(token);
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    return jobs_->ListJobs(ctx.get(), request, response);
  };
  for (int page_size : {0, 1000000}) {
    dlrm::v1::ListJobsResponse all;
    ASSERT_TRUE(list(page_size, "", &all).ok());
    EXPECT_EQ(all.jobs_size(), 3) << page_size;
    EXPECT_EQ(all.next_page_token(), "");
  }
  dlrm::v1::ListJobsResponse first, second;
  ASSERT_TRUE(list(2, "", &first).ok());
  ASSERT_EQ(first.jobs_size(), 2);
  ASSERT_TRUE(list(2, first.next_page_token(), &second).ok());
  ASSERT_EQ(second.jobs_size(), 1);
  EXPECT_EQ(second.jobs(0).job_id(), "job-3");
  EXPECT_EQ(second.next_page_token(), "");
  dlrm::v1::ListJobsResponse refused;
  grpc::Status s = list(-5, "", &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_size -5"));
  s = list(2, "job-abc", &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_token 'job-abc'"));
}

}  // namespace
}  // namespace dlrm::server
