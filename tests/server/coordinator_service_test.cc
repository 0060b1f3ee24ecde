// The coordinator over real gRPC on loopback: members, their leases and keys, health and
// metrics, garbage and oversized inputs, and calls to a coordinator that is gone. The rendezvous
// store's waits are in coordinator_service_kv_test.cc, jobs and their watch streams in
// coordinator_service_jobs_test.cc.
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

TEST_F(CoordinatorServiceTest, LeaseExpiresWithoutHeartbeatAndBumpsEpoch) {
  const std::string ps = Register(dlrm::v1::ROLE_PS);
  const std::string worker = Register(dlrm::v1::ROLE_WORKER);
  dlrm::v1::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat(ps, &hb).ok());
  const int64_t epoch = hb.epoch();
  // The PS keeps heartbeating (every 60 ms, ttl 300 ms); the worker stops.
  for (int i = 0; i < 10; ++i) {
    absl::SleepFor(absl::Milliseconds(60));
    ASSERT_TRUE(Heartbeat(ps, &hb).ok());
  }
  EXPECT_EQ(hb.epoch(), epoch + 1);
  grpc::Status late = Heartbeat(worker, &hb);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(late.error_message(), HasSubstr(worker));
  // A member the coordinator never registered has no key: the member re-registers.
  grpc::Status unknown = Heartbeat("ps-12345", &hb);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(unknown.error_message(), HasSubstr("ps-12345"));
  EXPECT_TRUE(client::MustRegisterAgain(common::FromGrpcStatus(unknown)));
}

