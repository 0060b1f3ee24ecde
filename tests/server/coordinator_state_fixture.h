// The fixture of the CoordinatorState tests (coordinator_state_test.cc: membership, leases,
// shards, recovery and persistence; coordinator_jobs_test.cc: the job state machine, submission
// and listing): a state without gRPC or a store, with time passed in so lease expiry is exact.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/coordinator_state.h"
#include "tests/server/test_specs.h"

namespace dlrm::server {

inline constexpr absl::Duration kTtl = absl::Seconds(10);

class CoordinatorStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    now_ = absl::FromUnixSeconds(1'700'000'000);
    state_ = Make(nullptr);
  }

  std::unique_ptr<CoordinatorState> Make(CoordinatorStore* store) {
    auto s = CoordinatorState::Create({.lease_ttl = kTtl}, store, nullptr, now_);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  }

  std::string RegisterAs(CoordinatorState& s, dlrm::v1::Role role, const std::string& address) {
    dlrm::v1::RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    auto resp = s.Register(r, now_);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->member_id();
  }

  dlrm::v1::Job Submit(CoordinatorState& s, int workers, int ps = 0) {
    dlrm::v1::SubmitJobRequest r;
    r.set_spec_yaml(dlrm::testing::kTinySpec);
    r.set_workers(workers);
    r.set_ps(ps);
    auto job = s.Submit(r, now_);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  absl::StatusOr<dlrm::v1::JobState> Report(const std::string& job, int rank, bool done,
                                            bool failed = false) {
    dlrm::v1::ReportProgressRequest r;
    r.set_job_id(job);
    r.set_rank(rank);
    r.set_step(100);
    r.set_samples(1000 * (rank + 1));
    r.set_loss(0.5);
    r.set_done(done);
    r.set_failed(failed);
    if (failed) r.set_message("out of memory");
    if (done) (*r.mutable_metrics())["auc"] = 0.75;
    return state_->ReportProgress(r, now_);
  }

  absl::Time now_;
  std::unique_ptr<CoordinatorState> state_;
};

}  // namespace dlrm::server
