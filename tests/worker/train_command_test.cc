// What the user of `dlrm train` sees of its files: the spec's checkpoint.resume_from is honoured,
// --metrics-out and --report are checked before training, an interrupted run keeps its steps, a
// run without eval data says so, and training.target_auc stops a run at the evaluation reaching
// it. The fixture (a small model trained for the suite) is train_command_io_fixture.h.
#include "worker/train_command.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "tests/worker/train_command_io_fixture.h"
#include "worker/checkpoint.h"
#include "worker/train_report.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::WriteFile;

// --- train: checkpoint.resume_from --------------------------------------------------------------

TEST_F(TrainCommandIoTest, TrainResumesFromTheSpecsResumeFrom) {
  common::JobSpec spec = Job(Data(), tmp_.File("ck2"));
  spec.max_steps = 4;
  spec.checkpoint.resume_from = dir_->File("ck");  // the suite's model, trained 2 steps
  auto report = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 4);
  // Steps 3 and 4 are the second epoch, all 480 training records (600 less 20% held out); from
  // step 0 it would have been twice that.
  EXPECT_EQ(report->train_samples, 480) << "trained from step 0, not from 2";

  // --resume naming the same checkpoint (another spelling) agrees; another one does not.
  TrainRunOptions same = Quiet();
  same.resume_from = dir_->File("./ck");
  spec.checkpoint.dir = tmp_.File("ck3");
  report = TrainInProcess(spec, same);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->train_samples, 480);
  TrainRunOptions other = Quiet();
  other.resume_from = tmp_.File("ck2");
  report = TrainInProcess(spec, other);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("--resume " + tmp_.File("ck2") +
                        " and the job spec's checkpoint.resume_from " + dir_->File("ck")));

  // A resume_from that is not a checkpoint is an error, not a fresh start.
  spec.checkpoint.resume_from = tmp_.File("nope");
  report = TrainInProcess(spec, Quiet());
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("checkpoint.resume_from: " + tmp_.File("nope")));
}

// The YAML's resume_from is relative to the spec's folder, like its other paths.
TEST_F(TrainCommandIoTest, TrainCommandResolvesResumeFromAgainstTheSpec) {
  fs::copy(dir_->File("ck"), tmp_.File("old"), fs::copy_options::recursive);
  TrainCommandOptions o;
  o.config_path =
      Config("epochs: 2, max_steps: 3", "eval_fraction: 0.2", "dir: new, resume_from: old");
  o.run = Quiet();
  auto report = RunTrainCommand(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 3);
  EXPECT_EQ(report->train_samples, 256) << "one step after the 2 of the checkpoint";
}

// A job reads its data more than once (a count for the eval split, once per epoch): a pipe as
// data.train or data.eval waited for good on its second open (or, as /dev/stdin, trained a third
// of the epochs and exited 0), and a folder failed as a read error. Both are refused before
// training, naming the key and the path.
TEST_F(TrainCommandIoTest, DataThatIsNotARegularFileIsRefusedUpFront) {
  const std::string fifo = tmp_.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  common::JobSpec spec = Job(fifo, tmp_.File("ck-fifo"));
  auto report = TrainInProcess(spec, Quiet());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("data.train: " + fifo + " is not a regular file (a pipe or a device)"));

  spec = Job(Data(), tmp_.File("ck-fifo"));
  spec.eval_paths = {fifo};
  report = TrainInProcess(spec, Quiet());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("data.eval: " + fifo));

  spec = Job(tmp_.path(), tmp_.File("ck-fifo"));
  report = TrainInProcess(spec, Quiet());
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("data.train: " + tmp_.path() + " is a folder"));
}

// --- train: --metrics-out and a run without eval data --------------------------------------------

class TrainCommandMetricsTest : public TrainCommandIoTest {
 protected:
  // Two steps on the suite's data, checkpoints in "ck".
  std::string Config(double eval_fraction) {
    return TrainCommandIoTest::Config("epochs: 1, max_steps: 2",
                                      absl::StrCat("eval_fraction: ", eval_fraction), "dir: ck");
  }
  TrainCommandOptions Options(const std::string& config, const std::string& metrics_out) {
    TrainCommandOptions o;
    o.config_path = config;
    o.metrics_out = metrics_out;
    o.run = Quiet();
    return o;
  }
};