// Workers share one certificate, so the coordinator tells them apart by the key Register gave
// each: nobody heartbeats, leaves or reports for a member whose key it lacks, and only rank 0
// gets the grants for the job's admin calls to the parameter servers (common/grants.h). Each
// server has a key of its own, and each grant is good on its server only.
TEST_F(CoordinatorServiceTest, MembersProveTheirIdWithTheirKeyAndOnlyRankZeroGetsTheJobGrant) {
  coordinator_->Shutdown();
  StartCoordinator(dir_.Sub("keys"), absl::Seconds(60));
  // Two parameter servers, each with a key of its own.
  std::map<std::string, std::string> ps_keys;  // member id -> its grant key
  dlrm::v1::RegisterResponse ps;
  for (const char* address : {"127.0.0.1:9", "127.0.0.1:10"}) {
    dlrm::v1::RegisterRequest as_ps;
    as_ps.set_role(dlrm::v1::ROLE_PS);
    as_ps.set_address(address);
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    ASSERT_TRUE(stub_->Register(ctx.get(), as_ps, &ps).ok());
    EXPECT_EQ(ps.member_key().size(), 64u);
    ASSERT_EQ(ps.ps_grant_key().size(), 64u);
    ps_keys[ps.member_id()] = ps.ps_grant_key();
  }
  ASSERT_EQ(ps_keys.size(), 2u);
  EXPECT_NE(ps_keys.begin()->second, ps_keys.rbegin()->second) << "one key for every server";
  const std::string w0 = Register(dlrm::v1::ROLE_WORKER);
  const std::string w1 = Register(dlrm::v1::ROLE_WORKER);
  EXPECT_NE(keys_[w0], keys_[w1]);
  const std::string job_id = Submit(2);
  dlrm::v1::HeartbeatResponse hb0, hb1;
  ASSERT_TRUE(Heartbeat(w0, &hb0).ok());
  ASSERT_TRUE(Heartbeat(w1, &hb1).ok());
  ASSERT_TRUE(hb0.has_worker() && hb1.has_worker());
  ASSERT_EQ(hb0.worker().rank(), 0);
  const dlrm::v1::JobAssignment& assigned = hb0.worker().job();
  ASSERT_EQ(assigned.ps_member_ids_size(), assigned.ps_addresses_size());
  ASSERT_GE(assigned.ps_member_ids_size(), 1);
  ASSERT_EQ(hb0.worker().job_grants_size(), assigned.ps_member_ids_size());
  EXPECT_EQ(hb1.worker().job_grants_size(), 0) << "rank 0 only";
  for (int shard = 0; shard < assigned.ps_member_ids_size(); ++shard) {
    const std::string& key = ps_keys.at(assigned.ps_member_ids(shard));
    const std::string& admin = hb0.worker().job_grants(shard);
    EXPECT_EQ(admin, common::JobAdminGrant(key, job_id));
    EXPECT_FALSE(common::IsJobAdminGrant(key, "job-other", admin));
    // Every rank gets the member grant of the job at its epoch (the servers' data calls).
    for (const auto* hb : {&hb0, &hb1}) {
      ASSERT_EQ(hb->worker().member_grants_size(), assigned.ps_member_ids_size());
      EXPECT_EQ(hb->worker().member_grants(shard),
                common::JobMemberGrant(key, job_id, hb->worker().job().job_epoch()));
    }
    EXPECT_FALSE(common::IsJobMemberGrant(key, job_id, assigned.job_epoch() + 1,
                                          hb0.worker().member_grants(shard)));
    // Every rank gets the load grant of the LoadJob request its spec makes for this server.
    auto spec = common::ParseJobSpec(assigned.job_spec_yaml(), "assigned");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto params = PsJobParamsFromSpec(*spec, assigned.world_size(), assigned.recovery() > 0);
    ASSERT_TRUE(params.ok()) << params.status();
    dlrm::v1::LoadJobRequest load =
        MakeLoadJobRequest(job_id, assigned.job_epoch(), TableConfigsFromSpec(*spec), *params,
                           shard, assigned.ps_member_ids_size());
    for (const auto* hb : {&hb0, &hb1}) {
      ASSERT_EQ(hb->worker().load_grants_size(), assigned.ps_member_ids_size());
      EXPECT_TRUE(
          common::IsJobLoadGrant(key, LoadJobRequestBytes(load), hb->worker().load_grants(shard)));
    }
    // Not for other tables, another shard's request or another epoch; restart is not signed.
    const std::string& load_grant = hb0.worker().load_grants(shard);
    dlrm::v1::LoadJobRequest changed = load;
    changed.mutable_tables(0)->set_rows(int64_t{1} << 33);
    EXPECT_FALSE(common::IsJobLoadGrant(key, LoadJobRequestBytes(changed), load_grant));
    changed = load;
    changed.set_shard_index(1 - shard);
    EXPECT_FALSE(common::IsJobLoadGrant(key, LoadJobRequestBytes(changed), load_grant));
    changed = load;
    changed.set_job_epoch(load.job_epoch() + 1);
    EXPECT_FALSE(common::IsJobLoadGrant(key, LoadJobRequestBytes(changed), load_grant));
    changed = load;
    changed.set_restart(!load.restart());
    EXPECT_TRUE(common::IsJobLoadGrant(key, LoadJobRequestBytes(changed), load_grant));
    // Another server's key does not take this server's grants.
    for (const auto& [id, other] : ps_keys) {
      if (id == assigned.ps_member_ids(shard)) continue;
      EXPECT_FALSE(common::IsJobAdminGrant(other, job_id, admin));
      EXPECT_FALSE(common::IsJobMemberGrant(other, job_id, assigned.job_epoch(),
                                            hb0.worker().member_grants(shard)));
    }
  }

  auto ctx = common::MakeClientContext(absl::Seconds(5));
  // w1 with w0's key, or as w0 with its own key: refused, and w0 keeps its lease and rank.
  dlrm::v1::HeartbeatRequest stolen;
  stolen.set_member_id(w1);
  stolen.set_member_key(keys_[w0]);
  ctx = common::MakeClientContext(absl::Seconds(5));
  grpc::Status s = stub_->Heartbeat(ctx.get(), stolen, &hb1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("member key"));
  dlrm::v1::LeaveRequest leave;
  leave.set_member_id(w0);
  leave.set_member_key(keys_[w1]);
  dlrm::v1::LeaveResponse left;
  ctx = common::MakeClientContext(absl::Seconds(5));
  EXPECT_EQ(stub_->Leave(ctx.get(), leave, &left).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  dlrm::v1::ReportProgressRequest forged = Report(w0, job_id, 0);
  forged.set_member_key(keys_[w1]);
  forged.set_done(true);
  dlrm::v1::ReportProgressResponse reported;
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = stub_->ReportProgress(ctx.get(), forged, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Its own id and key, but rank 0 is w0's.
  dlrm::v1::ReportProgressRequest other_rank = Report(w1, job_id, 0);
  other_rank.set_done(true);
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = stub_->ReportProgress(ctx.get(), other_rank, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("does not hold rank 0"));
  dlrm::v1::ReportProgressRequest anonymous = Report(w1, job_id, 1);
  anonymous.clear_member_id();
  ctx = common::MakeClientContext(absl::Seconds(5));
  s = stub_->ReportProgress(ctx.get(), anonymous, &reported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Heartbeat(w0, &hb0).ok());
  EXPECT_EQ(hb0.worker().rank(), 0);
  dlrm::v1::GetJobRequest get;
  get.set_job_id(job_id);
  dlrm::v1::Job job;
  ctx = common::MakeClientContext(absl::Seconds(5));
  ASSERT_TRUE(jobs_->GetJob(ctx.get(), get, &job).ok());
  EXPECT_EQ(job.state(), dlrm::v1::JOB_STATE_RUNNING);

  // The keys outlive a coordinator restart (the secret is in its store).
  coordinator_->Shutdown();
  coordinator_.reset();
  StartCoordinator(dir_.Sub("keys"), absl::Seconds(60));
  EXPECT_TRUE(Heartbeat(w0, &hb0).ok());
}

// Bytes that are no request get INVALID_ARGUMENT naming the message from every unary method of
// both services (common/raw_unary.h), and the coordinator serves on.
TEST_F(CoordinatorServiceTest, GarbageBytesAreInvalidArgumentNamingTheMessage) {
  const google::protobuf::FileDescriptor* coordinator =
      dlrm::v1::RegisterRequest::descriptor()->file();
  ::dlrm::testing::ExpectEveryMethodRefusesGarbage(channel_,
                                                   *coordinator->FindServiceByName("Coordinator"));
  ::dlrm::testing::ExpectEveryMethodRefusesGarbage(
      channel_, *dlrm::v1::SubmitJobRequest::descriptor()->file()->FindServiceByName("Jobs"));
  EXPECT_FALSE(Register(dlrm::v1::ROLE_PS).empty());
}

TEST_F(CoordinatorServiceTest, ServesHealthAndCountsMembersInMetrics) {
  // grpc.health.v1.Health/Check with an empty request (service ""): SERVING is status = 1,
  // encoded as the two bytes 08 01.
  grpc::GenericStub generic(channel_);
  grpc::Slice empty_request(std::string{});  // an empty HealthCheckRequest
  grpc::ByteBuffer request_buffer(&empty_request, 1);
  grpc::ByteBuffer response_buffer;
  grpc::ClientContext ctx;
  common::SetDeadline(&ctx, absl::Seconds(5));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_buffer,
                    &response_buffer, [&](grpc::Status s) {
                      status = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response_buffer.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) bytes.append(slice.begin(), slice.end());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));

  Register(dlrm::v1::ROLE_PS);
  Register(dlrm::v1::ROLE_WORKER);
  Register(dlrm::v1::ROLE_WORKER);
  const std::string text = coordinator_->metrics().Serialize();
  EXPECT_THAT(text, HasSubstr("dlrm_members{role=\"worker\"} 2"));
  EXPECT_THAT(text, HasSubstr("dlrm_members{role=\"ps\"} 1"));
  EXPECT_THAT(text, HasSubstr("dlrm_coordinator_rpcs_total{code=\"OK\",method=\"Register\"} 3"));
}

