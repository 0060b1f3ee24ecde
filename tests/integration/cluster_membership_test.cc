// A `dlrm local --keep-running` cluster (real coordinator, parameter servers and workers on
// loopback) through what its operators saw go wrong:
//  - a parameter server killed mid-job and restarted at once by `dlrm local` registers while the
//    dead one still holds its lease, so when that lease ends the shard map has a hole
//    (",127.0.0.1:40307"): the job recovers, and later jobs (every PS alive, or one PS) start;
//  - two jobs on one parameter server checkpoint the same steps: both succeed;
//  - the coordinator stopped (SIGSTOP) for longer than a lease expires nobody: the job goes on
//    without a recovery.
// (Recovery from each kind of lost process: recovery_test.cc.)
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster_fixture.h"
#include "tests/integration/process_util.h"

namespace dlrm::testing {
namespace {

class ClusterMembershipTest : public LocalClusterTest {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(MakeDataDir("dlrm-membership", 20000, 1000, 5)); }

  // A job of `epochs` over the 18k training samples (70 steps of 256 an epoch); `checkpoint`:
  // the spec's checkpoint block's settings after its dir (<dir>/<name>-ckpt), none when empty.
  static std::string Spec(const std::string& name, int epochs, const std::string& checkpoint) {
    return WriteSpec({.name = name,
                      .training = absl::StrCat("batch_size: 256, epochs: ", epochs,
                                               ", seed: 11, staleness: 0, hot_budget: 0"),
                      .checkpoint = checkpoint.empty() ? ""
                                                       : absl::StrCat("dir: ", Dir(), "/", name,
                                                                      "-ckpt, ", checkpoint)});
  }

  // `dlrmctl submit -f spec --wait` with `args`, in the background.
  std::unique_ptr<Process> Submit(const std::string& name, const std::string& spec,
                                  const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinPath("dlrmctl"),
                                     "--coordinator",
                                     address_,
                                     "--tls-dir",
                                     tls_dir_,
                                     "submit",
                                     "-f",
                                     spec,
                                     "--wait"};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, Dir(), name);
  }
};

TEST_F(ClusterMembershipTest, JobsStartAfterAServerIsReplacedAndShareItsSnapshots) {
  // A 4 s lease: the replacement (up within a second) registers while the killed one holds it,
  // under its name: it takes the dead one's place, and its slot, at once.
  std::unique_ptr<Process> local =
      StartCluster("replaced", Spec("first", 2, "every_steps: 10, keep_last: 2"),
                   {"--ps", "2", "--workers", "2", "--lease-ttl", "4s"});
  ASSERT_NE(client_, nullptr);
  ASSERT_TRUE(WaitForCommitted(Dir() + "/first-ckpt", *local, absl::Seconds(120)))
      << local->Stderr();
  const pid_t ps = ChildWith(local->pid(), " ps ");
  ASSERT_GT(ps, 0);
  ASSERT_EQ(kill(ps, SIGKILL), 0);

  const dlrm::v1::Job first = WaitForJob("job-1", absl::Seconds(240), Ended);
  ASSERT_EQ(first.state(), dlrm::v1::JOB_STATE_SUCCEEDED) << first.message();
  EXPECT_EQ(first.recoveries(), 1);
  absl::StatusOr<dlrm::v1::GetClusterViewResponse> view = client_->Members();
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->shard_map_size(), 2)
      << "the replacement should have taken the dead server's slot: "
      << absl::StrJoin(view->shard_map(), ",");
  EXPECT_EQ(std::count(view->shard_map().begin(), view->shard_map().end(), ""), 0)
      << "a hole in the shard map: " << absl::StrJoin(view->shard_map(), ",");

  // A job on every PS alive (--ps 0) starts on the two live servers and succeeds.
  std::unique_ptr<Process> second = Submit("second-submit", Spec("second", 1, ""), {});
  ProcessResult r = second->Wait(absl::Seconds(180));
  ASSERT_FALSE(r.timed_out) << "the job never ended (PENDING behind the hole?)";
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  // Two jobs at once on one PS each (the same one), both checkpointing at steps 10, 20, ...
  std::unique_ptr<Process> a =
      Submit("third-submit", Spec("third", 1, "every_steps: 10"), {"--workers", "1", "--ps", "1"});
  std::unique_ptr<Process> b = Submit("fourth-submit", Spec("fourth", 1, "every_steps: 10"),
                                      {"--workers", "1", "--ps", "1"});
  ProcessResult ra = a->Wait(absl::Seconds(240));
  ProcessResult rb = b->Wait(absl::Seconds(240));
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  const dlrm::v1::Job third = WaitForJob("job-3", absl::Seconds(5), Ended);
  const dlrm::v1::Job fourth = WaitForJob("job-4", absl::Seconds(5), Ended);
  ASSERT_EQ(third.ps_member_ids_size(), 1);
  ASSERT_EQ(fourth.ps_member_ids_size(), 1);
  EXPECT_EQ(third.ps_member_ids(0), fourth.ps_member_ids(0)) << "the jobs shared no server";
  EXPECT_TRUE(Committed(Dir() + "/third-ckpt"));
  EXPECT_TRUE(Committed(Dir() + "/fourth-ckpt"));

  local->Signal(SIGINT);
  local->Wait(absl::Seconds(30));
}

