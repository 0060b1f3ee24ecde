// The coordinator's rendezvous store over real gRPC: KvGet waits for a key another client sets,
// times out cleanly, is failed by a shutdown instead of hanging, and refuses a request larger
// than its fields before it waits.
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

TEST_F(CoordinatorServiceTest, KvGetWaitsUntilAnotherClientSetsTheKey) {
  std::string value;
  grpc::Status status;
  const absl::Time start = absl::Now();
  std::thread getter([&] { status = KvGet("job-1/gloo/0", absl::Seconds(5), &value); });
  absl::SleepFor(absl::Milliseconds(150));
  ASSERT_TRUE(KvSet("job-1/gloo/0", "addr-of-rank-0").ok());
  getter.join();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, "addr-of-rank-0");
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // Present now: answered at once.
  EXPECT_TRUE(KvGet("job-1/gloo/0", absl::ZeroDuration(), &value).ok());
}

TEST_F(CoordinatorServiceTest, KvGetTimesOutCleanly) {
  std::string value;
  const absl::Time start = absl::Now();
  grpc::Status s = KvGet("never/set", absl::Milliseconds(200), &value);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("never/set"));
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_EQ(KvGet("", absl::ZeroDuration(), &value).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(KvGet("k", absl::Minutes(20), &value).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Also when the caller's deadline is sooner than the wait: it was cut to the deadline first,
  // and the call waited it out (DEADLINE_EXCEEDED after 3 s).
  dlrm::v1::KvGetRequest request;
  request.set_key("k");
  request.set_wait_timeout_ms(absl::ToInt64Milliseconds(absl::Minutes(20)));
  dlrm::v1::KvGetResponse response;
  s = stub_->KvGet(common::MakeClientContext(absl::Seconds(3)).get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("KvGet: wait 20m is outside [0, 10m]"));
}

TEST_F(CoordinatorServiceTest, ShutdownFailsPendingWaitsInsteadOfHanging) {
  std::string value;
  grpc::Status status;
  std::thread getter([&] { status = KvGet("pending", absl::Seconds(30), &value); });
  absl::SleepFor(absl::Milliseconds(150));
  const absl::Time start = absl::Now();
  coordinator_->Shutdown();
  getter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// Open streams are bounded (an audit's 5000 watches took the coordinator from 64 to 154 MB):
// past the limit a new one is RESOURCE_EXHAUSTED naming it, and one closing makes room.
// A call that waits (KvGet up to 10 minutes, WatchJob until its job ends) keeps its request in
// memory while it waits: padded with unknown fields to megabytes, 4096 watch streams could pin
// 16 GiB. A request larger than its fields can be (a key or job id and a wait) is refused at
// once, before it waits; one of the largest real size is served.
TEST_F(CoordinatorServiceTest, AWaitingCallsRequestIsNoLargerThanItsFields) {
  auto pad = [](google::protobuf::Message* m, size_t bytes) {
    m->GetReflection()->MutableUnknownFields(m)->AddLengthDelimited(999, std::string(bytes, 'x'));
  };
  dlrm::v1::KvGetRequest get;
  get.set_key("never/set");
  get.set_wait_timeout_ms(10000);
  pad(&get, 1 << 20);
  dlrm::v1::KvGetResponse got;
  const absl::Time start = absl::Now();
  grpc::Status s = stub_->KvGet(common::MakeClientContext(absl::Seconds(20)).get(), get, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("KvGet: a request of 1048"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "refused before the 10 s wait";
  // The longest key the coordinator takes, with a wait: answered (NOT_FOUND after the wait).
  dlrm::v1::KvGetRequest longest;
  longest.set_key(std::string(common::kMaxKvKeyBytes, 'k'));
  longest.set_wait_timeout_ms(50);
  s = stub_->KvGet(common::MakeClientContext(absl::Seconds(20)).get(), longest, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();

  const std::string job_id = Submit(1);
  dlrm::v1::WatchJobRequest watch;
  watch.set_job_id(job_id);
  pad(&watch, 1 << 20);
  auto ctx = common::MakeClientContext(absl::Seconds(20));
  auto reader = jobs_->WatchJob(ctx.get(), watch);
  dlrm::v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("WatchJob: a request of 1048"));
}

}  // namespace
}  // namespace dlrm::server
