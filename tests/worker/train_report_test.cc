// The --metrics-out file (worker/train_report.h) of dlrm train, eval and local: one JSON object
// that reads back as the report, written so that a failed write leaves the previous file whole.
#include "worker/train_report.h"

#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::WriteFile;

TrainReport SomeReport() {
  TrainReport r;
  r.auc = 0.8125;
  r.logloss = 0.4375;
  r.accuracy = 0.75;
  r.samples_per_sec = 12345;
  r.steps = 42;
  r.train_samples = 42 * 256;
  r.eval_samples = 1000;
  r.network["network_bytes_per_sample"] = 96;
  return r;
}

TEST(TrainReportTest, WritesOneJsonObjectThatReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.File("m.json");
  WriteFile(path, "the previous run's report, longer than this run's would be ...............\n");
  ASSERT_TRUE(WriteTrainReport(path, SomeReport()).ok());
  auto read = TrainReportFromJson(ReadFile(path));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->auc, 0.8125);
  EXPECT_EQ(read->steps, 42);
  EXPECT_EQ(read->eval_samples, 1000);
  EXPECT_EQ(read->network["network_bytes_per_sample"], 96);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Eval data of one class has no AUC: the summary printed "AUC nan" (the JSON has null).
TEST(TrainReportTest, TheSummaryOfAnUndefinedAucSaysWhy) {
  TrainReport r = SomeReport();
  EXPECT_THAT(TrainReportSummary(r), ::testing::StartsWith("AUC 0.8125  logloss"));
  r.auc = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(TrainReportSummary(r), ::testing::StartsWith("AUC n/a (one class)  logloss"));
  EXPECT_EQ(FormatAuc(0.5), "0.5000");
}

// training.target_auc: the target and the step that reached it are written with a target only,
// and a report without them (no target, or an older version's) reads back as "none".
TEST(TrainReportTest, TargetAucFieldsAreWrittenWithATargetAndReadBack) {
  TrainReport none = SomeReport();
  const std::string plain = TrainReportToJson(none);
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("target")));
  auto read = TrainReportFromJson(plain);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->target_auc, 0);
  EXPECT_EQ(read->reached_target_step, -1);

  TrainReport reached = SomeReport();
  reached.target_auc = 0.80275;
  reached.reached_target_step = 40;
  const std::string json = TrainReportToJson(reached);
  EXPECT_THAT(json, HasSubstr("\"target_auc\":0.80275"));
  EXPECT_THAT(json, HasSubstr("\"reached_target_step\":40"));
  read = TrainReportFromJson(json);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->target_auc, 0.80275);
  EXPECT_EQ(read->reached_target_step, 40);
  EXPECT_EQ(read->steps, 42);

  TrainReport missed = SomeReport();
  missed.target_auc = 0.9;
  EXPECT_THAT(TrainReportToJson(missed), HasSubstr("\"reached_target_step\":-1"));
}

// A write that fails half way (here: RLIMIT_FSIZE, as a full disk) keeps the previous run's file,
// removes the temporary one and says why, naming the path.
TEST(TrainReportTest, AFailedWriteKeepsTheOldFile) {
  testing::TempDir dir;
  const std::string path = dir.File("m.json");
  const std::string old = "{\"auc\":0.5}\n";
  WriteFile(path, old);
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 16;  // the report takes about 300 bytes
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = WriteTrainReport(path, SomeReport());
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--metrics-out: cannot write '" + path + "': " + std::strerror(EFBIG)));
  EXPECT_EQ(ReadFile(path), old);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
}  // namespace dlrm::worker
