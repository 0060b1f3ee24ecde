// WorkerProcess's kept final report (UndeliveredReport): a report the coordinator could not take
// is sent again before each heartbeat until the coordinator answers, and then forgotten.
#include "worker/worker_process.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dlrm::worker {
namespace {

// Rank 0's end of a run, as WorkerProcess::JobRun::Finish fills it: with the metrics map.
dlrm::v1::ReportProgressRequest RankZeroEnd(const std::string& job, int64_t epoch) {
  dlrm::v1::ReportProgressRequest r;
  r.set_job_id(job);
  r.set_rank(0);
  r.set_job_epoch(epoch);
  r.set_step(228);
  r.set_done(true);
  auto& m = *r.mutable_metrics();
  for (const char* key : {"auc",
                          "logloss",
                          "accuracy",
                          "eval_samples",
                          "steps",
                          "samples",
                          "train_seconds",
                          "samples_per_sec",
                          "skipped_lines",
                          "hot_hit_rate",
                          "hot_rows",
                          "hot_migrations",
                          "ps_memory_rows",
                          "ps_rocksdb_reads",
                          "ps_rocksdb_hits",
                          "ps_rows_created",
                          "ps_rocksdb_writes",
                          "network_bytes_per_sample",
                          "network_ps_lookup_bytes_per_sample",
                          "network_ps_push_bytes_per_sample",
                          "network_hot_sync_bytes_per_sample",
                          "network_dense_allreduce_bytes_per_sample"}) {
    m[key] = 0.5;
  }
  return r;
}

// Found by tests/soak/chaos_soak.sh: rank 0's end, kept while the coordinator restarted, was
// taken at last and then sent again, and refused ("job is SUCCEEDED"), at every heartbeat:
// the copy sent and the one kept were compared by their bytes, and a metrics map serializes in
// another order in each copy of the message.
TEST(UndeliveredReportTest, AnAnsweredReportIsForgottenWhateverItsMetrics) {
  UndeliveredReport kept;
  EXPECT_FALSE(kept.Get().has_value());
  for (int run = 1; run <= 20; ++run) {
    kept.Keep(RankZeroEnd("job-9", run), absl::StrCat("the end of run job-9@", run));
    const std::optional<UndeliveredReport::Entry> sent = kept.Get();
    ASSERT_TRUE(sent.has_value());
    EXPECT_EQ(sent->report.job_epoch(), run);
    EXPECT_EQ(sent->what, absl::StrCat("the end of run job-9@", run));
    kept.Done(*sent);
    EXPECT_FALSE(kept.Get().has_value()) << "run " << run << ": the answered report is kept";
  }
}

// A newer run's report kept while the older one was being sent stays to be sent in turn.
TEST(UndeliveredReportTest, ANewerReportKeptMeanwhileStays) {
  UndeliveredReport kept;
  kept.Keep(RankZeroEnd("job-1", 4), "the end of run job-1@4");
  const std::optional<UndeliveredReport::Entry> older = kept.Get();
  ASSERT_TRUE(older.has_value());
  kept.Keep(RankZeroEnd("job-2", 7), "the end of run job-2@7");
  kept.Done(*older);
  std::optional<UndeliveredReport::Entry> newer = kept.Get();
  ASSERT_TRUE(newer.has_value());
  EXPECT_EQ(newer->report.job_id(), "job-2");
  // The same bytes kept again are a report of their own, not the one answered.
  kept.Done(*newer);
  kept.Keep(RankZeroEnd("job-2", 7), "the end of run job-2@7");
  kept.Done(*newer);
  EXPECT_TRUE(kept.Get().has_value());
}

}  // namespace
}  // namespace dlrm::worker
