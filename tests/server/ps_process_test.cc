// PsProcess (`dlrm ps` as a library) against a real coordinator on loopback: it registers as a
// PS with its address, heartbeats, and leaves on Shutdown; without a coordinator Run fails with
// UNAVAILABLE naming it.
#include "server/ps_process.h"

#include <thread>

#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;
using testing::PsTempDir;
using testing::TestPsOptions;

TEST(PsProcessTest, RegistersAsParameterServerAndLeavesOnShutdown) {
  PsTempDir coordinator_dir, ps_dir;
  CoordinatorOptions coordinator_options;
  coordinator_options.listen_address = "127.0.0.1:0";
  coordinator_options.data_dir = coordinator_dir.path();
  auto coordinator = Coordinator::Create(coordinator_options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE((*coordinator)->Start().ok());

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

TEST(PsProcessTest, RunFailsWhenNoCoordinatorAnswers) {
  PsTempDir ps_dir;
  PsProcessOptions options;
  options.coordinator = "127.0.0.1:1";
  options.server = TestPsOptions(ps_dir.path());
  options.rpc_timeout = absl::Milliseconds(200);
  options.register_timeout = absl::Milliseconds(300);
  absl::Status status = RunParameterServer(options, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("127.0.0.1:1"));
}

}  // namespace
}  // namespace dlrm::server
