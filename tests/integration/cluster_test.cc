// Multi-process tests of the service: the real `dlrm` and `dlrmctl` binaries on loopback ports.
// One generated data set (20k samples, tables capped at 1000 rows) and one tiny model are shared
// by every test; `dlrm train` on them is the reference.
//
// Tolerances: with 1 parameter server and 1 worker and staleness 0 the distributed run computes
// the same floating-point operations in the same order as `dlrm train` (the optimizer runs on the
// server with the same kernels, the dense model is seeded the same), so AUC and logloss must agree
// to 1e-5 (they are printed to 1e-4; in practice they are bitwise equal). With 2 workers each takes
// half of every global batch and the gradients are averaged: the same model up to the order of
// sums, stale reads and hot rows, so AUC within 0.003.
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster_fixture.h"
#include "tests/integration/process_util.h"
#include "worker/checkpoint.h"
#include "worker/train_report.h"

namespace dlrm::testing {
namespace {

constexpr double kSameModelTolerance = 1e-5;
// Two workers train on the batches of dlrm train (issue 12: within 0.003).
constexpr double kSameBatchesAucTolerance = 0.003;
// With row-wise Adagrad the servers (and the hot rows' replicas) apply each worker's push as a
// step of its own, as they must to stay deterministic per push; dlrm train takes one step with
// the whole batch's gradient. Two Adagrad steps on half-batch gradients are not one on their sum,
// and on this data that moves the AUC one way: 0.0011-0.0047 above dlrm train's in 19 runs
// of the default-optimizers job (with and without hot rows, the synchronous hot exchange,
// staleness 0 and 1, four pairs of learning rates; 2026-12-03). With SGD both are the same step
// (kSameBatchesAucTolerance holds).
constexpr double kPerWorkerStepsAucTolerance = 0.006;
// training.target_auc of the job-target specs: reached about halfway through their first epoch.
constexpr double kTarget = 0.7;

// hot_budget 0: every row on the parameter servers (what the exact-match tests compare).
JobSpec Job(int epochs, int staleness, const std::string& name,
            const std::string& hot = "hot_budget: 0") {
  return {.name = name,
          .model = "pooling: sum",
          .training = absl::StrCat("batch_size: 256, epochs: ", epochs,
                                   ", seed: 11, staleness: ", staleness, ", ", hot)};
}

class ClusterTest : public LocalClusterTest {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(MakeDataDir("dlrm-integration", 20000, 1000, 7));
    WriteFile(Dir() + "/job.yaml", JobYaml(Job(1, 0, "it-job")));
    // The same job, evaluated every 10 steps while it trains.
    WriteFile(Dir() + "/job-eval.yaml",
              JobYaml(Job(1, 0, "it-job", "hot_budget: 0, eval_every_steps: 10")));
    // Two workers replicate the hottest rows (about a tenth) and re-check them every 20 steps.
    WriteFile(Dir() + "/job3.yaml",
              JobYaml(Job(3, 1, "it-job3", "hot_budget: 64KiB, hot_refresh_steps: 20")));
    JobSpec sgd = Job(3, 0, "it-job3-sgd");
    sgd.dense_optimizer = "type: sgd, learning_rate: 0.3";
    sgd.sparse_optimizer = "type: sgd, learning_rate: 1.5";
    WriteFile(Dir() + "/job3-sgd.yaml", JobYaml(sgd));
    WriteFile(Dir() + "/long.yaml", JobYaml(Job(200, 1, "it-long")));
    // Trained to a target AUC, evaluated every 5 of its 142 steps (2 epochs of 71; AUC about 0.71
    // at step 30).
    JobSpec target = Job(2, 1, "it-target",
                         absl::StrCat("hot_budget: 0, eval_every_steps: 5, target_auc: ", kTarget));
    target.checkpoint = absl::StrCat("dir: ", Dir(), "/target-ckpt");
    WriteFile(Dir() + "/job-target.yaml", JobYaml(target));
    target.checkpoint = absl::StrCat("dir: ", Dir(), "/target-plain-ckpt");
    WriteFile(Dir() + "/job-target-plain.yaml", JobYaml(target));
    // A job that may not recover: the first lost member fails it.
    WriteFile(Dir() + "/long-no-recovery.yaml",
              JobYaml(Job(200, 1, "it-long", "hot_budget: 0, max_recoveries: 0")));
    ProcessResult train = RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml",
                                      "--metrics-out", Dir() + "/reference.json", "--no-progress"},
                                     Dir(), "train", absl::Seconds(120));
    ASSERT_EQ(train.exit_code, 0) << train.err;
    auto report = worker::TrainReportFromJson(ReadFileOrEmpty(Dir() + "/reference.json"));
    ASSERT_TRUE(report.ok()) << report.status();
    reference_ = new worker::TrainReport(*report);
    ASSERT_GT(reference_->auc, 0.6) << "the reference did not learn; the comparison would be weak";
  }

  static void TearDownTestSuite() {
    LocalClusterTest::TearDownTestSuite();
    delete reference_;
    reference_ = nullptr;
  }

  static void WriteFile(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
  }

  static const worker::TrainReport& Reference() { return *reference_; }

  // `dlrm local` on a job spec; returns its result and, when it wrote one, its report.
  ProcessResult RunLocal(const std::string& name, std::vector<std::string> extra,
                         worker::TrainReport* report, const std::string& config = "job.yaml",
                         absl::Duration timeout = absl::Seconds(120)) {
    const std::string metrics = absl::StrCat(Dir(), "/", name, ".json");
    std::vector<std::string> argv = {BinPath("dlrm"), "local", "--config",     Dir() + "/" + config,
                                     "--metrics-out", metrics, "--no-progress"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcessResult result = RunProcess(argv, Dir(), name, timeout);
    if (report != nullptr && result.exit_code == 0) {
      auto parsed = worker::TrainReportFromJson(ReadFileOrEmpty(metrics));
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      if (parsed.ok()) *report = *parsed;
    }
    return result;
  }

  // Waits until `p`'s stderr (or stdout) contains `text`; false after `timeout` or if p exits.
  static bool WaitForOutput(Process& p, const std::string& text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (absl::StrContains(p.Stderr(), text) || absl::StrContains(p.Stdout(), text)) return true;
      if (!p.Running()) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  static std::vector<pid_t> ChildrenMatching(pid_t parent, const std::string& role) {
    std::vector<pid_t> out;
    for (pid_t pid : ChildrenOf(parent)) {
      if (absl::StrContains(CommandLine(pid), absl::StrCat(" ", role, " "))) out.push_back(pid);
    }
    return out;
  }

  static worker::TrainReport* reference_;
};

worker::TrainReport* ClusterTest::reference_ = nullptr;

TEST_F(ClusterTest, OnePsOneWorkerTrainsTheSameModelAsDlrmTrain) {
  worker::TrainReport report;
  ProcessResult r = RunLocal("local-1x1", {"--ps", "1", "--workers", "1"}, &report);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(report.steps, Reference().steps);
  EXPECT_EQ(report.train_samples, Reference().train_samples);
  EXPECT_EQ(report.eval_samples, Reference().eval_samples);
  EXPECT_NEAR(report.auc, Reference().auc, kSameModelTolerance);
  EXPECT_NEAR(report.logloss, Reference().logloss, kSameModelTolerance);
  EXPECT_NEAR(report.accuracy, Reference().accuracy, kSameModelTolerance);
  // The same summary line as dlrm train.
  EXPECT_TRUE(absl::StrContains(r.out, "AUC ")) << r.out;
}

// training.eval_every_steps: rank 0 evaluates at every 10th step boundary (logged, reported with
// its progress, exported as dlrm_eval_auc), and evaluating changes nothing in the model: the
// final metrics are those of dlrm train on the same spec.
TEST_F(ClusterTest, PeriodicEvaluationIsReportedAndLeavesTheModelAlone) {
  worker::TrainReport report;
  const std::string data_dir = Dir() + "/eval-cluster";
  ProcessResult r = RunLocal("local-eval", {"--ps", "1", "--workers", "1", "--data-dir", data_dir},
                             &report, "job-eval.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(report.steps, Reference().steps);
  EXPECT_NEAR(report.auc, Reference().auc, kSameModelTolerance);
  EXPECT_NEAR(report.logloss, Reference().logloss, kSameModelTolerance);
  const std::string log = ReadFileOrEmpty(data_dir + "/logs/worker-0.log");
  int evaluations = 0;
  for (size_t at = log.find("eval AUC"); at != std::string::npos;
       at = log.find("eval AUC", at + 1)) {
    ++evaluations;
  }
  // Every 10th step before the last (a boundary at the last step came before the final
  // evaluation too).
  EXPECT_EQ(evaluations, static_cast<int>((Reference().steps - 1) / 10)) << log;
  EXPECT_TRUE(absl::StrContains(log, "step 10: eval AUC")) << log;
  // The evaluations' lookups are no training traffic: a sample's lookups stay as many bytes as
  // its pushes (ids one way, rows or gradients of the same width the other; no hot rows here).
  // They were counted in before, 1.5x the pushes (audit).
  const auto& n = report.network;
  ASSERT_TRUE(n.contains("network_ps_lookup_bytes_per_sample"));
  const double push = n.at("network_ps_push_bytes_per_sample");
  EXPECT_GT(push, 0);
  EXPECT_NEAR(n.at("network_ps_lookup_bytes_per_sample"), push, 0.05 * push);
}

// The step at which a worker's log says training stopped for training.target_auc ("... at step 30
// of 142: training stops" on rank 0, "... at step 30: training stops" on the others); -1 if none.
int64_t TargetStopStep(const std::string& log) {
  const size_t end = log.find(": training stops");
  if (end == std::string::npos) return -1;
  const size_t at = log.rfind(" at step ", end);
  if (at == std::string::npos) return -1;
  std::string step = log.substr(at + 9, end - at - 9);
  step = step.substr(0, step.find(' '));  // before " of 142"
  int64_t n = -1;
  return absl::SimpleAtoi(step, &n) ? n : -1;
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The newest checkpoint in `folder` is of `step`, in the first epoch: each of the 2 ranks read
// one batch of 128 per step, and no rewind.
void ExpectCheckpointAt(const std::string& folder, int64_t step) {
  auto checkpoint = worker::FindValidCheckpoint(folder);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const embedding::CheckpointManifest& m = checkpoint->chain.back();
  EXPECT_EQ(m.step, step);
  ASSERT_EQ(m.ranks.size(), 2u);
  for (const embedding::RankPosition& p : m.ranks) {
    EXPECT_EQ(p.epoch, 0) << "rank " << p.rank;
    EXPECT_EQ(p.batches, step) << "rank " << p.rank;
  }
}

// The step at which both workers of the cluster in `data_dir` stopped for training.target_auc,
// checked in their logs: rank 0 says that its evaluation of that step reached kTarget, rank 1 that
// it stops there too, and no evaluation follows (the second epoch neither trains nor evaluates).
int64_t ExpectStoppedTogether(const std::string& data_dir) {
  const std::string log0 = ReadFileOrEmpty(data_dir + "/logs/worker-0.log");
  const std::string log1 = ReadFileOrEmpty(data_dir + "/logs/worker-1.log");
  // Ranks are given to the workers in either order: the line of rank 0 is in one of the logs.
  const std::string& rank0_log = absl::StrContains(log0, " rank 0: reached") ? log0 : log1;
  EXPECT_TRUE(absl::StrContains(
      rank0_log, absl::StrCat(" rank 0: reached target AUC ", kTarget, " (eval AUC ")))
      << log0 << log1;
  const int64_t step = TargetStopStep(log0);
  EXPECT_GT(step, 0) << log0;
  EXPECT_EQ(step % 5, 0) << "not a step of a periodic evaluation";
  EXPECT_EQ(TargetStopStep(log1), step) << log1;
  EXPECT_TRUE(absl::StrContains(rank0_log, absl::StrCat(" at step ", step, " of 142:")))
      << rank0_log;
  EXPECT_EQ(Occurrences(rank0_log, absl::StrCat(" step ", step, ": eval AUC")), 1) << rank0_log;
  EXPECT_EQ(Occurrences(rank0_log, ": eval AUC"), step / 5) << rank0_log;
  return step;
}

// training.target_auc (MLPerf's train to target quality): rank 0's periodic evaluation reaches
// the target, its verdict goes to every rank with the allreduce that ends the evaluation, and
// both workers stop at that step, as max_steps would stop them: the final checkpoint is of that
// step, the final evaluation and report follow, and the job SUCCEEDED with nothing amiss.
TEST_F(ClusterTest, TwoWorkersStopTogetherAtTheTargetAuc) {
  const std::string data_dir = Dir() + "/target-cluster";
  const std::string metrics = Dir() + "/local-target.json";
  Process local(
      {BinPath("dlrm"), "local", "--config", Dir() + "/job-target.yaml", "--ps", "2", "--workers",
       "2", "--data-dir", data_dir, "--metrics-out", metrics, "--keep-running", "--no-progress"},
      Dir(), "local-target");
  WaitForKeptRunning(local, absl::Seconds(120));
  ASSERT_FALSE(address_.empty()) << local.Stdout() << local.Stderr();
  auto report = worker::TrainReportFromJson(ReadFileOrEmpty(metrics));
  ASSERT_TRUE(report.ok()) << report.status() << local.Stderr();
  const int64_t step = ExpectStoppedTogether(data_dir);
  EXPECT_EQ(report->steps, step);
  EXPECT_LT(report->steps, 71);  // within the first epoch of 18000 samples in batches of 256
  EXPECT_EQ(report->train_samples, step * 256);
  EXPECT_GT(report->auc, kTarget - 0.01);  // the final evaluation, of the model of that step
  EXPECT_EQ(report->target_auc, kTarget);
  EXPECT_EQ(report->reached_target_step, step);
  ExpectCheckpointAt(Dir() + "/target-ckpt", step);

  // The coordinator has the job SUCCEEDED at that step, saying why it ended there.
  const std::string err = local.Stderr();
  const size_t submitted = err.find("submitted job ");
  ASSERT_NE(submitted, std::string::npos) << err;
  const std::string job_id =
      err.substr(submitted + 14, err.find(' ', submitted + 14) - submitted - 14);
  ProcessResult status = RunProcess(
      {BinPath("dlrmctl"), "--coordinator", address_, "--tls-dir", tls_dir_, "status", job_id},
      Dir(), "dlrmctl-status-target", absl::Seconds(30));
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "SUCCEEDED")) << status.out;
  const size_t steps_line = status.out.find("\nsteps:");
  ASSERT_NE(steps_line, std::string::npos) << status.out;
  EXPECT_EQ(absl::StripAsciiWhitespace(status.out.substr(
                steps_line + 7, status.out.find('\n', steps_line + 1) - steps_line - 7)),
            absl::StrCat(step))
      << status.out;
  EXPECT_TRUE(absl::StrContains(status.out,
                                absl::StrCat("reached target AUC ", kTarget, " at step ", step)))
      << status.out;
  EXPECT_FALSE(absl::StrContains(absl::AsciiStrToLower(status.out + status.err), "warn"))
      << status.out << status.err;

  local.Signal(SIGINT);
  ProcessResult stopped = local.Wait(absl::Seconds(30));
  EXPECT_FALSE(stopped.timed_out);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
}

// The same with the workers' plain Trainer::Step loop (--no-pipeline), which leaves its loop at
// the evaluation itself.
TEST_F(ClusterTest, TwoWorkersStopTogetherAtTheTargetAucWithoutThePipeline) {
  const std::string data_dir = Dir() + "/target-plain-cluster";
  worker::TrainReport report;
  ProcessResult r =
      RunLocal("local-target-plain",
               {"--ps", "2", "--workers", "2", "--no-pipeline", "--data-dir", data_dir}, &report,
               "job-target-plain.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t step = ExpectStoppedTogether(data_dir);
  EXPECT_EQ(report.steps, step);
  EXPECT_LT(report.steps, 71);  // within the first epoch
  ExpectCheckpointAt(Dir() + "/target-plain-ckpt", step);
}

// training.batch_size is the global batch: two workers take a half of every batch of dlrm train
// (interleaved shards) and average their gradients, so they train the model one process trains.
// With the default optimizers the job runs as users run it: reads up to one step stale (when they
// are exactly one step stale depends on timing) and hot rows (64 KiB, re-checked every 20 steps,
// read one step stale too), within kPerWorkerStepsAucTolerance. With plain SGD, where a per-worker
// batch shows at once (it doubled the effective batch: AUC 0.762 -> 0.715 on the demo data before
// the change), staleness 0 and no hot rows make it the same computation up to the order of float
// sums: the servers apply the two workers' pushes of a row in either order, so losses differ in the
// last bit from the first steps on. The learning rates keep training out of the regime that
// amplifies that: with dense 0.5 and sparse 2 the final loss of a step moved from 0.545 to 0.470
// between runs and the AUC by up to 0.0037 (a flaky failure); with 0.3 and 1.5, 16 runs under load
// gave the AUC of dlrm train to the last digit.
void ExpectTwoWorkersMatchDlrmTrain(const std::string& dir, const std::string& config,
                                    const std::string& name,
                                    double auc_tolerance = kSameBatchesAucTolerance) {
  const std::string reference_json = absl::StrCat(dir, "/", name, "-reference.json");
  ProcessResult train = RunProcess({BinPath("dlrm"), "train", "--config", dir + "/" + config,
                                    "--metrics-out", reference_json, "--no-progress"},
                                   dir, name + "-train", absl::Seconds(120));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  auto reference = worker::TrainReportFromJson(ReadFileOrEmpty(reference_json));
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_GT(reference->auc, 0.7) << "the reference did not learn; the comparison would be weak";

  const std::string local_json = absl::StrCat(dir, "/", name, "-2x2.json");
  ProcessResult local =
      RunProcess({BinPath("dlrm"), "local", "--config", dir + "/" + config, "--metrics-out",
                  local_json, "--no-progress", "--ps", "2", "--workers", "2"},
                 dir, name + "-2x2", absl::Seconds(120));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  auto report = worker::TrainReportFromJson(ReadFileOrEmpty(local_json));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NEAR(report->auc, reference->auc, auc_tolerance)
      << "dlrm train " << reference->auc << ", 2 PS + 2 workers " << report->auc;
  // The same steps of the same global batch (each rank's shard drops at most one record per
  // epoch so that both take the same number of steps).
  EXPECT_EQ(report->steps, reference->steps);
  EXPECT_GE(report->train_samples, reference->train_samples - 3);
  EXPECT_LE(report->train_samples, reference->train_samples);

  // Bytes on the network, counted where they were sent (worker/network_bytes.h): the total is
  // its parts; the PS and the dense allreduce carried something; the hot rows' exchange only
  // with hot rows; and the kernel's TCP counts, which add framing and what the collectives
  // received, are at least what was counted.
  const auto& n = report->network;
  ASSERT_TRUE(n.contains("network_bytes_per_sample")) << ReadFileOrEmpty(local_json);
  double parts = 0;
  for (const char* part :
       {"ps_lookup", "ps_push", "hot_sync", "hot_migration", "dense_allreduce", "control"}) {
    const std::string key = absl::StrCat("network_", part, "_bytes_per_sample");
    ASSERT_TRUE(n.contains(key)) << key;
    EXPECT_GE(n.at(key), 0) << key;
    parts += n.at(key);
  }
  EXPECT_NEAR(n.at("network_bytes_per_sample"), parts, 1e-6 * parts);
  EXPECT_GT(n.at("network_ps_lookup_bytes_per_sample"), 0);
  EXPECT_GT(n.at("network_ps_push_bytes_per_sample"), 0);
  EXPECT_GT(n.at("network_dense_allreduce_bytes_per_sample"), 0);
  EXPECT_EQ(n.at("network_hot_sync_bytes_per_sample") > 0, report->hot_rows > 0);
  EXPECT_NEAR(report->ps_bytes_per_sample,
              n.at("network_ps_lookup_bytes_per_sample") + n.at("network_ps_push_bytes_per_sample"),
              0.2 * report->ps_bytes_per_sample);
  ASSERT_TRUE(n.contains("tcp_sent_bytes_per_sample"));
  EXPECT_GE(n.at("tcp_sent_bytes_per_sample") + n.at("tcp_received_bytes_per_sample"),
            n.at("network_bytes_per_sample"));
}

TEST_F(ClusterTest, TwoWorkersTrainTheModelOfDlrmTrain) {
  ExpectTwoWorkersMatchDlrmTrain(Dir(), "job3.yaml", "default-optimizers",
                                 kPerWorkerStepsAucTolerance);
}

TEST_F(ClusterTest, TwoWorkersTrainTheModelOfDlrmTrainWithSgd) {
  ExpectTwoWorkersMatchDlrmTrain(Dir(), "job3-sgd.yaml", "sgd");
}

// DLRM-DCNv2 on multi-hot data (MLPerf DLRMv2's bag sizes, made by `dlrm gen-data --multi-hot`):
// the bags go through the parameter servers, the pipeline and the hot rows, and the cross layers
// through the dense allreduce, to the model dlrm train makes.
TEST_F(ClusterTest, TwoWorkersTrainDcnV2OnMultiHotDataLikeDlrmTrain) {
  ProcessResult gen =
      RunProcess({BinPath("dlrm"), "gen-data", "--out", Dir() + "/train-mh.bin", "--rows", "20000",
                  "--max-rows", "1000", "--seed", "7", "--multi-hot", "mlperf"},
                 Dir(), "gen-multi-hot", absl::Seconds(60));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  // Staleness 0, a fixed hot set and sparse SGD: the same computation as dlrm train's up to the
  // order of float sums (hot-set refreshes are covered by the one-hot tests above). With
  // row-wise Adagrad the order in which the servers apply the two workers' pushes changes the
  // steps, and on multi-hot data, where most rows get pushes from both workers every step, that
  // alone moved the AUC by up to 0.0045 from run to run.
  JobSpec dcn = Job(3, 0, "it-dcn-mh", "hot_budget: 64KiB, hot_refresh_steps: 0");
  dcn.model = "pooling: sum, interaction: dcnv2, cross_layers: 2, low_rank: 16";
  dcn.sparse_optimizer = "type: sgd, learning_rate: 0.5";
  dcn.train = "[train-mh.bin]";
  WriteFile(Dir() + "/job-dcn-mh.yaml", JobYaml(dcn));
  ExpectTwoWorkersMatchDlrmTrain(Dir(), "job-dcn-mh.yaml", "dcn-multi-hot");
}

// The parameter servers' tier counters that dlrm local prints after a job.
struct TierCounters {
  int64_t memory_rows = -1;
  int64_t rows_created = -1;  // first uses: no tier had them
  int64_t rocksdb_reads = -1;
  int64_t rocksdb_writes = -1;
};

TierCounters ParseTierCounters(const std::string& err) {
  TierCounters c;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    // "parameter servers: N rows in memory, C rows created on first use; RocksDB tier: R rows
    // read, W rows written"
    if (!absl::ConsumePrefix(&line, "parameter servers: ")) continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() < 17) continue;
    (void)absl::SimpleAtoi(words[0], &c.memory_rows);
    (void)absl::SimpleAtoi(words[4], &c.rows_created);
    (void)absl::SimpleAtoi(words[12], &c.rocksdb_reads);
    (void)absl::SimpleAtoi(words[15], &c.rocksdb_writes);
  }
  return c;
}