TEST_F(TrainCommandMetricsTest, MetricsOutIsCheckedBeforeTraining) {
  const std::string config = Config(0.2);
  const std::string nowhere = tmp_.File("nodir/m.json");
  auto report = RunTrainCommand(Options(config, nowhere));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("--metrics-out: cannot write '" + nowhere + "'"));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr(std::strerror(ENOENT)));
  EXPECT_FALSE(fs::exists(tmp_.File("ck"))) << "trained before --metrics-out was checked";

  report = RunTrainCommand(Options(config, config));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_FALSE(fs::exists(tmp_.File("ck")));

  const std::string metrics = tmp_.File("m.json");
  report = RunTrainCommand(Options(config, metrics));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(ReadFile(metrics), HasSubstr("\"steps\":2"));
  EXPECT_FALSE(fs::exists(metrics + ".tmp"));
}

// `dlrm train --report` wrote its page over whatever the path named: `--report job.yaml` replaced
// the spec and `--report data.tsv` the training data, after training on it; the page also replaced
// --metrics-out's JSON when both named one file. Each is refused before training, naming both.
TEST_F(TrainCommandMetricsTest, ReportIsCheckedAgainstTheInputsAndMetricsOutBeforeTraining) {
  const std::string config = Config(0.2);
  const std::string spec_text = ReadFile(config);
  const std::string data = tmp_.File("data.tsv");
  const std::string data_text = ReadFile(data);
  for (const std::string& input : {config, data}) {
    TrainCommandOptions o = Options(config, "");
    o.report = input;
    auto report = RunTrainCommand(o);
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
    EXPECT_THAT(std::string(report.status().message()),
                HasSubstr("--report: '" + input + "' is the input file"));
  }
  EXPECT_EQ(ReadFile(config), spec_text);
  EXPECT_EQ(ReadFile(data), data_text);
  EXPECT_FALSE(fs::exists(tmp_.File("ck"))) << "trained before --report was checked";

  const std::string both = tmp_.File("out.json");
  TrainCommandOptions o = Options(config, both);
  o.report = tmp_.File("./out.json");
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("are the same file"));
  EXPECT_FALSE(fs::exists(both));
  EXPECT_FALSE(fs::exists(tmp_.File("ck")));
}

