// RunRecorder and the HTML run report (worker/run_report.h): bounded, interval-averaged points;
// a self-contained page with its charts, escaped text, "no data" for empty series, non-finite
// values left out, and an error naming an unwritable path.
#include "worker/run_report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/worker/report_page.h"

namespace dlrm::worker {
namespace {

using ::dlrm::testing::Count;
using ::dlrm::testing::Figure;

HtmlReportOptions Titled(const std::string& title) {
  HtmlReportOptions options;
  options.title = title;
  return options;
}

RunRecorder RecordedRun(int steps, int max_points = 400) {
  RunRecorder recorder({.max_points = max_points, .min_interval_seconds = 0});
  recorder.Start(0, 0, 0);
  for (int step = 1; step <= steps; ++step) {
    recorder.Record(0.01 * step, step, 256LL * step, 0.7 - 0.2 * step / steps);
  }
  return recorder;
}

TEST(RunRecorderTest, KeepsAtMostMaxPointsEvenlySpacedAndAveraged) {
  RunRecorder recorder({.max_points = 100, .min_interval_seconds = 0});
  recorder.Start(0, 0, 0);
  // Loss 1 on odd steps, 3 on even ones: every interval of an even number of steps averages 2.
  for (int step = 1; step <= 10000; ++step) {
    recorder.Record(0.001 * step, step, 100LL * step, step % 2 == 1 ? 1.0 : 3.0);
  }
  const std::vector<TrainingPoint> points = recorder.training();
  ASSERT_LE(points.size(), 101u);
  ASSERT_GE(points.size(), 50u);
  EXPECT_EQ(points.back().step, 10000);
  EXPECT_EQ(points.back().samples, 1000000);
  EXPECT_EQ(points.front().start_step, 0);
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(points[i].start_step, points[i - 1].step) << i;
    }
    EXPECT_EQ(points[i].step - points[i].start_step, points[0].step - points[0].start_step) << i;
    EXPECT_NEAR(points[i].loss, 2.0, 1e-9) << i;
    // 100 samples per step in 1 ms per step.
    EXPECT_NEAR(points[i].samples_per_sec(), 100000, 1e-3) << i;
  }
}

TEST(RunRecorderTest, IgnoresStepsThatDoNotAdvanceAndNonFiniteLosses) {
  RunRecorder recorder;
  recorder.Start(0, 9, 900);
  recorder.Record(0.5, 10, 1000, 0.5);
  recorder.Record(1, 11, 1100, std::nan(""));
  recorder.Record(2, 11, 1100, 100.0);  // a repeated update
  recorder.Record(3, 5, 500, 100.0);    // back to an older step
  recorder.Record(4, 12, 1200, 0.7);
  const std::vector<TrainingPoint> points = recorder.training();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_DOUBLE_EQ(points[0].loss, 0.5);
  EXPECT_TRUE(std::isnan(points[1].loss));  // step 11's loss was not finite
  EXPECT_EQ(points[2].step, 12);
  EXPECT_DOUBLE_EQ(points[2].loss, 0.7);
  EXPECT_DOUBLE_EQ(points[2].samples_per_sec(), 100.0 / 3);
}

TEST(RunRecorderTest, IntervalsLastAtLeastTheMinimumTime) {
  RunRecorder recorder({.min_interval_seconds = 1.0});
  recorder.Start(0, 0, 0);
  // A step every 0.25 s (exact in binary): every interval spans 4 steps.
  for (int step = 1; step <= 100; ++step) recorder.Record(0.25 * step, step, 10LL * step, 0.5);
  const std::vector<TrainingPoint> points = recorder.training();
  ASSERT_EQ(points.size(), 25u);
  for (const TrainingPoint& p : points) {
    EXPECT_EQ(p.step - p.start_step, 4);
    EXPECT_DOUBLE_EQ(p.samples_per_sec(), 40);
  }
}