TEST_F(ClusterTest, RowsSpilledToRocksDbComeBackWithTheirValues) {
  // Without a tight budget every row stays in memory; the RocksDB tier is only probed once per
  // new row (a miss).
  worker::TrainReport roomy_report;
  ProcessResult roomy = RunLocal("local-roomy", {}, &roomy_report);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  const TierCounters all_in_memory = ParseTierCounters(roomy.err);
  ASSERT_GT(all_in_memory.memory_rows, 5000) << roomy.err;
  EXPECT_EQ(all_in_memory.rocksdb_writes, 0) << roomy.err;
  // Every row was made on its first use and stayed in memory: none was read from RocksDB.
  EXPECT_EQ(all_in_memory.rows_created, all_in_memory.memory_rows) << roomy.err;
  EXPECT_EQ(all_in_memory.rocksdb_reads, 0) << roomy.err;

  // A 32 KiB memory tier holds a few hundred of those rows (8 floats + optimizer state each): the
  // rest are evicted to RocksDB and read back when looked up again. A value lost or mixed up on
  // the way would change the model, so the run must still match dlrm train.
  worker::TrainReport report;
  ProcessResult r =
      RunLocal("local-spill", {"--ps", "1", "--workers", "1", "--memory-budget", "32KiB"}, &report);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(report.auc, Reference().auc, kSameModelTolerance);
  EXPECT_NEAR(report.logloss, Reference().logloss, kSameModelTolerance);
  const TierCounters spilled = ParseTierCounters(r.err);
  ASSERT_GE(spilled.memory_rows, 0) << "no tier counters in: " << r.err;
  EXPECT_LT(spilled.memory_rows * 10, all_in_memory.memory_rows) << r.err;
  EXPECT_GT(spilled.rocksdb_writes, all_in_memory.memory_rows / 2) << r.err;
  // Rows that came back from disk.
  EXPECT_GT(spilled.rocksdb_reads, 1000) << r.err;
}

