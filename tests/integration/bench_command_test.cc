// `dlrm bench` as a user runs it: a short kaggle-shape run prints one JSON object whose figures are
// present, positive and consistent with each other (the ratios are the quotients of the times
// printed next to them), and an unknown shape is refused with its name.
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/temp_dir.h"
#include "tests/integration/process_util.h"

namespace dlrm::testing {
namespace {

TEST(BenchCommandTest, PrintsTheStepItsBoundsAndTheRowPassesConsistently) {
  // The run's output files go with the folder (not into /tmp itself).
  const ScopedTempDir temp("dlrm-bench-test");
  const std::string& dir = temp.path();
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

// --max-rows shrinks a shape to this machine: mlperf-dcnv2's 26 tables (7.1M rows of dim 128)
// capped at 1000 rows each; its per-table bags are printed as such, not as one id a lookup.
TEST(BenchCommandTest, MaxRowsCapsEveryTableOfTheShape) {
  const ScopedTempDir temp("dlrm-bench-test");
  const std::string& dir = temp.path();
  ProcessResult r =
      RunProcess({BinPath("dlrm"), "bench", "--shape", "mlperf-dcnv2", "--max-rows", "1000",
                  "--batch-size", "32", "--steps", "1", "--rounds", "1", "--threads", "2"},
                 dir, "bench-mlperf-capped", absl::Seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.at("max_rows").get<int64_t>(), 1000);
  // Tables under the cap keep their size (three of 3, 4 and 10 rows among them).
  EXPECT_LE(j.at("table_rows").get<int64_t>(), 26 * 1000);
  EXPECT_GT(j.at("table_rows").get<int64_t>(), 15 * 1000);
  EXPECT_EQ(j.at("table_and_state_bytes").get<int64_t>(),
            j.at("table_rows").get<int64_t>() * (128 + 1) * 4);
  EXPECT_EQ(j.at("ids_per_lookup_by_table").size(), 26u);
  EXPECT_FALSE(j.contains("ids_per_lookup")) << r.out;

  ProcessResult bad = RunProcess({BinPath("dlrm"), "bench", "--max-rows", "-5"}, dir,
                                 "bench-bad-max-rows", absl::Seconds(30));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad.err, "-5")) << bad.err;
}

TEST(BenchCommandTest, AnUnknownShapeIsRefusedByName) {
  const ScopedTempDir temp("dlrm-bench-test");
  ProcessResult r = RunProcess({BinPath("dlrm"), "bench", "--shape", "kaggle-shap"}, temp.path(),
                               "bench-bad", absl::Seconds(30));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "kaggle-shap")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace dlrm::testing
