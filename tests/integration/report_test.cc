// `--report FILE.html` end to end: `dlrm train` and `dlrm local` on generated data write one
// self-contained page with the loss, eval AUC, eval logloss and throughput charts, whose final
// AUC is the one the run printed to --metrics-out; a path that cannot be written is refused before
// training starts.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster_fixture.h"
#include "tests/integration/process_util.h"
#include "tests/worker/report_page.h"
#include "worker/train_report.h"

namespace dlrm::testing {
namespace {

constexpr int kEvalEvery = 5;

class ReportTest : public LocalClusterTest {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(MakeDataDir("dlrm-report", 4000, 1000, 5));
    // 3600 training samples in batches of 256: 15 steps, evaluated at steps 5, 10 and 15.
    std::ofstream(Dir() + "/job.yaml")
        << JobYaml({.name = "report-job",
                    .model = "pooling: sum",
                    .training = absl::StrCat(
                        "batch_size: 256, epochs: 1, seed: 3, eval_every_steps: ", kEvalEvery)});
  }

  // The page has every chart drawn and the final AUC of the run's --metrics-out JSON.
  static void ExpectPageOfRun(const std::string& html, const std::string& metrics_json) {
    auto report = worker::TrainReportFromJson(metrics_json);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_GT(report->eval_samples, 0);
    for (const char* id : {"chart-loss", "chart-throughput", "chart-auc", "chart-logloss"}) {
      const std::string figure = Figure(html, id);
      EXPECT_TRUE(absl::StrContains(figure, "<svg")) << id << ":\n" << figure;
      EXPECT_TRUE(absl::StrContains(figure, "class=\"series\"")) << id;
    }
    EXPECT_TRUE(
        absl::StrContains(html, absl::StrFormat("<dt>final AUC</dt><dd>%.4f</dd>", report->auc)))
        << "auc " << report->auc;
    EXPECT_TRUE(
        absl::StrContains(html, absl::StrFormat("<dt>steps</dt><dd>%d</dd>", report->steps)));
    EXPECT_TRUE(absl::StrContains(html, "<dt>outcome</dt><dd>succeeded</dd>"));
    EXPECT_FALSE(absl::StrContains(html, "http://"));
    EXPECT_FALSE(absl::StrContains(html, "https://"));
    EXPECT_FALSE(absl::StrContains(html, "<script"));
  }
};

TEST_F(ReportTest, TrainWritesThePageWithItsEvaluations) {
  const std::string html_path = Dir() + "/train.html";
  ProcessResult r =
      RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml", "--metrics-out",
                  Dir() + "/train.json", "--report", html_path, "--no-progress", "--threads", "1"},
                 Dir(), "train", absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = ReadFileOrEmpty(html_path);
  const std::string json = ReadFileOrEmpty(Dir() + "/train.json");
  ExpectPageOfRun(html, json);
  // Periodic evaluations at steps 5, 10 and 15 (the last one is also the final evaluation).
  auto report = worker::TrainReportFromJson(json);
  ASSERT_TRUE(report.ok());
  const int evaluations =
      static_cast<int>((report->steps + kEvalEvery - 1) / kEvalEvery);  // and the final one
  EXPECT_EQ(Count(Figure(html, "chart-auc"), "<circle"), evaluations);
  EXPECT_TRUE(absl::StrContains(r.err, "step 5: eval AUC")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "wrote the run report to " + html_path)) << r.err;
}