TEST_F(ClusterTest, DlrmctlSubmitsASecondJobToAKeepRunningCluster) {
  Process local({BinPath("dlrm"), "local", "--config", Dir() + "/job.yaml", "--keep-running",
                 "--no-progress"},
                Dir(), "local-keep");
  WaitForKeptRunning(local, absl::Seconds(120));
  ASSERT_FALSE(address_.empty()) << local.Stdout() << local.Stderr();
  // dlrm local runs mutual TLS: the admin certificate for dlrmctl.
  ASSERT_FALSE(tls_dir_.empty()) << local.Stdout();
  const std::vector<pid_t> children = ChildrenOf(local.pid());
  EXPECT_EQ(children.size(), 3u);  // coordinator, ps-0, worker-0

  ProcessResult second = RunProcess({BinPath("dlrmctl"), "--coordinator", address_, "--tls-dir",
                                     tls_dir_, "submit", "-f", Dir() + "/job.yaml", "--wait"},
                                    Dir(), "dlrmctl-submit", absl::Seconds(120));
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;

  local.Signal(SIGINT);
  ProcessResult stopped = local.Wait(absl::Seconds(30));
  EXPECT_FALSE(stopped.timed_out);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;  // the first job's result
  for (pid_t pid : children) EXPECT_FALSE(ProcessAlive(pid)) << CommandLine(pid);
}

