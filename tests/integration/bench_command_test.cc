// `dlrm bench` as a user runs it: a short kaggle-shape run prints one JSON object whose figures are
// present, positive and consistent with each other (the ratios are the quotients of the times
// printed next to them), and an unknown shape is refused with its name.
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process_util.h"

namespace dlrm::testing {
namespace {

TEST(BenchCommandTest, PrintsTheStepItsBoundsAndTheRowPassesConsistently) {
  const std::string dir = ::testing::TempDir();
  // Batch 256 over the 26 kaggle-shape tables (33.8M rows: the tables' size, not the batch's,
  // sets the run's few seconds).
  ProcessResult r = RunProcess({BinPath("dlrm"), "bench", "--shape", "kaggle-shape", "--batch-size",
                                "256", "--steps", "3", "--rounds", "1", "--threads", "2"},
                               dir, "bench-kaggle", absl::Seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const double step = j.at("step_ms_median"), gemm = j.at("gemm_only_ms_median");
  EXPECT_GT(step, 0);
  EXPECT_GT(gemm, 0);
  EXPECT_DOUBLE_EQ(j.at("ratio").get<double>(), gemm / step);
  EXPECT_EQ(j.at("timed_steps").get<int>(), 3);
  EXPECT_GT(j.at("compute_ms_mean").at("dense").get<double>(), 0);
  EXPECT_GT(j.at("compute_ms_mean").at("pool").get<double>(), 0);
  // Each table has at least one distinct id a batch, and at most one per sample.
  const int64_t rows = j.at("distinct_rows_per_step");
  EXPECT_GE(rows, 26);
  EXPECT_LE(rows, 26 * 256);
  const double read = j.at("row_read_ms_median"), write = j.at("row_read_write_ms_median");
  EXPECT_GT(read, 0);
  EXPECT_GT(write, 0);
  EXPECT_DOUBLE_EQ(j.at("ratio_ceiling_formula").get<double>(), gemm / (gemm + read + write));
}

TEST(BenchCommandTest, AnUnknownShapeIsRefusedByName) {
  ProcessResult r = RunProcess({BinPath("dlrm"), "bench", "--shape", "kaggle-shap"},
                               ::testing::TempDir(), "bench-bad", absl::Seconds(30));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "kaggle-shap")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace dlrm::testing