// --report was written to "<path>.tmp" and renamed over the path, whatever the path was: a device
// or a FIFO became a regular file (as root, /dev/full was replaced), a symlink was replaced
// instead of its target, and the check before training truncated and removed a "<path>.tmp" that
// was the run's eval data (audit). The page is now written as every output is (OutputFile).
TEST_F(TrainCommandMetricsTest, TheReportIsWrittenAsEveryOutputIs) {
  const std::string config =
      TrainCommandIoTest::Config("epochs: 1, max_steps: 2", "eval_fraction: 0.2", "");
  WriteFile(tmp_.File("target.html"), "old");
  fs::create_symlink("target.html", tmp_.File("link.html"));
  TrainCommandOptions o = Options(config, "");
  o.report = tmp_.File("link.html");
  auto report = RunTrainCommand(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(fs::is_symlink(o.report)) << "the link was replaced by a file";
  EXPECT_THAT(ReadFile(tmp_.File("target.html")), HasSubstr("<html"));
  EXPECT_FALSE(fs::exists(tmp_.File("target.html.tmp")));

  // A private /dev/null (mknod needs root): written in place, still a device.
  const std::string null = tmp_.File("null");
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    o.report = null;
    report = RunTrainCommand(o);
    ASSERT_TRUE(report.ok()) << report.status();
    struct stat st {};
    ASSERT_EQ(::stat(null.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a file";
    EXPECT_FALSE(fs::exists(null + ".tmp"));
  }

  // The eval data is "<report>.tmp": refused before training, the data untouched.
  const std::string eval = tmp_.File("page.html.tmp");
  fs::copy_file(tmp_.File("data.tsv"), eval);
  const std::string eval_text = ReadFile(eval);
  o = Options(TrainCommandIoTest::Config("epochs: 1, max_steps: 2", "eval: page.html.tmp", ""), "");
  o.report = tmp_.File("page.html");
  report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("--report"));
  EXPECT_EQ(ReadFile(eval), eval_text);
}

// `--report` or `--metrics-out` naming a file of a checkpoint replaced it: `--resume ck --report
// ck/ckpt-N/dense.bin` trained from that checkpoint and then wrote the page over its dense.bin (the
// checkpoint was lost), and --metrics-out into the run's own checkpoint.dir replaced the final
// checkpoint's manifest. An output in a checkpoint folder the run reads or writes is refused
// before training, naming the folder, and the checkpoint stays.
TEST_F(TrainCommandMetricsTest, OutputsInACheckpointFolderAreRefused) {
  const std::string config = Config(0.2);
  ASSERT_TRUE(RunTrainCommand(Options(config, "")).ok());
  std::string dense;
  for (const auto& entry : fs::directory_iterator(tmp_.File("ck"))) {
    if (entry.is_directory()) dense = (entry.path() / "dense.bin").string();
  }
  ASSERT_TRUE(fs::exists(dense));
  const std::string kept = ReadFile(dense);
  TrainCommandOptions o = Options(config, "");
  o.run.resume_from = tmp_.File("ck");
  o.report = dense;
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("--report '" + dense + "' lies in the checkpoint folder"));
  EXPECT_EQ(ReadFile(dense), kept);

  o = Options(config, tmp_.File("ck/metrics.json"));  // the spec's checkpoint.dir
  report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("(checkpoint.dir)"));
  EXPECT_FALSE(fs::exists(tmp_.File("ck/metrics.json")));
}

// Ctrl-C on `dlrm train --report` killed the process and wrote no page, though the page is
// documented for a run that "fails or is interrupted after some steps". The command's handler sets
// `interrupted`; the run stops after its step with CANCELLED and the page of that step is written.
TEST_F(TrainCommandMetricsTest, AnInterruptedRunStopsAfterItsStepAndWritesTheReport) {
  TrainCommandOptions o = Options(Config(0.2), "");
  o.report = tmp_.File("run.html");
  std::atomic<int> interrupted{SIGINT};
  o.run.interrupted = &interrupted;
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr(absl::StrCat("interrupted (", strsignal(SIGINT), ") after step 1")));
  ASSERT_TRUE(fs::exists(o.report));
  EXPECT_THAT(ReadFile(o.report), HasSubstr("after step 1"));
  EXPECT_FALSE(fs::exists(o.report + ".tmp"));
}

// Ctrl-C on `dlrm train` with a checkpoint.dir stopped after its step but wrote no checkpoint: the
// steps since the last periodic checkpoint (all of them, without every_steps) were lost, and
// --resume could not go on from them. The interrupted run now keeps its model as a run's end does.
TEST_F(TrainCommandMetricsTest, AnInterruptedRunKeepsItsStepsAsACheckpointToResumeFrom) {
  TrainCommandOptions o = Options(Config(0.2), "");
  std::atomic<int> interrupted{SIGINT};
  o.run.interrupted = &interrupted;
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled) << report.status();
  const std::string kept = tmp_.File("ck/ckpt-000000000001");
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("after step 1; its model is checkpoint "));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("ck/ckpt-000000000001"));
  ASSERT_TRUE(fs::exists(kept + "/MANIFEST.json"));

  o.run.interrupted = nullptr;
  o.run.resume_from = tmp_.File("ck");
  report = RunTrainCommand(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 2);
  // 480 training lines in batches of 256: the resumed run trains only the second, of 224.
  EXPECT_EQ(report->train_samples, 224) << "went on from step 1";

  // Another split of the data is allowed, but said: records trained on may now be evaluated.
  TrainCommandOptions other = Options(Config(0.3), "");
  other.run.resume_from = tmp_.File("ck");
  ::testing::internal::CaptureStderr();
  report = RunTrainCommand(other);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(log, HasSubstr("was trained with data.eval_fraction 0.2, the job spec's is 0.3"));
}

