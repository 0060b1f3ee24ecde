// A job survives the loss of any one process: `dlrm local` (real coordinator, 2 parameter
// servers and 2 workers on loopback, each a child process it restarts when it dies) runs a job
// with checkpoints every 20 steps; once the first checkpoint is committed one child is killed
// with SIGKILL (a parameter server, a worker, the coordinator) or stopped for 10 s with SIGSTOP.
// The job must end SUCCEEDED with an AUC within 0.003 of an undisturbed run, and the job state
// the coordinator serves (what `dlrmctl status` shows) must tell the truth throughout: RECOVERING
// after a lost member, RUNNING again, and progress that never drops back to zero.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "embedding/checkpoint_manifest.h"
#include "gtest/gtest.h"
#include "tests/integration/process_util.h"
#include "worker/train_report.h"

namespace dlrm::testing {
namespace {

namespace fs = std::filesystem;

// The tolerance the issue sets for a job that recovered from a lost process. The two workers'
// pushes are applied in arrival order, so even undisturbed runs differ by ~0.001.
constexpr double kAucTolerance = 0.003;

// What the test saw of the job while it ran.
struct Observed {
  std::vector<dlrm::v1::JobState> states;  // each change of state, in order
  bool progress_went_to_zero = false;      // total samples 0 after having been > 0
  std::string status_while_recovering;     // `dlrmctl status` output, taken once
  dlrm::v1::Job last;
};

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dlrm-recovery-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    ProcessResult gen = RunProcess({BinPath("dlrm"), "gen-data", "--out", *dir_ + "/train.tsv",
                                    "--rows", "64000", "--max-rows", "1000", "--seed", "21"},
                                   *dir_, "gen-data", absl::Seconds(120));
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (dir_ != nullptr) fs::remove_all(*dir_, ec);
    delete dir_;
    dir_ = nullptr;
  }

  // A 2-epoch job (226 steps) with checkpoints into <dir>/<name>-ckpt, every 20 steps unless
  // `when` says otherwise.
  static std::string Spec(const std::string& name,
                          const std::string& when = "every_steps: 20, keep_last: 2") {
    const std::string path = absl::StrCat(*dir_, "/", name, ".yaml");
    std::ofstream(path) << absl::StrCat("name: ", name, R"(
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
)",
                                        kCappedKaggleTablesYaml, R"(optimizer:
  dense: {type: adam, learning_rate: 0.003}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: 256, epochs: 2, seed: 11, staleness: 0, hot_budget: 0}
data: {train: [train.tsv], eval_fraction: 0.1}
checkpoint: {dir: )",
                                        *dir_, "/", name, "-ckpt, ", when, "}\n");
    return path;
  }

  static std::vector<std::string> LocalArgs(
      const std::string& name, const std::string& when = "every_steps: 20, keep_last: 2") {
    return {BinPath("dlrm"),
            "local",
            "-c",
            Spec(name, when),
            "--ps",
            "2",
            "--workers",
            "2",
            "--no-progress",
            "--worker-threads",
            "1",
            "--data-dir",
            absl::StrCat(*dir_, "/", name, "-cluster"),
            "--metrics-out",
            absl::StrCat(*dir_, "/", name, ".json")};
  }

  static worker::TrainReport Report(const std::string& name) {
    auto r = worker::TrainReportFromJson(ReadFileOrEmpty(absl::StrCat(*dir_, "/", name, ".json")));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : worker::TrainReport{};
  }

  // The AUC of the job run undisturbed (once per suite).
  static double BaselineAuc() {
    static double auc = [] {
      ProcessResult p = RunProcess(LocalArgs("baseline"), *dir_, "baseline", absl::Seconds(240));
      EXPECT_EQ(p.exit_code, 0) << p.err;
      return Report("baseline").auc;
    }();
    return auc;
  }

  // The child of `local` whose command line holds `role_flag` (" ps ", " worker ",
  // " coordinator ").
  static pid_t ChildWith(pid_t local, const std::string& role_flag) {
    for (pid_t child : ChildrenOf(local)) {
      if (absl::StrContains(CommandLine(child) + " ", role_flag)) return child;
    }
    return -1;
  }

  // Runs the job under `dlrm local`, does `disturb` to the child found by `role_flag` once the
  // first checkpoint is committed, and follows the job until `dlrm local` exits.
  static Observed RunDisturbed(const std::string& name, const std::string& role_flag,
                               const std::function<void(pid_t)>& disturb) {
    Observed seen;
    Process local(LocalArgs(name), *dir_, name);
    const std::string ckpt = absl::StrCat(*dir_, "/", name, "-ckpt");
    const std::string port_file = absl::StrCat(*dir_, "/", name, "-cluster/coordinator.port");
    // The first committed checkpoint: the job has something to roll back to.
    const absl::Time give_up = absl::Now() + absl::Seconds(120);
    auto committed = [&] {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(ckpt, ec)) {
        if (fs::exists(e.path() / "MANIFEST.json")) return true;
      }
      return false;
    };
    while (!committed() && local.Running() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(committed()) << "no checkpoint within 120 s; " << local.Stderr();
    const pid_t victim = ChildWith(local.pid(), role_flag);
    EXPECT_GT(victim, 0) << "no child with '" << role_flag << "'";
    if (victim > 0) disturb(victim);

    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(ReadFileOrEmpty(port_file), &port)) << port_file;
    const std::string address = absl::StrCat("127.0.0.1:", port);
    auto client =
        client::CoordinatorClient::Create({.address = address, .timeout = absl::Seconds(2)});
    EXPECT_TRUE(client.ok()) << client.status();
    bool had_progress = false;
    while (local.Running() && client.ok()) {
      absl::StatusOr<dlrm::v1::Job> job = (*client)->Get("job-1");
      if (job.ok()) {
        if (seen.states.empty() || seen.states.back() != job->state()) {
          seen.states.push_back(job->state());
        }
        if (job->total_samples() > 0) had_progress = true;
        if (had_progress && job->total_samples() == 0) seen.progress_went_to_zero = true;
        if (job->state() == dlrm::v1::JOB_STATE_RECOVERING &&
            seen.status_while_recovering.empty()) {
          seen.status_while_recovering =
              RunProcess({BinPath("dlrmctl"), "--coordinator", address, "status", "job-1"}, *dir_,
                         name + "-dlrmctl", absl::Seconds(20))
                  .out;
        }
        seen.last = *job;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    // `dlrm local` exits 0 only when the job SUCCEEDED (the last poll may come before that).
    ProcessResult result = local.Wait(absl::Seconds(240));
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return seen;
  }

  static std::string* dir_;
};