// A job with max_recoveries 0 fails at its first lost member (tests/integration/recovery_test.cc
// has the jobs that recover).
TEST_F(ClusterTest, KillingAWorkerOfAJobWithoutRecoveriesFailsItPromptly) {
  Process local({BinPath("dlrm"), "local", "--config", Dir() + "/long-no-recovery.yaml", "--ps",
                 "1", "--workers", "2", "--lease-ttl", "1s", "--no-progress"},
                Dir(), "local-kill");
  ASSERT_TRUE(WaitForOutput(local, "submitted job", absl::Seconds(120))) << local.Stderr();
  absl::SleepFor(absl::Seconds(2));  // let the job start training
  std::vector<pid_t> workers = ChildrenMatching(local.pid(), "worker");
  ASSERT_EQ(workers.size(), 2u) << local.Stderr();
  const std::vector<pid_t> children = ChildrenOf(local.pid());
  ASSERT_EQ(kill(workers[1], SIGKILL), 0);
  ProcessResult r = local.Wait(absl::Seconds(40));
  EXPECT_FALSE(r.timed_out) << "dlrm local hung after a worker died";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "FAILED")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "no recovery left")) << r.err;
  for (pid_t pid : children) EXPECT_FALSE(ProcessAlive(pid)) << CommandLine(pid);
}

