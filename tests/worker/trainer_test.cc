// End-to-end tests of the single-process trainer (`dlrm train`'s library) on generated data.
#include <cstring>
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/synthetic.h"
#include "worker/train_command.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::WriteFile;

common::JobSpec SmallJob(const std::string& train_path, uint64_t seed) {
  return testing::SmallGeneratedJob(train_path, seed);
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GenDataOptions gen;
    gen.output = dir_.File("train.tsv");
    gen.num_rows = 30000;
    gen.seed = 11;
    gen.cardinalities = CappedKaggleCardinalities(1000);
    gen.signal_strength = 1.0;  // the planted model's own AUC on this data is about 0.9
    ASSERT_TRUE(GenerateCriteoTsv(gen).ok());
  }
  TrainRunOptions Quiet() {
    TrainRunOptions o;
    o.show_progress = false;
    o.threads = 1;
    return o;
  }
  testing::TempDir dir_;
};

// The planted logistic model reaches AUC ~0.9 on this data and a model that learned nothing gets
// 0.5 (+- 0.01 on 6000 eval samples). 0.75 is far above chance and reached by two epochs of a
// model that learns the per-id weights, while a bug in any gradient path (dense, interaction or
// embedding) keeps it well below.
TEST_F(TrainerTest, LearnsPlantedSignal) {
  auto report = TrainInProcess(SmallJob(dir_.File("train.tsv"), 5), Quiet());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->eval_samples, 6000);
  EXPECT_EQ(report->train_samples, 2 * 24000);
  EXPECT_EQ(report->steps, 2 * ((24000 + 255) / 256));
  EXPECT_GT(report->auc, 0.75);
  EXPECT_LT(report->logloss, 0.6);
  EXPECT_GT(report->samples_per_sec, 0);
}

TEST_F(TrainerTest, SameSeedGivesSameModel) {
  TrainArtifacts a, b, c;
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), 5);
  spec.epochs = 1;
  ASSERT_TRUE(TrainInProcess(spec, Quiet(), &a).ok());
  ASSERT_TRUE(TrainInProcess(spec, Quiet(), &b).ok());
  spec.seed = 6;
  ASSERT_TRUE(TrainInProcess(spec, Quiet(), &c).ok());

  ASSERT_EQ(a.dense_params.size(), b.dense_params.size());
  EXPECT_EQ(0, std::memcmp(a.dense_params.data(), b.dense_params.data(),
                           a.dense_params.size() * sizeof(float)));
  EXPECT_NE(a.dense_params, c.dense_params);
  bool any_table_differs_from_c = false;
  for (int t = 0; t < 26; ++t) {
    const auto& ta = a.store->table(t);
    const auto& tb = b.store->table(t);
    const size_t n = static_cast<size_t>(ta.rows()) * ta.row_stride();
    EXPECT_EQ(0, std::memcmp(ta.data(), tb.data(), n * sizeof(float))) << "table " << t;
    if (std::memcmp(ta.data(), c.store->table(t).data(), n * sizeof(float)) != 0) {
      any_table_differs_from_c = true;
    }
  }
  EXPECT_TRUE(any_table_differs_from_c);
}

TEST_F(TrainerTest, MalformedLinesAreSkippedAndCounted) {
  std::string text = ReadFile(dir_.File("train.tsv"));
  text.insert(0, "1\tnot-a-number\n0\t1\t2\n");
  WriteFile(dir_.File("bad.tsv"), text);
  common::JobSpec spec = SmallJob(dir_.File("bad.tsv"), 5);
  spec.epochs = 1;
  auto report = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->skipped_lines, 2);
  EXPECT_EQ(report->train_samples + report->eval_samples, 30000);

  spec.strict = true;
  report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("bad.tsv:1"));
}

TEST_F(TrainerTest, MissingDataFileNamesPath) {
  auto report = TrainInProcess(SmallJob(dir_.File("nope.tsv"), 5), Quiet());
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("nope.tsv"));
}

TEST_F(TrainerTest, ModelThatDoesNotFitCriteoIsRefused) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), 5);
  spec.tables.pop_back();
  auto report = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("tables"));
}

TEST_F(TrainerTest, MetricsOutIsOneJsonObject) {
  const std::string spec_path = dir_.File("job.yaml");
  WriteFile(spec_path, common::JobSpecToYaml(SmallJob("train.tsv", 5)));
  TrainCommandOptions options;
  options.config_path = spec_path;  // relative data path resolves next to the spec
  options.metrics_out = dir_.File("m.json");
  options.run = Quiet();
  auto report = RunTrainCommand(options);
  ASSERT_TRUE(report.ok()) << report.status();
  auto parsed = TrainReportFromJson(ReadFile(options.metrics_out));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_DOUBLE_EQ(parsed->auc, report->auc);
  EXPECT_EQ(parsed->steps, report->steps);
  EXPECT_GT(parsed->samples_per_sec, 0);
  const std::string json = ReadFile(options.metrics_out);
  for (const char* key :
       {"\"auc\"", "\"logloss\"", "\"accuracy\"", "\"samples_per_sec\"", "\"steps\""}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
}

}  // namespace
}  // namespace dlrm::worker
