// The fixture of the coordinator's service tests (coordinator_service*_test.cc): a coordinator
// over real gRPC on loopback with its data folder in a fresh temporary folder, stubs of both
// services, and helpers that register members, submit the tiny job and use the rendezvous store.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/grpc_util.h"
#include "common/limits.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/jobs.grpc.pb.h"
#include "server/coordinator.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_specs.h"

namespace dlrm::server {

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  ::dlrm::testing::ScopedTempDir dir_{"coordinator_service"};  // unique: tests run in parallel
  void StartCoordinator(const std::string& dir, absl::Duration ttl = absl::Milliseconds(300),
                        int64_t max_watch_streams = common::kMaxWatchStreams) {
    CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.data_dir = dir;
    options.lease_ttl = ttl;
    options.metrics_port = -1;
    options.max_watch_streams = max_watch_streams;
    auto c = Coordinator::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    ASSERT_TRUE(coordinator_->Start().ok());
    auto channel = common::MakeChannel({.target = coordinator_->address()});
    ASSERT_TRUE(channel.ok());
    channel_ = *channel;
    stub_ = dlrm::v1::Coordinator::NewStub(channel_);
    jobs_ = dlrm::v1::Jobs::NewStub(channel_);
  }

  void SetUp() override { StartCoordinator(dir_.Sub("coordinator")); }
  void TearDown() override {
    if (coordinator_) coordinator_->Shutdown();
  }

  std::string Register(dlrm::v1::Role role, const std::string& address = "127.0.0.1:9") {
    dlrm::v1::RegisterRequest request;
    request.set_role(role);
    request.set_address(address);
    dlrm::v1::RegisterResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    grpc::Status s = stub_->Register(ctx.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    keys_[response.member_id()] = response.member_key();
    return response.member_id();
  }

  // A report as member `id` (its key from Register) for `rank` of `job_id`.
  dlrm::v1::ReportProgressRequest Report(const std::string& id, const std::string& job_id,
                                         int rank) {
    dlrm::v1::ReportProgressRequest r;
    r.set_member_id(id);
    r.set_member_key(keys_[id]);
    r.set_job_id(job_id);
    r.set_rank(rank);
    return r;
  }

  grpc::Status Heartbeat(const std::string& id, dlrm::v1::HeartbeatResponse* response) {
    dlrm::v1::HeartbeatRequest request;
    request.set_member_id(id);
    request.set_member_key(keys_[id]);
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    return stub_->Heartbeat(ctx.get(), request, response);
  }

  std::string Submit(int workers) {
    dlrm::v1::SubmitJobRequest request;
    request.set_spec_yaml(dlrm::testing::kTinySpec);
    request.set_workers(workers);
    dlrm::v1::SubmitJobResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    grpc::Status s = jobs_->SubmitJob(ctx.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.job().job_id();
  }

  grpc::Status KvGet(const std::string& key, absl::Duration wait, std::string* value) {
    dlrm::v1::KvGetRequest request;
    request.set_key(key);
    request.set_wait_timeout_ms(absl::ToInt64Milliseconds(wait));
    dlrm::v1::KvGetResponse response;
    auto ctx = common::MakeClientContext(wait + absl::Seconds(5));
    grpc::Status s = stub_->KvGet(ctx.get(), request, &response);
    *value = response.value();
    return s;
  }

  grpc::Status KvSet(const std::string& key, const std::string& value) {
    dlrm::v1::KvSetRequest request;
    request.set_key(key);
    request.set_value(value);
    dlrm::v1::KvSetResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    return stub_->KvSet(ctx.get(), request, &response);
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<dlrm::v1::Coordinator::Stub> stub_;
  std::unique_ptr<dlrm::v1::Jobs::Stub> jobs_;
  std::map<std::string, std::string> keys_;  // member key by member id
};

}  // namespace dlrm::server
