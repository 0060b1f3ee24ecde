// PsProcess (`dlrm ps` as a library) against a real coordinator on loopback: it registers as a
// PS with its address, heartbeats, and leaves on Shutdown; without a coordinator Run fails with
// UNAVAILABLE naming it.
#include "server/ps_process.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;
using testing::PsTempDir;
using testing::TestJob;
using testing::TestPsOptions;

// A coordinator on loopback, started, with its data in `dir`.
absl::StatusOr<std::unique_ptr<Coordinator>> StartCoordinator(
    const std::string& dir, absl::Duration lease_ttl = CoordinatorOptions().lease_ttl) {
  CoordinatorOptions options;
  options.listen_address = "127.0.0.1:0";
  options.data_dir = dir;
  options.lease_ttl = lease_ttl;
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator, Coordinator::Create(options));
  DLRM_RETURN_IF_ERROR(coordinator->Start());
  return coordinator;
}

TEST(PsProcessTest, RegistersAsParameterServerAndLeavesOnShutdown) {
  PsTempDir coordinator_dir, ps_dir;
  auto coordinator = StartCoordinator(coordinator_dir.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();

  PsProcessOptions options;
  options.coordinator = (*coordinator)->address();
  options.server = TestPsOptions(ps_dir.path());
  options.name = "ps-test";
  auto ps = PsProcess::Create(options);
  ASSERT_TRUE(ps.ok()) << ps.status();
  absl::Status run_status;
  std::thread runner([&] { run_status = (*ps)->Run(); });

  client::CoordinatorClientOptions client_options;
  client_options.address = (*coordinator)->address();
  auto client = client::CoordinatorClient::Create(client_options);
  ASSERT_TRUE(client.ok());
  bool found = false;
  for (int i = 0; i < 50 && !found; ++i) {
    auto view = (*client)->Members();
    ASSERT_TRUE(view.ok()) << view.status();
    for (const auto& m : view->members()) {
      if (m.role() == dlrm::v1::ROLE_PS && m.address() == (*ps)->advertise_address() &&
          m.state() == dlrm::v1::MEMBER_STATE_ALIVE) {
        found = true;
      }
    }
    if (!found) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(found) << "the PS never showed up as an alive member";
  (*ps)->Shutdown();
  runner.join();
  EXPECT_TRUE(run_status.ok()) << run_status;
  auto view = (*client)->Members();
  ASSERT_TRUE(view.ok());
  for (const auto& m : view->members()) {
    if (m.address() == (*ps)->advertise_address()) {
      EXPECT_NE(m.state(), dlrm::v1::MEMBER_STATE_ALIVE);
    }
  }
  (*coordinator)->Shutdown();
}

// A job loaded on the server that the coordinator does not run (one that ended between two
// heartbeats, never listed as running, or one made up) is unloaded at the next heartbeat, giving
// back its memory, folder and job slot; one loaded at an epoch newer than the answer (a job the
// coordinator started after answering) is kept.
TEST(PsProcessTest, AHeartbeatUnloadsEveryLoadedJobTheCoordinatorDoesNotRun) {
  PsTempDir coordinator_dir, ps_dir;
  // A heartbeat about every 0.7 s.
  auto coordinator = StartCoordinator(coordinator_dir.path(), absl::Seconds(2));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  PsProcessOptions options;
  options.coordinator = (*coordinator)->address();
  options.server = TestPsOptions(ps_dir.path());
  auto ps = PsProcess::Create(options);
  ASSERT_TRUE(ps.ok()) << ps.status();
  PsService& service = (*ps)->server().service();
  ASSERT_TRUE(service.DoLoadJob(TestJob("ended", {{100, 4}}), /*granted=*/true).ok());
  dlrm::v1::LoadJobRequest later = TestJob("later", {{100, 4}});
  later.set_job_epoch(int64_t{1} << 40);
  ASSERT_TRUE(service.DoLoadJob(later, /*granted=*/true).ok());
  absl::Status run_status;
  std::thread runner([&] { run_status = (*ps)->Run(); });
  std::vector<std::string> loaded = service.job_ids();
  for (int i = 0; i < 100 && loaded.size() > 1; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    loaded = service.job_ids();
  }
  EXPECT_EQ(loaded, std::vector<std::string>{"later"});
  (*ps)->Shutdown();
  runner.join();
  EXPECT_TRUE(run_status.ok()) << run_status;
  (*coordinator)->Shutdown();
}

TEST(PsProcessTest, RunFailsWhenNoCoordinatorAnswers) {
  PsTempDir ps_dir;
  PsProcessOptions options;
  options.coordinator = "127.0.0.1:1";
  options.server = TestPsOptions(ps_dir.path());
  options.coordinator_rpc_timeout = absl::Milliseconds(200);
  options.register_timeout = absl::Milliseconds(300);
  absl::Status status = RunParameterServer(options, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("127.0.0.1:1"));
}

}  // namespace
}  // namespace dlrm::server
