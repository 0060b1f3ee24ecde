// CoordinatorState's membership as a cluster lives it, with time passed in: a parameter server
// replaced before its lease ran out (a hole in the shard slots) must not keep new jobs from
// starting; a coordinator that stopped serving for longer than a lease must not expire members
// whose heartbeats it could not hear; and messages name a member by id and by process name.
// (The basic state machine: coordinator_state_test.cc.)
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_state.h"
#include "server/coordinator_store.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_specs.h"

namespace dlrm::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kTtl = absl::Seconds(10);

class CoordinatorMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override { now_ = absl::FromUnixSeconds(1'700'000'000); }

  std::unique_ptr<CoordinatorState> Make(CoordinatorStore* store = nullptr) {
    auto s = CoordinatorState::Create({.lease_ttl = kTtl}, store, nullptr, now_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string Register(dlrm::v1::Role role, const std::string& address,
                       const std::string& name = "") {
    dlrm::v1::RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    r.set_name(name);
    auto resp = state_->Register(r, now_);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->member_id() : "";
  }

  dlrm::v1::Job Submit(int workers, int ps) {
    dlrm::v1::SubmitJobRequest r;
    r.set_spec_yaml(dlrm::testing::kTinySpec);
    r.set_workers(workers);
    r.set_ps(ps);
    auto job = state_->Submit(r, now_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : dlrm::v1::Job();
  }

  dlrm::v1::Job Get(const std::string& job_id) {
    auto job = state_->GetJob(job_id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : dlrm::v1::Job();
  }

  // Advances time by `step` with one lease sweep: `alive` heartbeat first.
  int Tick(absl::Duration step, const std::vector<std::string>& alive) {
    now_ += step;
    for (const std::string& id : alive) {
      auto hb = state_->Heartbeat(id, now_);
      EXPECT_TRUE(hb.ok()) << id << ": " << hb.status();
    }
    return state_->ExpireLeases(now_);
  }

  int ShardOf(const std::string& ps) {
    auto hb = state_->Heartbeat(ps, now_);
    EXPECT_TRUE(hb.ok()) << hb.status();
    return hb.ok() ? hb->ps().shard_index() : -1;
  }

  absl::Time now_;
  std::unique_ptr<CoordinatorState> state_;
};

// The store holds the secret every member key and job grant is derived from: a data dir the
// coordinator creates is its owner's alone (it was 0755 under the usual umask, its files 0644).
TEST(CoordinatorStoreTest, TheDataDirItCreatesIsItsOwnersAlone) {
  ::dlrm::testing::ScopedTempDir temp("coordinator_store_mode");
  const std::string dir = temp.Sub("data/coordinator");
  auto store = CoordinatorStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(std::filesystem::status(dir).permissions(), std::filesystem::perms::owner_all);
}

// A PS registers with the HOST:PORT every job's workers dial; anything else would fail each job it
// joined ("LoadJob on ps shard 1 (not-an-address): DNS resolution failed"). A role other than PS
// or WORKER is named as such.
TEST_F(CoordinatorMembershipTest, APsRegistersWithAHostAndPort) {
  state_ = Make();
  for (const char* address : {"not-an-address", "h:", "h:0", "h:70000", ":50061"}) {
    dlrm::v1::RegisterRequest r;
    r.set_role(dlrm::v1::ROLE_PS);
    r.set_address(address);
    auto refused = state_->Register(r, now_);
    ASSERT_FALSE(refused.ok()) << address;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(refused.status().message(), HasSubstr(address));
  }
  dlrm::v1::RegisterRequest r;
  r.set_role(dlrm::v1::ROLE_COORDINATOR);
  EXPECT_THAT(state_->Register(r, now_).status().message(),
              HasSubstr("role COORDINATOR cannot register"));
  EXPECT_FALSE(Register(dlrm::v1::ROLE_PS, "ps-0.ps.default.svc:50061").empty());
  EXPECT_FALSE(Register(dlrm::v1::ROLE_PS, "[::1]:50061").empty());
}

// Live members are bounded (an audit's 3000 registrations made the cluster view 3.2 MB): past
// the limit Register is RESOURCE_EXHAUSTED naming it; a process replacing a member of its name
// still gets in, and so does a new one once a member has left.
TEST_F(CoordinatorMembershipTest, LiveMembersAreBounded) {
  auto s =
      CoordinatorState::Create({.lease_ttl = kTtl, .max_live_members = 3}, nullptr, nullptr, now_);
  ASSERT_TRUE(s.ok()) << s.status();
  state_ = std::move(*s);
  Register(dlrm::v1::ROLE_PS, "h:1", "ps-0");
  Register(dlrm::v1::ROLE_WORKER, "", "trainer-a");
  Register(dlrm::v1::ROLE_WORKER, "", "trainer-b");
  dlrm::v1::RegisterRequest fourth;
  fourth.set_role(dlrm::v1::ROLE_WORKER);
  fourth.set_name("trainer-c");
  auto refused = state_->Register(fourth, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("3 members are alive"));
  EXPECT_FALSE(Register(dlrm::v1::ROLE_WORKER, "", "trainer-a").empty()) << "a replacement";
  ASSERT_TRUE(state_->Leave(Register(dlrm::v1::ROLE_WORKER, "", "trainer-b"), now_).ok());
  EXPECT_TRUE(state_->Register(fourth, now_).ok());
}

// `dlrm local` restarts a killed PS within 200 ms, long before the dead one's lease runs out, so
// the replacement registers into a new slot; when the lease ends, the dead one's slot is a hole
// in the shard map (",h:2,h:3"). The running job recovers onto the live servers, and new jobs,
// with `--ps 0` (every PS alive) or `--ps 1`, start on the live servers instead of waiting for
// slot 0 forever; also after a coordinator restart. The next PS to register fills the hole.
TEST_F(CoordinatorMembershipTest, HoleInTheShardSlotsBlocksNoNewJob) {
  ::dlrm::testing::ScopedTempDir temp("coordinator_membership_hole");
  auto store = CoordinatorStore::Open(temp.Sub("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  state_ = Make(store->get());
  const std::string a = Register(dlrm::v1::ROLE_PS, "h:1");
  const std::string b = Register(dlrm::v1::ROLE_PS, "h:2");
  const std::string w0 = Register(dlrm::v1::ROLE_WORKER, "");
  const std::string w1 = Register(dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job job1 = Submit(1, 0);
  ASSERT_EQ(Get(job1.job_id()).state(), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Get(job1.job_id()).ps_member_ids(), ElementsAre(a, b));

  // a is killed; its replacement c registers while a still holds slot 0.
  now_ += absl::Milliseconds(200);
  const std::string c = Register(dlrm::v1::ROLE_PS, "h:3");
  EXPECT_EQ(ShardOf(c), 2);
  int expired = 0;
  for (int i = 0; i < 10 && expired == 0; ++i) expired = Tick(kTtl / 4, {b, c, w0, w1});
  ASSERT_EQ(expired, 1) << "a's lease never ran out";
  EXPECT_THAT(state_->ClusterView().shard_map(), ElementsAre("", "h:2", "h:3"));

  // The running job lost a: it recovers onto the two live servers.
  ASSERT_EQ(Get(job1.job_id()).state(), dlrm::v1::JOB_STATE_RECOVERING);
  Tick(absl::Seconds(1), {b, c, w0, w1});
  dlrm::v1::Job recovered = Get(job1.job_id());
  ASSERT_EQ(recovered.state(), dlrm::v1::JOB_STATE_RUNNING) << recovered.message();
  EXPECT_THAT(recovered.ps_member_ids(), ElementsAre(b, c));
  EXPECT_THAT(recovered.ps_addresses(), ElementsAre("h:2", "h:3"));
  EXPECT_EQ(recovered.recoveries(), 1);

  // New jobs: every PS alive, and one PS.
  const dlrm::v1::Job job2 = Submit(1, 0);
  dlrm::v1::Job started = Get(job2.job_id());
  ASSERT_EQ(started.state(), dlrm::v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.ps_member_ids(), ElementsAre(b, c));
  EXPECT_THAT(started.worker_ids(), ElementsAre(w1));
  const std::string w2 = Register(dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job job3 = Submit(1, 1);
  started = Get(job3.job_id());
  ASSERT_EQ(started.state(), dlrm::v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.ps_member_ids(), ElementsAre(b));

  // The coordinator restarts from its store: the hole is still there, and still blocks nothing.
  state_.reset();
  state_ = Make(store->get());
  EXPECT_THAT(state_->ClusterView().shard_map(), ElementsAre("", "h:2", "h:3"));
  // (Members loaded from the store take jobs once they heartbeat again.)
  for (const std::string& m : {b, c}) ASSERT_TRUE(state_->Heartbeat(m, now_).ok());
  Register(dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job job4 = Submit(1, 0);
  started = Get(job4.job_id());
  ASSERT_EQ(started.state(), dlrm::v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.ps_member_ids(), ElementsAre(b, c));

  // A job asking for more PS than are alive waits for them; the next PS fills the hole.
  Register(dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job job5 = Submit(1, 3);
  EXPECT_EQ(Get(job5.job_id()).state(), dlrm::v1::JOB_STATE_PENDING);
  const std::string d = Register(dlrm::v1::ROLE_PS, "h:4");
  EXPECT_EQ(ShardOf(d), 0);
  EXPECT_THAT(state_->ClusterView().shard_map(), ElementsAre("h:4", "h:2", "h:3"));
  started = Get(job5.job_id());
  ASSERT_EQ(started.state(), dlrm::v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.ps_member_ids(), ElementsAre(d, b, c));
  state_.reset();
}

// After both servers were replaced that way the map is ",,h:3,h:4": a new job takes the two.
TEST_F(CoordinatorMembershipTest, NewJobRunsOnReplacementsOfEveryServer) {
  state_ = Make();
  const std::string a = Register(dlrm::v1::ROLE_PS, "h:1");
  const std::string b = Register(dlrm::v1::ROLE_PS, "h:2");
  const std::string w0 = Register(dlrm::v1::ROLE_WORKER, "");
  now_ += absl::Milliseconds(200);
  const std::string c = Register(dlrm::v1::ROLE_PS, "h:3");
  const std::string d = Register(dlrm::v1::ROLE_PS, "h:4");
  int expired = 0;
  for (int i = 0; i < 10 && expired < 2; ++i) expired += Tick(kTtl / 4, {c, d, w0});
  ASSERT_EQ(expired, 2);
  EXPECT_THAT(state_->ClusterView().shard_map(), ElementsAre("", "", "h:3", "h:4"));
  const dlrm::v1::Job job = Submit(1, 0);
  const dlrm::v1::Job started = Get(job.job_id());
  ASSERT_EQ(started.state(), dlrm::v1::JOB_STATE_RUNNING) << started.message();
  EXPECT_THAT(started.ps_addresses(), ElementsAre("h:3", "h:4"));
}

// The coordinator stops for 25 s (SIGSTOP, a suspended VM): no heartbeat is heard and no lease
// is checked. The first sweep after it expires nobody and gives every member a lease from then,
// so the running job goes on with no recovery used; a member that is really gone expires one
// lease later. Sweeps at their usual pace expire as before.
TEST_F(CoordinatorMembershipTest, StalledCoordinatorRenewsLeasesInsteadOfExpiringThem) {
  state_ = Make();
  const std::string ps = Register(dlrm::v1::ROLE_PS, "h:1");
  const std::string w0 = Register(dlrm::v1::ROLE_WORKER, "");
  const std::string w1 = Register(dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job job = Submit(2, 0);
  ASSERT_EQ(Get(job.job_id()).state(), dlrm::v1::JOB_STATE_RUNNING);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Tick(absl::Seconds(1), {ps, w0, w1}), 0);

  for (absl::Duration stall : {absl::Seconds(25), absl::Seconds(75)}) {
    now_ += stall;
    EXPECT_EQ(state_->ExpireLeases(now_), 0) << "after a stall of " << stall;
    const dlrm::v1::Job after = Get(job.job_id());
    EXPECT_EQ(after.state(), dlrm::v1::JOB_STATE_RUNNING) << after.message();
    EXPECT_EQ(after.recoveries(), 0);
    const dlrm::v1::GetClusterViewResponse view = state_->ClusterView();
    for (const dlrm::v1::Member& m : view.members()) {
      EXPECT_EQ(m.state(), dlrm::v1::MEMBER_STATE_ALIVE) << m.member_id();
    }
    // Their heartbeats, queued during the stall, are answered.
    ASSERT_EQ(Tick(absl::Milliseconds(100), {ps, w0, w1}), 0);
  }

  // w1 is really gone (it never heartbeats again): it expires a lease after its last heartbeat,
  // at sweeps a second apart.
  const absl::Time last_heard = now_;
  int expired = 0;
  while (expired == 0 && now_ < last_heard + 2 * kTtl) expired = Tick(absl::Seconds(1), {ps, w0});
  EXPECT_EQ(expired, 1);
  EXPECT_GE(now_, last_heard + kTtl);
  EXPECT_LT(now_, last_heard + kTtl + absl::Seconds(1));
  const dlrm::v1::Job lost = Get(job.job_id());
  EXPECT_EQ(lost.state(), dlrm::v1::JOB_STATE_RECOVERING);
  EXPECT_THAT(lost.message(), HasSubstr(w1));

  // Sweeps 4 s apart (under half a lease) are no stall: a silent member expires.
  const absl::Time w0_heard = now_;
  expired = 0;
  while (expired == 0 && now_ < w0_heard + 2 * kTtl) expired = Tick(absl::Seconds(4), {ps});
  EXPECT_EQ(expired, 1);
  EXPECT_LT(now_, w0_heard + kTtl + absl::Seconds(4));
}

// Member ids (worker-5) and the names processes were started with (--name worker-1) differ after
// restarts; what the coordinator says about a member gives both.
TEST_F(CoordinatorMembershipTest, MessagesNameMembersByIdAndName) {
  state_ = Make();
  // Ids and names out of step, as after restarts.
  Register(dlrm::v1::ROLE_WORKER, "", "worker-9");
  const std::string ps = Register(dlrm::v1::ROLE_PS, "h:1", "ps-0");
  const std::string w0 = Register(dlrm::v1::ROLE_WORKER, "", "worker-1");
  ASSERT_TRUE(state_->Leave("worker-1", now_).ok());
  const std::string w1 = Register(dlrm::v1::ROLE_WORKER, "", "worker-0");
  ASSERT_EQ(w0, "worker-3");
  ASSERT_EQ(w1, "worker-4");
  dlrm::v1::Job job = Submit(2, 0);
  dlrm::v1::Job running = Get(job.job_id());
  ASSERT_EQ(running.state(), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_THAT(running.history(running.history_size() - 1).message(),
              HasSubstr("on workers worker-3 (name worker-1), worker-4 (name worker-0); PS ps-2 "
                        "(name ps-0)"));

  // A peer report and a lease expiry.
  dlrm::v1::ReportProgressRequest lost;
  lost.set_job_id(job.job_id());
  lost.set_rank(1);
  lost.set_failed(true);
  lost.set_peer_unreachable(true);
  lost.set_message("gloo: connection reset");
  ASSERT_EQ(*state_->ReportProgress(lost, now_), dlrm::v1::JOB_STATE_RECOVERING);
  EXPECT_THAT(Get(job.job_id()).message(),
              HasSubstr("rank 1 (worker-4, name worker-0) lost a peer"));
  Tick(absl::Seconds(1), {ps, w0, w1});
  ASSERT_EQ(Get(job.job_id()).state(), dlrm::v1::JOB_STATE_RUNNING);
  int expired = 0;
  for (int i = 0; i < 20 && expired == 0; ++i) expired = Tick(absl::Seconds(1), {ps, w0});
  ASSERT_EQ(expired, 1);
  EXPECT_THAT(Get(job.job_id()).message(),
              HasSubstr("member worker-4 (name worker-0; WORKER rank 1"));
  auto late = state_->Heartbeat(w1, now_);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("member 'worker-4' (name worker-0) is expired"));

  // A report from a member for a rank it does not hold names both members.
  Tick(absl::Seconds(1), {ps, w0});
  const std::string w2 = Register(dlrm::v1::ROLE_WORKER, "", "worker-0");
  Tick(absl::Seconds(1), {ps, w0, w2});
  running = Get(job.job_id());
  ASSERT_EQ(running.state(), dlrm::v1::JOB_STATE_RUNNING) << running.message();
  dlrm::v1::ReportProgressRequest wrong;
  wrong.set_job_id(job.job_id());
  wrong.set_job_epoch(running.job_epoch());
  wrong.set_rank(0);
  wrong.set_member_id(w2);
  auto refused = state_->ReportProgress(wrong, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("member ", w2, " (name worker-0) does not hold rank 0")));
  EXPECT_THAT(refused.status().message(), HasSubstr("worker-3 (name worker-1) does"));

  // A failure report.
  dlrm::v1::ReportProgressRequest failed;
  failed.set_job_id(job.job_id());
  failed.set_rank(0);
  failed.set_failed(true);
  failed.set_message("disk full");
  ASSERT_EQ(*state_->ReportProgress(failed, now_), dlrm::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Get(job.job_id()).message(), HasSubstr("rank 0 (worker-3, name worker-1) failed"));
}

}  // namespace
}  // namespace dlrm::server