std::string* RecoveryTest::dir_ = nullptr;

void Kill9(pid_t pid) { ASSERT_EQ(kill(pid, SIGKILL), 0); }

TEST_F(RecoveryTest, KilledParameterServerIsReplacedAndTheJobRollsBack) {
  const double baseline = BaselineAuc();
  Observed seen = RunDisturbed("kill-ps", " ps ", Kill9);
  const auto recovering =
      std::find(seen.states.begin(), seen.states.end(), dlrm::v1::JOB_STATE_RECOVERING);
  ASSERT_NE(recovering, seen.states.end()) << "RECOVERING was never shown";
  ASSERT_NE(recovering + 1, seen.states.end());
  EXPECT_EQ(*(recovering + 1), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(seen.last.recoveries(), 1);
  ASSERT_EQ(seen.last.recovery_history_size(), 1);
  EXPECT_TRUE(absl::StrContains(seen.last.recovery_history(0).reason(), "PS shard"))
      << seen.last.recovery_history(0).reason();
  EXPECT_GT(seen.last.recovery_history(0).resumed_ms(), 0);
  EXPECT_FALSE(seen.progress_went_to_zero);
  EXPECT_TRUE(absl::StrContains(seen.status_while_recovering, "RECOVERING"))
      << seen.status_while_recovering;
  EXPECT_TRUE(absl::StrContains(seen.status_while_recovering, "recoveries:"))
      << seen.status_while_recovering;
  EXPECT_NEAR(Report("kill-ps").auc, baseline, kAucTolerance);
}

TEST_F(RecoveryTest, KilledWorkerIsReplacedAndTheJobRollsBack) {
  const double baseline = BaselineAuc();
  Observed seen = RunDisturbed("kill-worker", " worker ", Kill9);
  EXPECT_NE(std::find(seen.states.begin(), seen.states.end(), dlrm::v1::JOB_STATE_RECOVERING),
            seen.states.end());
  EXPECT_EQ(seen.last.recoveries(), 1);
  EXPECT_FALSE(seen.progress_went_to_zero);
  EXPECT_NEAR(Report("kill-worker").auc, baseline, kAucTolerance);
}

// The coordinator keeps its jobs and members in its store: restarted on the same port and data
// folder, it goes on serving the running job, whose members never stopped.
TEST_F(RecoveryTest, KilledCoordinatorRestartsAndTheJobGoesOn) {
  const double baseline = BaselineAuc();
  Observed seen = RunDisturbed("kill-coordinator", " coordinator ", Kill9);
  EXPECT_EQ(std::count(seen.states.begin(), seen.states.end(), dlrm::v1::JOB_STATE_RECOVERING), 0);
  EXPECT_EQ(seen.last.recoveries(), 0);
  EXPECT_FALSE(seen.progress_went_to_zero);
  EXPECT_NEAR(Report("kill-coordinator").auc, baseline, kAucTolerance);
}

// A parameter server that stops answering for 10 s (SIGSTOP, as a long GC pause or a network
// stall would) keeps its lease and the job waits for it: no recovery.
TEST_F(RecoveryTest, TenSecondStallOfAParameterServerNeedsNoRecovery) {
  const double baseline = BaselineAuc();
  absl::Time stopped, resumed;
  Observed seen = RunDisturbed("stall-ps", " ps ", [&](pid_t pid) {
    ASSERT_EQ(kill(pid, SIGSTOP), 0);
    stopped = absl::Now();
    absl::SleepFor(absl::Seconds(10));
    ASSERT_EQ(kill(pid, SIGCONT), 0);
    resumed = absl::Now();
  });
  EXPECT_GE(resumed - stopped, absl::Seconds(10));
  EXPECT_EQ(std::count(seen.states.begin(), seen.states.end(), dlrm::v1::JOB_STATE_RECOVERING), 0);
  EXPECT_EQ(seen.last.recoveries(), 0) << seen.last.message();
  EXPECT_NEAR(Report("stall-ps").auc, baseline, kAucTolerance);
}

// `dlrmctl checkpoint JOB --wait` on a job that takes no periodic checkpoints: one is committed
// mid-run and its path printed; the job's final checkpoint comes after it.
TEST_F(RecoveryTest, CheckpointOnRequestIsCommittedMidRun) {
  Process local(LocalArgs("on-request", "keep_last: 5"), *dir_, "on-request");
  const std::string port_file = *dir_ + "/on-request-cluster/coordinator.port";
  int port = 0;
  for (int i = 0; i < 600 && !absl::SimpleAtoi(ReadFileOrEmpty(port_file), &port); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto client = client::CoordinatorClient::Create({.address = address});
  ASSERT_TRUE(client.ok());
  // As soon as the job runs (a request before its workers start is served by them too).
  for (int i = 0; i < 600; ++i) {
    auto job = (*client)->Get("job-1");
    if (job.ok() && job->state() == dlrm::v1::JOB_STATE_RUNNING) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ProcessResult asked = RunProcess({BinPath("dlrmctl"), "--coordinator", address, "checkpoint",
                                    "job-1", "--wait", "--wait-timeout", "120"},
                                   *dir_, "dlrmctl-checkpoint", absl::Seconds(150));
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  const std::string path(absl::StripAsciiWhitespace(asked.out));
  auto taken = embedding::ReadManifest(path);
  ASSERT_TRUE(taken.ok()) << taken.status() << " (dlrmctl printed '" << path << "')";
  EXPECT_GT(taken->step, 0);
  EXPECT_LT(taken->step, 226) << "taken at the end, not on request";
  ProcessResult result = local.Wait(absl::Seconds(240));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto all = embedding::ListCheckpoints(*dir_ + "/on-request-ckpt");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u) << "the requested one and the final one";
  EXPECT_EQ(all->back().step, 226);

  // Asking a job that is over is refused, naming its state.
  ProcessResult late =
      RunProcess({BinPath("dlrmctl"), "--coordinator", address, "checkpoint", "job-1"}, *dir_,
                 "dlrmctl-checkpoint-late", absl::Seconds(30));
  EXPECT_NE(late.exit_code, 0);
}

// checkpoint.every_seconds in a cluster job: rank 0 decides by its clock, every rank cuts at the
// same step.
TEST_F(RecoveryTest, TimedCheckpointsOfAClusterJob) {
  ProcessResult run = RunProcess(LocalArgs("timed", "every_seconds: 0.5, keep_last: 20"), *dir_,
                                 "timed", absl::Seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto all = embedding::ListCheckpoints(*dir_ + "/timed-ckpt");
  ASSERT_TRUE(all.ok());
  ASSERT_GE(all->size(), 2u) << "a timed one besides the final one";
  EXPECT_EQ(all->back().step, 226);
  for (size_t i = 0; i + 1 < all->size(); ++i) {
    EXPECT_EQ((*all)[i].step % 50, 0) << "timed checkpoints are cut at decision boundaries";
  }
}

}  // namespace
}  // namespace dlrm::testing