TEST_F(ClusterTest, CtrlCLeavesNoChildProcesses) {
  Process local({BinPath("dlrm"), "local", "--config", Dir() + "/long.yaml", "--ps", "2",
                 "--workers", "1", "--no-progress"},
                Dir(), "local-sigint");
  ASSERT_TRUE(WaitForOutput(local, "submitted job", absl::Seconds(120))) << local.Stderr();
  absl::SleepFor(absl::Seconds(1));
  const std::vector<pid_t> children = ChildrenOf(local.pid());
  ASSERT_EQ(children.size(), 4u);  // coordinator, 2 parameter servers, 1 worker
  local.Signal(SIGINT);
  ProcessResult r = local.Wait(absl::Seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  for (pid_t pid : children) EXPECT_FALSE(ProcessAlive(pid)) << CommandLine(pid);
}

TEST_F(ClusterTest, AKilledDlrmLocalLeavesNoOrphans) {
  // SIGKILL cannot be caught: the children must notice on their own (PR_SET_PDEATHSIG).
  Process local({BinPath("dlrm"), "local", "--config", Dir() + "/long.yaml", "--no-progress"},
                Dir(), "local-sigkill");
  ASSERT_TRUE(WaitForOutput(local, "submitted job", absl::Seconds(120))) << local.Stderr();
  const std::vector<pid_t> children = ChildrenOf(local.pid());
  ASSERT_EQ(children.size(), 3u);
  local.Signal(SIGKILL);
  local.Wait(absl::Seconds(10));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::vector<pid_t> alive = children;
  while (!alive.empty() && absl::Now() < deadline) {
    std::erase_if(alive, [](pid_t pid) { return !ProcessAlive(pid); });
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (pid_t pid : alive) {
    ADD_FAILURE() << "orphan left running: " << CommandLine(pid);
    kill(pid, SIGKILL);
  }
}

}  // namespace
}  // namespace dlrm::testing