// The run ends 0.3 s into an interval, just after a late worker's report brought in a second's
// samples: that tail joins the last point instead of standing alone as a spike.
TEST(RunRecorderTest, AnIntervalInProgressShorterThanTheMinimumJoinsTheLastPoint) {
  RunRecorder recorder({.min_interval_seconds = 1.0});
  recorder.Start(0, 0, 0);
  for (int step = 1; step <= 8; ++step) recorder.Record(0.25 * step, step, 100LL * step, 1.0);
  recorder.Record(2.25, 9, 1800, 4.0);  // 900 samples more in 0.25 s
  std::vector<TrainingPoint> points = recorder.training();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_DOUBLE_EQ(points[0].samples_per_sec(), 400);
  EXPECT_EQ(points[1].start_step, 4);
  EXPECT_EQ(points[1].step, 9);
  EXPECT_EQ(points[1].samples, 1800);
  EXPECT_DOUBLE_EQ(points[1].samples_per_sec(), 1400 / 1.25);  // not 900 / 0.25
  EXPECT_DOUBLE_EQ(points[1].loss, (4 * 1.0 + 4.0) / 5);
  // Once it spans the minimum it is a point of its own.
  recorder.Record(3.0, 10, 1900, 1.0);
  points = recorder.training();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[1].step, 8);
  EXPECT_EQ(points[2].start_step, 8);
  // A run shorter than the minimum still has its one point.
  RunRecorder short_run({.min_interval_seconds = 1.0});
  short_run.Start(0, 0, 0);
  short_run.Record(0.5, 3, 300, 2.0);
  ASSERT_EQ(short_run.training().size(), 1u);
  EXPECT_DOUBLE_EQ(short_run.training()[0].samples_per_sec(), 600);
}

TEST(RunRecorderTest, AnEvaluationAtTheSameStepReplacesTheEarlierOne) {
  RunRecorder recorder;
  recorder.RecordEval(1, 10, 0.6, 0.5);
  recorder.RecordEval(2, 20, 0.7, 0.45);
  recorder.RecordEval(3, 20, 0.71, 0.44);
  ASSERT_EQ(recorder.eval().size(), 2u);
  EXPECT_DOUBLE_EQ(recorder.eval().back().auc, 0.71);
}

TEST(RunReportTest, PageIsSelfContainedWithChartsAndSummary) {
  RunRecorder recorder = RecordedRun(300);
  recorder.RecordEval(1, 100, 0.70, 0.52);
  recorder.RecordEval(2, 200, 0.74, 0.49);
  recorder.RecordEval(3, 300, 0.76, 0.47);
  TrainReport report;
  report.auc = 0.76;
  report.logloss = 0.47;
  report.eval_samples = 1000;
  report.steps = 300;
  const std::string html = RenderHtmlReport(
      {.title = "dlrm train: demo", .summary = RunSummary("demo", report, "")}, recorder);
  EXPECT_TRUE(absl::StartsWith(html, "<!DOCTYPE html>"));
  for (const char* id : {"chart-loss", "chart-throughput", "chart-auc", "chart-logloss"}) {
    const std::string figure = Figure(html, id);
    ASSERT_FALSE(figure.empty()) << id;
    EXPECT_TRUE(absl::StrContains(figure, "<svg")) << id;
    EXPECT_TRUE(absl::StrContains(figure, "class=\"series\"")) << id;
    EXPECT_TRUE(absl::StrContains(figure, "class=\"tick\"")) << id;
    EXPECT_FALSE(absl::StrContains(figure, "No data")) << id;
  }
  // One dot per evaluation on each eval chart.
  EXPECT_EQ(Count(Figure(html, "chart-auc"), "<circle"), 3);
  EXPECT_TRUE(absl::StrContains(html, "<dt>final AUC</dt><dd>0.7600</dd>"));
  EXPECT_TRUE(absl::StrContains(html, "<dt>outcome</dt><dd>succeeded</dd>"));
  EXPECT_TRUE(absl::StrContains(html, "<dt>date</dt>"));
  // Nothing is fetched and nothing runs.
  EXPECT_FALSE(absl::StrContains(html, "http://"));
  EXPECT_FALSE(absl::StrContains(html, "https://"));
  EXPECT_FALSE(absl::StrContains(html, "<script"));
  EXPECT_FALSE(absl::StrContains(html, "src="));
  EXPECT_FALSE(absl::StrContains(html, "href="));
}

