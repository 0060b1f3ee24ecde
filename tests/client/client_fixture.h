// ClientTest: a real coordinator in-process on loopback (real gRPC channel), a CoordinatorClient
// to it, and helpers that play members (threads speaking the member-side RPCs) and run dlrmctl
// against it. Shared by the client tests.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/dlrmctl.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_specs.h"

namespace dlrm::client {

// Runs dlrmctl with `args` (no program name) and `default_coordinator` as the address it uses
// without --coordinator; returns its exit code and what it printed.
inline int RunCtl(const std::string& default_coordinator, std::vector<std::string> args,
                  std::string* out, std::string* err = nullptr) {
  args.insert(args.begin(), "dlrmctl");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream o, e;
  const int code =
      RunDlrmctl(static_cast<int>(argv.size()), argv.data(), default_coordinator, o, e);
  *out = o.str();
  if (err != nullptr) *err = e.str();
  return code;
}

class ClientTest : public ::testing::Test {
 protected:
  ::dlrm::testing::ScopedTempDir dir_{"client_test"};  // unique: tests run in parallel

  void SetUp() override {
    const std::string dir = dir_.Sub("coordinator");
    server::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.data_dir = dir;
    options.lease_ttl = absl::Seconds(30);  // test members do not heartbeat
    auto c = server::Coordinator::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    ASSERT_TRUE(coordinator_->Start().ok());
    CoordinatorClientOptions client_options;
    client_options.address = coordinator_->address();
    client_options.timeout = absl::Seconds(5);
    auto client = CoordinatorClient::Create(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    spec_path_ = dir_.Sub("job.yaml");
    std::ofstream(spec_path_) << dlrm::testing::kTinySpec;
    bad_spec_path_ = dir_.Sub("bad_job.yaml");
    std::ofstream(bad_spec_path_) << dlrm::testing::kBadSpec;
  }
  void TearDown() override {
    for (auto& t : workers_) t.join();
    coordinator_->Shutdown();
  }

  // A worker: registers, waits for its assignment, reports a few steps, then finishes (or
  // fails when `fail`) and leaves.
  void StartWorker(bool fail = false) {
    workers_.emplace_back([this, fail] {
      dlrm::v1::RegisterRequest r;
      r.set_role(dlrm::v1::ROLE_WORKER);
      auto reg = client_->Register(r);
      ASSERT_TRUE(reg.ok()) << reg.status();
      dlrm::v1::WorkerAssignment assignment;
      for (int i = 0; i < 200 && !assignment.has_job(); ++i) {
        auto hb = client_->Heartbeat(reg->member_id(), reg->member_key());
        ASSERT_TRUE(hb.ok()) << hb.status();
        if (hb->has_worker()) assignment = hb->worker();
        absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(assignment.has_job());
      for (int step = 1; step <= 3; ++step) {
        dlrm::v1::ReportProgressRequest p;
        p.set_job_id(assignment.job().job_id());
        p.set_rank(assignment.rank());
        p.set_member_id(reg->member_id());
        p.set_member_key(reg->member_key());
        p.set_step(step);
        p.set_samples(step * 64);
        p.set_loss(0.69 / step);
        p.set_done(step == 3 && !fail);
        p.set_failed(step == 3 && fail);
        if (fail) p.set_message("disk on fire");
        if (step == 3) (*p.mutable_metrics())["auc"] = 0.71;
        ASSERT_TRUE(client_->ReportProgress(p).ok());
        absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(client_->Leave(reg->member_id(), reg->member_key()).ok());
    });
  }

  // Registers a member that stays idle (it does not heartbeat; the lease outlives the test).
  // Returns its member id.
  std::string RegisterMember(dlrm::v1::Role role, const std::string& name = "",
                             const std::string& address = "127.0.0.1:7") {
    dlrm::v1::RegisterRequest r;
    r.set_role(role);
    r.set_name(name);
    if (role == dlrm::v1::ROLE_PS) r.set_address(address);
    auto reg = client_->Register(r);
    EXPECT_TRUE(reg.ok()) << reg.status();
    return reg.ok() ? reg->member_id() : "";
  }
  void RegisterPs(const std::string& name = "") { RegisterMember(dlrm::v1::ROLE_PS, name); }

  // Runs dlrmctl against this test's coordinator; returns its exit code.
  int Ctl(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    return RunCtl(coordinator_->address(), std::move(args), out, err);
  }

  std::unique_ptr<server::Coordinator> coordinator_;
  std::unique_ptr<CoordinatorClient> client_;
  std::vector<std::thread> workers_;
  std::string spec_path_;
  std::string bad_spec_path_;
};

}  // namespace dlrm::client