TEST_F(ClusterMembershipTest, CoordinatorStoppedLongerThanALeaseCostsNoRecovery) {
  // A 3 s lease and an 8 s stop. No checkpoint.dir: a recovery would start over from step 0.
  // The job is longer than the test needs (it is cancelled once it has gone on after the stop).
  std::unique_ptr<Process> local = StartCluster(
      "stalled", Spec("stalled", 100, ""), {"--ps", "1", "--workers", "2", "--lease-ttl", "3s"});
  ASSERT_NE(client_, nullptr);
  const dlrm::v1::Job before = WaitForJob(
      "job-1", absl::Seconds(120), [](const dlrm::v1::Job& j) { return j.progress().step() > 0; });
  ASSERT_EQ(before.state(), dlrm::v1::JOB_STATE_RUNNING) << before.message();
  const pid_t coordinator = ChildWith(local->pid(), " coordinator ");
  ASSERT_GT(coordinator, 0);
  ASSERT_EQ(kill(coordinator, SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(8));
  ASSERT_EQ(kill(coordinator, SIGCONT), 0);

  // Training goes on from where it was: 20 more steps, no recovery, every member alive.
  const int64_t stopped_at = before.progress().step();
  const dlrm::v1::Job after = WaitForJob("job-1", absl::Seconds(120), [&](const dlrm::v1::Job& j) {
    return Ended(j) || j.recoveries() > 0 || j.progress().step() >= stopped_at + 20;
  });
  EXPECT_EQ(after.state(), dlrm::v1::JOB_STATE_RUNNING) << after.message();
  EXPECT_EQ(after.recoveries(), 0) << after.message();
  EXPECT_GE(after.progress().step(), stopped_at + 20) << after.message();
  absl::StatusOr<dlrm::v1::GetClusterViewResponse> view = client_->Members();
  ASSERT_TRUE(view.ok()) << view.status();
  for (const dlrm::v1::Member& m : view->members()) {
    EXPECT_EQ(m.state(), dlrm::v1::MEMBER_STATE_ALIVE) << m.member_id() << " lost its lease";
  }
  const std::string log =
      ReadFileOrEmpty(absl::StrCat(Dir(), "/stalled-cluster/logs/coordinator.log"));
  EXPECT_FALSE(absl::StrContains(log, "lease expired")) << log;
  EXPECT_TRUE(absl::StrContains(log, "fresh lease")) << log;

  EXPECT_TRUE(client_->Cancel("job-1", "the test is over").ok());
  local->Signal(SIGINT);
  local->Wait(absl::Seconds(30));
}

}  // namespace
}  // namespace dlrm::testing