// A run whose model diverges (here a sparse learning rate of 1000) stops with an error naming the
// divergence, instead of ending "successfully" with AUC 0.5 and inf/NaN parameters that eval
// and predict then used as a model; no checkpoint takes a diverged model.
TEST_F(TrainCommandIoTest, ADivergedModelStopsTrainingAndIsNeverCheckpointed) {
  common::JobSpec spec = Job(Data(), tmp_.File("diverged"));
  spec.max_steps = 40;
  spec.epochs = 20;
  spec.sparse_optimizer.type = "sgd";
  spec.sparse_optimizer.learning_rate = 1000;
  spec.checkpoint.every_steps = 1;
  auto report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok()) << "trained " << report->steps << " steps, AUC " << report->auc;
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("the model diverged"));
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(tmp_.File("diverged"))) {
    if (!entry.is_directory()) continue;
    ++checkpoints;
    const std::string bytes = ReadFile((entry.path() / "dense.bin").string());
    ASSERT_GE(bytes.size(), 40u);
    uint64_t params = 0;
    std::memcpy(&params, bytes.data() + 16, sizeof(params));
    ASSERT_GE(bytes.size(), 40 + params * sizeof(float));
    for (uint64_t i = 0; i < params; ++i) {
      float p;
      std::memcpy(&p, bytes.data() + 40 + i * sizeof(float), sizeof(p));
      ASSERT_TRUE(std::isfinite(p)) << entry.path() << " parameter " << i;
    }
  }
  EXPECT_GT(checkpoints, 0) << "diverged before the first checkpoint: the test checks nothing";

  // Without a checkpoint folder the run is refused all the same, before its evaluation.
  spec.checkpoint.dir.clear();
  spec.checkpoint.every_steps = 0;
  report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok()) << "trained " << report->steps << " steps, AUC " << report->auc;
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("the model diverged"));

  // Its loss may stay finite (a ReLU turns NaN into 0): the run went on to its end on a model of
  // NaN parameters, evaluated at AUC 0.5 every step. Each evaluation now checks the parameters,
  // and so does every Trainer::kFiniteCheckSteps-th step.
  spec.eval_every_steps = 1;
  spec.eval_fraction = 0.2;
  report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("the model diverged"));
  int64_t stopped_at = 0;
  ASSERT_EQ(std::sscanf(std::string(report.status().message()).c_str(),
                        "evaluation after step %" SCNd64 ":", &stopped_at),
            1)
      << report.status();
  EXPECT_LT(stopped_at, spec.max_steps) << "the first evaluation after it stops the run";
  spec.eval_every_steps = 0;
  spec.max_steps = 2 * Trainer::kFiniteCheckSteps;
  spec.epochs = 1000;
  report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok());
  ASSERT_EQ(Trainer::kFiniteCheckSteps, 100);
  // "step 99 (training stopped): ... diverged", or a loss that became NaN before that.
  EXPECT_THAT(std::string(report.status().message()),
              ::testing::ContainsRegex("^step [0-9]{1,2}[ :]"))
      << "went on past the first check";
}

TEST_F(TrainCommandMetricsTest, NoEvalDataIsNotReportedAsZeros) {
  const std::string metrics = tmp_.File("m.json");
  ::testing::internal::CaptureStdout();
  auto report = RunTrainCommand(Options(Config(0), metrics));
  const std::string printed = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->eval_samples, 0);
  EXPECT_TRUE(std::isnan(report->auc));
  EXPECT_TRUE(std::isnan(report->logloss));
  EXPECT_THAT(printed, HasSubstr("AUC n/a  logloss n/a  accuracy n/a  (no eval data"));
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"auc\":null"));
  EXPECT_THAT(json, HasSubstr("\"logloss\":null"));
  EXPECT_THAT(json, HasSubstr("\"accuracy\":null"));

  // Eval files without a valid record: the same.
  common::JobSpec spec = Job(Data(), tmp_.File("ck-eval"));
  const std::string empty = tmp_.File("empty.tsv");
  WriteFile(empty, "");
  spec.eval_paths = {empty};
  auto trained = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->eval_samples, 0);
  EXPECT_TRUE(std::isnan(trained->auc));
}