TEST_F(ReportTest, LocalWritesThePageOfTheJob) {
  const std::string html_path = Dir() + "/local.html";
  ProcessResult r = RunProcess(
      {BinPath("dlrm"), "local", "--config", Dir() + "/job.yaml", "--ps", "1", "--workers", "1",
       "--metrics-out", Dir() + "/local.json", "--report", html_path, "--no-progress"},
      Dir(), "local", absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = ReadFileOrEmpty(html_path);
  ExpectPageOfRun(html, ReadFileOrEmpty(Dir() + "/local.json"));
  EXPECT_GE(Count(Figure(html, "chart-auc"), "<circle"), 1);
}

// dlrm starts OpenBLAS with OPENBLAS_THREAD_TIMEOUT=4 and oneDNN's OpenMP threads with
// OMP_WAIT_POLICY=passive (dense/cpu/blas_env.h) unless the environment sets them; either way the
// log's backend name shows what the library that runs the GEMMs read.
TEST_F(ReportTest, TrainStartsTheGemmThreadsWithoutTheirSpinUnlessTheUserSetsIt) {
  struct Case {
    const char* library;
    const char* variable;
    const char* value;  // "" = unset
    std::string shown;
  };
  const Case cases[] = {
      {"openblas", "OPENBLAS_THREAD_TIMEOUT", "", "thread_timeout=4"},
      {"openblas", "OPENBLAS_THREAD_TIMEOUT", "9", "thread_timeout=9"},
      {"onednn", "OMP_WAIT_POLICY", "", "omp_wait_policy=passive"},
      {"onednn", "OMP_WAIT_POLICY", "active", "omp_wait_policy=active"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.library, " ", c.variable, "=", c.value));
    setenv("DLRM_CPU_GEMM", c.library, 1);
    if (*c.value == 0) {
      unsetenv(c.variable);
    } else {
      setenv(c.variable, c.value, 1);
    }
    ProcessResult r =
        RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml", "--no-progress",
                    "--threads", "1", "--device", "cpu"},
                   Dir(), absl::StrCat("train-", c.library, c.value), absl::Seconds(120));
    unsetenv(c.variable);
    unsetenv("DLRM_CPU_GEMM");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("training on cpu(", c.library, " ")))
        << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.shown + ",") || absl::StrContains(r.err, c.shown + ")"))
        << r.err;
  }
}

// A DLRM_CPU_GEMM that names no library stops dlrm before training, with its value.
TEST_F(ReportTest, AnUnknownGemmLibraryIsRefusedWithItsName) {
  setenv("DLRM_CPU_GEMM", "mkl", 1);
  ProcessResult r = RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml",
                                "--no-progress", "--threads", "1", "--device", "cpu"},
                               Dir(), "train-gemm-mkl", absl::Seconds(60));
  unsetenv("DLRM_CPU_GEMM");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "DLRM_CPU_GEMM: unknown CPU GEMM library 'mkl'")) << r.err;
}

// With DLRM_CPU_GEMM=openblas the log's backend name shows the kernels OpenBLAS runs, here the
// ones OPENBLAS_CORETYPE asks for (SSE-only ones, which every x86-64 CPU can run).
TEST_F(ReportTest, TrainNamesTheOpenBlasKernelsItRuns) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before == nullptr ? "" : before;
  setenv("DLRM_CPU_GEMM", "openblas", 1);
  for (const char* core : {"Prescott", "Nehalem"}) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    ProcessResult r = RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml",
                                  "--no-progress", "--threads", "1", "--device", "cpu"},
                                 Dir(), absl::StrCat("train-core-", core), absl::Seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("training on cpu(openblas ", core, ",")))
        << r.err;
  }
  unsetenv("DLRM_CPU_GEMM");
  if (before == nullptr) {
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  }
}

// Every dlrm process flushes denormals to zero (common/denormals.h) unless DLRM_DENORMALS=keep;
// the log's backend name says which.
TEST_F(ReportTest, TrainFlushesDenormalsUnlessTheUserKeepsThem) {
  for (const bool keep : {false, true}) {
    if (keep) setenv("DLRM_DENORMALS", "keep", 1);
    ProcessResult r = RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml",
                                  "--no-progress", "--threads", "1", "--device", "cpu"},
                                 Dir(), absl::StrCat("train-denormals-", keep), absl::Seconds(120));
    unsetenv("DLRM_DENORMALS");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "training on cpu(onednn")) << r.err;
    EXPECT_EQ(absl::StrContains(r.err, ", ftz)"), !keep) << r.err;
  }
}

TEST_F(ReportTest, AnUnwritablePathIsRefusedBeforeTraining) {
  const std::string bad = Dir() + "/no/such/folder/report.html";
  ProcessResult r = RunProcess({BinPath("dlrm"), "train", "--config", Dir() + "/job.yaml",
                                "--report", bad, "--no-progress", "--threads", "1"},
                               Dir(), "train-bad", absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, bad)) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "AUC")) << r.out;
}

}  // namespace
}  // namespace dlrm::testing