TEST(DeadCoordinatorTest, CallFailsWithinItsDeadline) {
  // Bind a port, then close it: nothing listens there.
  int port = 0;
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    auto server = builder.BuildAndStart();
    server->Shutdown();
  }
  auto channel = common::MakeChannel({.target = absl::StrCat("127.0.0.1:", port)});
  ASSERT_TRUE(channel.ok());
  auto stub = dlrm::v1::Coordinator::NewStub(*channel);
  dlrm::v1::HeartbeatRequest request;
  request.set_member_id("worker-1");
  dlrm::v1::HeartbeatResponse response;
  const absl::Time start = absl::Now();
  auto ctx = common::MakeClientContext(absl::Seconds(2));
  grpc::Status s = stub->Heartbeat(ctx.get(), request, &response);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
              s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_code() << " " << s.error_message();
}

// Every caller-controlled size past its limit (common/limits.h) is refused at the RPC edge with
// INVALID_ARGUMENT naming the value and the limit, and the coordinator's members, jobs and
// rendezvous values read the same before and after.
TEST_F(CoordinatorServiceTest, InputsPastTheirLimitsAreRefusedAndChangeNothing) {
  coordinator_->Shutdown();
  StartCoordinator(dir_.Sub("limits"), absl::Seconds(60));  // no lease runs out meanwhile
  Register(dlrm::v1::ROLE_PS);
  const std::string job_id = Submit(1);  // no worker: it stays PENDING
  ASSERT_TRUE(KvSet("k", "v").ok());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto add = [this](const std::string& key, int64_t delta) {
    dlrm::v1::KvAddRequest request;
    request.set_key(key);
    request.set_delta(delta);
    dlrm::v1::KvAddResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    return stub_->KvAdd(ctx.get(), request, &response);
  };
  ASSERT_TRUE(add("counter", kMax).ok());

  auto snapshot = [this] {
    std::string out;
    dlrm::v1::GetClusterViewResponse view;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    EXPECT_TRUE(stub_->GetClusterView(ctx.get(), dlrm::v1::GetClusterViewRequest(), &view).ok());
    out += view.SerializeAsString();
    dlrm::v1::ListJobsResponse jobs;
    ctx = common::MakeClientContext(absl::Seconds(5));
    EXPECT_TRUE(jobs_->ListJobs(ctx.get(), dlrm::v1::ListJobsRequest(), &jobs).ok());
    out += jobs.SerializeAsString();
    for (const char* key : {"k", "counter"}) {
      std::string value;
      EXPECT_TRUE(KvGet(key, absl::ZeroDuration(), &value).ok()) << key;
      out += value + "|";
    }
    return out;
  };
  const std::string before = snapshot();

  auto expect = [](const grpc::Status& s, const std::string& what,
                   const std::vector<std::string>& texts) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << what << ": " << s.error_message();
    for (const std::string& text : texts) EXPECT_THAT(s.error_message(), HasSubstr(text)) << what;
    EXPECT_LT(s.error_message().size(), 1000u) << what << ": the message quotes no payload";
  };
  const std::string mib(1 << 20, 'x');
  for (int field = 0; field < 3; ++field) {
    dlrm::v1::RegisterRequest request;
    request.set_role(dlrm::v1::ROLE_WORKER);
    if (field == 0) request.set_name(mib);
    if (field == 1) request.set_address(mib);
    if (field == 2) request.set_metrics_address(mib);
    dlrm::v1::RegisterResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    expect(stub_->Register(ctx.get(), request, &response), absl::StrCat("register ", field),
           {"Register: ", "1048576 bytes", field == 0 ? "kMaxNameBytes" : "kMaxAddressBytes"});
  }
  // A member's name and addresses are printed in `dlrmctl members`, logs and metrics labels:
  // control characters (a terminal's escape sequences) are refused, naming where.
  for (int field = 0; field < 3; ++field) {
    dlrm::v1::RegisterRequest request;
    request.set_role(dlrm::v1::ROLE_WORKER);
    const std::string text = "w\x1b[2J";
    if (field == 0) request.set_name(text);
    if (field == 1) request.set_address(text);
    if (field == 2) request.set_metrics_address(text);
    dlrm::v1::RegisterResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    expect(stub_->Register(ctx.get(), request, &response), absl::StrCat("escape ", field),
           {field == 0 ? "Register: name" : "address", "control character 0x1b at byte 1"});
  }

  auto submit = [this](const std::string& spec) {
    dlrm::v1::SubmitJobRequest request;
    request.set_spec_yaml(spec);
    dlrm::v1::SubmitJobResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(10));
    return jobs_->SubmitJob(ctx.get(), request, &response);
  };
  const std::string tiny = dlrm::testing::kTinySpec;
  expect(submit(tiny + "# " + std::string(3 << 20, 'x') + "\n"), "3 MB spec",
         {"spec_yaml of 31459", absl::StrCat(common::kMaxSpecBytes), "kMaxSpecBytes"});
  // A 20 kB job id is NOT_FOUND, quoted shortly: in full it made the answer's metadata too big
  // for gRPC, and the caller read RESOURCE_EXHAUSTED instead.
  {
    dlrm::v1::GetJobRequest request;
    request.set_job_id(std::string(20000, 'j'));
    dlrm::v1::Job job;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    const grpc::Status s = jobs_->GetJob(ctx.get(), request, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("... (20000 bytes)"));
  }
  // Past the coordinator's receive limit gRPC refuses the request unread, naming both sizes.
  const grpc::Status huge = submit(tiny + "# " + std::string(30 << 20, 'x') + "\n");
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << huge.error_message();
  EXPECT_THAT(huge.error_message(), HasSubstr(absl::StrCat(common::kMaxCoordinatorRequestBytes)));
  expect(submit(tiny + "training: {batch_size: 2000000000}\n"), "batch size",
         {"training.batch_size", "2000000000", "kMaxBatchSize"});
  expect(submit(tiny + "optimizer: {dense: {type: sgd, learning_rate: .nan}}\n"), "nan rate",
         {"optimizer.dense.learning_rate", "nan"});
  expect(submit(tiny + "training: {hot_budget: 99999999999999999999GiB}\n"), "hot budget",
         {"training.hot_budget", "kMaxByteSize"});

  expect(KvSet("big", std::string(common::kMaxKvValueBytes + 1, 'v')), "kv value",
         {"'big'", absl::StrCat(common::kMaxKvValueBytes + 1), "kMaxKvValueBytes"});
  expect(KvSet(std::string(common::kMaxKvKeyBytes + 1, 'k'), "v"), "kv key", {"kMaxKvKeyBytes"});
  expect(add("counter", 1), "kv add", {"'counter'", absl::StrCat(kMax), "int64"});
  {
    dlrm::v1::KvDeleteRequest request;
    request.set_key(std::string(common::kMaxKvKeyBytes + 1, 'k'));
    dlrm::v1::KvDeleteResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    expect(stub_->KvDelete(ctx.get(), request, &response), "kv delete", {"kMaxKvKeyBytes"});
    // An empty prefix would delete every job's keys: refused, and the keys stay.
    ASSERT_TRUE(KvSet("kept", "v").ok());
    request.set_key("");
    request.set_prefix(true);
    auto ctx2 = common::MakeClientContext(absl::Seconds(5));
    expect(stub_->KvDelete(ctx2.get(), request, &response), "kv delete of everything",
           {"rendezvous key prefix is empty"});
    request.set_key("kep");
    auto ctx3 = common::MakeClientContext(absl::Seconds(5));
    ASSERT_TRUE(stub_->KvDelete(ctx3.get(), request, &response).ok());
    EXPECT_EQ(response.deleted(), 1) << "the refused call deleted the key";
  }
  {
    dlrm::v1::CancelJobRequest request;
    request.set_job_id(job_id);
    request.set_reason(mib);
    dlrm::v1::Job response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    expect(jobs_->CancelJob(ctx.get(), request, &response), "cancel reason",
           {"CancelJob: reason of 1048576 bytes", "kMaxMessageBytes"});
  }
  {
    dlrm::v1::ReportProgressRequest request = Report("worker-0", job_id, 0);
    request.set_failed(true);
    request.set_message(mib);
    dlrm::v1::ReportProgressResponse response;
    auto ctx = common::MakeClientContext(absl::Seconds(5));
    expect(stub_->ReportProgress(ctx.get(), request, &response), "report message",
           {"ReportProgress: message of 1048576 bytes", "kMaxMessageBytes"});
  }
  EXPECT_EQ(snapshot(), before);
}

}  // namespace
}  // namespace dlrm::server