// --- train: training.target_auc --------------------------------------------------------------

// MLPerf's "train to target quality": the run stops at the first periodic evaluation whose AUC
// reaches training.target_auc, as if max_steps ended it there (its final checkpoint, evaluation
// and report), and the report says at which step; a target it never reaches changes nothing.
class TrainTargetAucTest : public TrainCommandMetricsTest {
 protected:
  // 3000 generated lines (2400 to train on: 10 steps of 256 an epoch, 20 in all), evaluated every
  // 2 steps, checkpoints in "ck".
  std::string TargetConfig(const std::string& target_auc) {
    if (!fs::exists(tmp_.File("data.tsv"))) {
      EXPECT_TRUE(testing::GenerateCappedTsv(tmp_.File("data.tsv"), 3000, /*seed=*/5, 1000).ok());
    }
    return TrainCommandIoTest::Config(
        absl::StrCat("epochs: 2, eval_every_steps: 2, target_auc: ", target_auc),
        "eval_fraction: 0.2", "dir: ck");
  }
  // The step of the newest checkpoint in "ck".
  int64_t CheckpointStep() {
    auto found = FindValidCheckpoint(tmp_.File("ck"));
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? found->chain.back().step : -1;
  }
};

TEST_F(TrainTargetAucTest, StopsAtTheFirstEvaluationThatReachesTheTarget) {
  const std::string metrics = tmp_.File("m.json");
  ::testing::internal::CaptureStderr();
  auto report = RunTrainCommand(Options(TargetConfig("0.65"), metrics));
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.status() << "\n" << logged;
  // The evaluation of step 2 (AUC 0.58 on this data) did not reach it; a later one did.
  EXPECT_THAT(logged, HasSubstr("step 2: eval AUC"));
  ASSERT_GT(report->reached_target_step, 2) << logged;
  EXPECT_EQ(report->reached_target_step % 2, 0) << "not a step of a periodic evaluation";
  EXPECT_LT(report->reached_target_step, 20) << logged;
  EXPECT_EQ(report->steps, report->reached_target_step);
  EXPECT_EQ(report->train_samples, report->steps * 256);
  EXPECT_GE(report->auc, 0.65);  // the final evaluation is the one at that step
  EXPECT_DOUBLE_EQ(report->target_auc, 0.65);
  const std::string step = absl::StrCat(report->steps);
  EXPECT_THAT(logged, HasSubstr("reached target AUC 0.65 (eval AUC "));
  EXPECT_THAT(logged, HasSubstr(absl::StrCat(") at step ", step, " of 20: training stops")));
  // No evaluation after that step: the earlier ones did not reach the target.
  EXPECT_THAT(logged,
              ::testing::Not(HasSubstr(absl::StrCat("step ", report->steps + 2, ": eval AUC"))));
  // The trained model is checkpointed at that step, as at the end of max_steps.
  EXPECT_EQ(CheckpointStep(), report->steps);
  // --metrics-out says it, and reads back.
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"target_auc\":0.65"));
  EXPECT_THAT(json, HasSubstr(absl::StrCat("\"reached_target_step\":", step)));
  auto read = TrainReportFromJson(json);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->reached_target_step, report->steps);
  EXPECT_DOUBLE_EQ(read->target_auc, 0.65);
}

TEST_F(TrainTargetAucTest, ATargetNeverReachedTrainsEveryStep) {
  const std::string metrics = tmp_.File("m.json");
  auto report = RunTrainCommand(Options(TargetConfig("0.99"), metrics));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 20);
  EXPECT_EQ(report->reached_target_step, -1);
  EXPECT_LT(report->auc, 0.99);
  EXPECT_EQ(CheckpointStep(), 20);
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"target_auc\":0.99"));
  EXPECT_THAT(json, HasSubstr("\"reached_target_step\":-1"));
}

}  // namespace
}  // namespace dlrm::worker