TEST(RunReportTest, ThroughputLeavesOutEvaluationPauses) {
  RunRecorder recorder;
  recorder.Start(0, 0, 0);
  recorder.Record(1, 1, 100, 0.5);
  recorder.Record(2, 2, 200, 0.5);
  recorder.Pause(10);  // an evaluation
  recorder.Record(13, 3, 300, 0.5);
  recorder.Record(14, 4, 400, 0.5);
  const std::vector<TrainingPoint> points = recorder.training();
  ASSERT_EQ(points.size(), 4u);
  EXPECT_DOUBLE_EQ(points[2].samples_per_sec(), 100.0);  // 1 s of training in 11 s
  // The line stops before the pause and starts again after it.
  const std::string figure =
      Figure(RenderHtmlReport(Titled("pause"), recorder), "chart-throughput");
  const size_t d = figure.find(" d=\"");
  ASSERT_NE(d, std::string::npos) << figure;
  const std::string path = figure.substr(d + 4, figure.find('"', d + 4) - d - 4);
  EXPECT_EQ(Count(path, "M"), 2) << path;
  EXPECT_EQ(Count(path, "L"), 2) << path;
}

TEST(RunReportTest, EscapesEveryString) {
  RunRecorder recorder = RecordedRun(10);
  const std::string html = RenderHtmlReport(
      {.title = "<script>alert('x')</script>", .summary = {{"job <b>", "a & \"b\""}}}, recorder);
  EXPECT_FALSE(absl::StrContains(html, "<script"));
  EXPECT_TRUE(absl::StrContains(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
  EXPECT_TRUE(absl::StrContains(html, "<dt>job &lt;b&gt;</dt><dd>a &amp; &quot;b&quot;</dd>"));
}

TEST(RunReportTest, EmptySeriesSayNoDataInsteadOfDrawing) {
  const std::string empty = RenderHtmlReport(Titled("empty"), RunRecorder());
  for (const char* id : {"chart-loss", "chart-throughput", "chart-auc", "chart-logloss"}) {
    const std::string figure = Figure(empty, id);
    ASSERT_FALSE(figure.empty()) << id;
    EXPECT_TRUE(absl::StrContains(figure, "No data")) << id;
    EXPECT_FALSE(absl::StrContains(figure, "<svg")) << id;
  }
  // Trained but never evaluated: the training charts are drawn, the eval ones say why not.
  const std::string trained = RenderHtmlReport(Titled("no eval"), RecordedRun(50));
  EXPECT_FALSE(absl::StrContains(Figure(trained, "chart-loss"), "No data"));
  EXPECT_TRUE(absl::StrContains(Figure(trained, "chart-auc"), "No data"));
  EXPECT_TRUE(absl::StrContains(Figure(trained, "chart-logloss"), "not evaluated"));
}

TEST(RunReportTest, NonFiniteValuesAreLeftOut) {
  const double inf = std::numeric_limits<double>::infinity();
  RunRecorder recorder;
  recorder.Record(0, 1, 100, 0.6);
  recorder.Record(1, 2, 200, inf);
  recorder.Record(2, 3, 300, 0.5);
  recorder.RecordEval(1, 1, std::nan(""), inf);
  recorder.RecordEval(2, 3, 0.7, 0.5);
  const std::string html = RenderHtmlReport(Titled("skipped values"), recorder);
  EXPECT_FALSE(absl::StrContains(html, "nan"));
  EXPECT_FALSE(absl::StrContains(html, "inf"));
  EXPECT_EQ(Count(Figure(html, "chart-auc"), "<circle"), 1);
  // Finite values whose range overflows a double: no chart rather than a broken one.
  RunRecorder huge;
  huge.RecordEval(1, 1, -1e308, -1e308);
  huge.RecordEval(2, 2, 1e308, 1e308);
  EXPECT_TRUE(absl::StrContains(
      Figure(RenderHtmlReport(Titled("skipped values"), huge), "chart-logloss"), "No data"));
  // Only NaN: nothing to draw.
  RunRecorder all_nan;
  all_nan.RecordEval(1, 1, std::nan(""), std::nan(""));
  EXPECT_TRUE(absl::StrContains(
      Figure(RenderHtmlReport(Titled("skipped values"), all_nan), "chart-auc"), "No data"));
}

TEST(RunReportTest, WritesTheFileAndNamesAnUnwritablePath) {
  dlrm::testing::ScopedTempDir dir("run_report");
  const std::string path = dir.path() + "/report.html";
  ASSERT_TRUE(WriteHtmlReport(path, Titled("ok"), RecordedRun(20)).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), RenderHtmlReport(Titled("ok"), RecordedRun(20)));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const std::string bad = dir.path() + "/no/such/folder/report.html";
  absl::Status st = WriteHtmlReport(bad, Titled("bad"), RecordedRun(20));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(absl::StrContains(st.message(), bad)) << st;
}

}  // namespace
}  // namespace dlrm::worker
