// CoordinatorState's jobs without gRPC: the state machine and its transitions, cancelling,
// pending jobs, listing a page at a time, submission checks and the metrics a job shows.
// (Membership, recovery and persistence: coordinator_state_test.cc.)
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_state.h"
#include "tests/server/coordinator_state_fixture.h"
#include "tests/server/test_specs.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;

// Rank 0 evaluates; the other ranks' progress reports in between carry no eval figures, and must
// not wipe the last evaluation's from `dlrmctl status` (their other metrics are replaced).
TEST_F(CoordinatorStateTest, TheLastEvaluationStaysThroughOtherRanksReports) {
  RegisterAs(*state_, dlrm::v1::ROLE_PS, "127.0.0.1:7001");
  const dlrm::v1::Job job = Submit(*state_, 2);
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  ASSERT_EQ(state_->GetJob(job.job_id())->state(), dlrm::v1::JOB_STATE_RUNNING);
  auto report = [&](int rank, std::map<std::string, double> metrics) {
    dlrm::v1::ReportProgressRequest r;
    r.set_job_id(job.job_id());
    r.set_rank(rank);
    r.set_step(10);
    for (const auto& [k, v] : metrics) (*r.mutable_metrics())[k] = v;
    ASSERT_TRUE(state_->ReportProgress(r, now_).ok());
  };
  auto metrics = [&] {
    const dlrm::v1::Job now = *state_->GetJob(job.job_id());
    return std::map<std::string, double>(now.progress().metrics().begin(),
                                         now.progress().metrics().end());
  };
  report(0, {{"eval_step", 10}, {"eval_auc", 0.75}, {"eval_logloss", 0.5}, {"steps_per_sec", 3}});
  report(1, {{"steps_per_sec", 4}});
  EXPECT_EQ(
      metrics(),
      (std::map<std::string, double>{
          {"eval_step", 10}, {"eval_auc", 0.75}, {"eval_logloss", 0.5}, {"steps_per_sec", 4}}));
  report(0, {{"eval_step", 20}, {"eval_auc", 0.8}, {"eval_logloss", 0.4}});
  EXPECT_EQ(metrics(), (std::map<std::string, double>{
                           {"eval_step", 20}, {"eval_auc", 0.8}, {"eval_logloss", 0.4}}));
}

TEST_F(CoordinatorStateTest, JobRunsToSuccessAndAssignsRanks) {
  dlrm::v1::Job job = Submit(*state_, 2, 1);
  EXPECT_EQ(job.state(), dlrm::v1::JOB_STATE_PENDING);
  const std::string ps = RegisterAs(*state_, dlrm::v1::ROLE_PS, "127.0.0.1:7001");
  const std::string w0 = RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  EXPECT_EQ(state_->GetJob(job.job_id())->state(), dlrm::v1::JOB_STATE_PENDING);
  const std::string w1 = RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  auto running = state_->GetJob(job.job_id());
  ASSERT_EQ(running->state(), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_THAT(running->worker_ids(), ::testing::ElementsAre(w0, w1));
  EXPECT_EQ(running->job_epoch(), state_->epoch());

  auto hb1 = state_->Heartbeat(w1, now_);
  ASSERT_TRUE(hb1->has_worker());
  EXPECT_EQ(hb1->worker().rank(), 1);
  EXPECT_EQ(hb1->worker().job().job_id(), job.job_id());
  EXPECT_EQ(hb1->worker().job().world_size(), 2);
  EXPECT_THAT(hb1->worker().job().ps_addresses(), ::testing::ElementsAre("127.0.0.1:7001"));
  EXPECT_EQ(hb1->worker().job().job_spec_yaml(), dlrm::testing::kTinySpec);
  auto hbps = state_->Heartbeat(ps, now_);
  ASSERT_EQ(hbps->ps().jobs_size(), 1);
  EXPECT_EQ(hbps->ps().jobs(0).job_id(), job.job_id());

  EXPECT_EQ(*Report(job.job_id(), 1, /*done=*/true), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*Report(job.job_id(), 0, /*done=*/false), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(state_->GetJob(job.job_id())->total_samples(), 3000);
  EXPECT_EQ(*Report(job.job_id(), 0, /*done=*/true), dlrm::v1::JOB_STATE_SUCCEEDED);
  auto done = state_->GetJob(job.job_id());
  EXPECT_DOUBLE_EQ(done->final_metrics().auc(), 0.75);
  EXPECT_EQ(done->final_metrics().steps(), 100);
  // Workers are free again: no assignment.
  EXPECT_FALSE(state_->Heartbeat(w0, now_)->has_worker());
}

// A job without eval data reports no auc, logloss or accuracy: its final metrics have none (they
// read AUC 0.5, logloss 0 and accuracy 0 before), and say how many samples it evaluated.
TEST_F(CoordinatorStateTest, AJobWithoutEvalDataHasNoEvalMetrics) {
  RegisterAs(*state_, dlrm::v1::ROLE_PS, "127.0.0.1:7001");
  const dlrm::v1::Job job = Submit(*state_, 1);
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  ASSERT_EQ(state_->GetJob(job.job_id())->state(), dlrm::v1::JOB_STATE_RUNNING);
  dlrm::v1::ReportProgressRequest r;
  r.set_job_id(job.job_id());
  r.set_step(10);
  r.set_done(true);
  (*r.mutable_metrics())["eval_samples"] = 0;
  (*r.mutable_metrics())["samples_per_sec"] = 100;
  ASSERT_EQ(*state_->ReportProgress(r, now_), dlrm::v1::JOB_STATE_SUCCEEDED);
  const dlrm::v1::FinalMetrics m = state_->GetJob(job.job_id())->final_metrics();
  EXPECT_FALSE(m.has_auc());
  EXPECT_FALSE(m.has_logloss());
  EXPECT_FALSE(m.has_accuracy());
  EXPECT_EQ(m.eval_samples(), 0);
  EXPECT_DOUBLE_EQ(m.samples_per_sec(), 100);
}

TEST_F(CoordinatorStateTest, IllegalTransitionsNameBothStates) {
  dlrm::v1::Job job = Submit(*state_, 1);
  RegisterAs(*state_, dlrm::v1::ROLE_PS, "h:1");
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  ASSERT_EQ(*Report(job.job_id(), 0, true), dlrm::v1::JOB_STATE_SUCCEEDED);
  auto cancel = state_->Cancel(job.job_id(), "", now_);
  EXPECT_EQ(cancel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cancel.status().message(),
            absl::StrCat("job ", job.job_id(),
                         " has already ended SUCCEEDED; only a PENDING, RUNNING or RECOVERING job "
                         "can be cancelled"));
  auto late = Report(job.job_id(), 0, false);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("SUCCEEDED"));

  EXPECT_TRUE(
      CheckJobTransition("j", dlrm::v1::JOB_STATE_PENDING, dlrm::v1::JOB_STATE_CANCELLED).ok());
  EXPECT_EQ(
      CheckJobTransition("j", dlrm::v1::JOB_STATE_PENDING, dlrm::v1::JOB_STATE_SUCCEEDED).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      CheckJobTransition("j", dlrm::v1::JOB_STATE_FAILED, dlrm::v1::JOB_STATE_RUNNING).message(),
      "job j: illegal transition FAILED -> RUNNING");
}

// `dlrmctl cancel` twice: the second says how the job ended and why, not "illegal transition
// CANCELLED -> CANCELLED", and leaves the first reason as it was.
TEST_F(CoordinatorStateTest, CancellingAnEndedJobSaysHowItEnded) {
  dlrm::v1::Job job = Submit(*state_, 1);
  ASSERT_TRUE(state_->Cancel(job.job_id(), "too big", now_).ok());
  auto again = state_->Cancel(job.job_id(), "again", now_);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            absl::StrCat("job ", job.job_id(),
                         " has already ended CANCELLED (cancelled: too big); only a PENDING, "
                         "RUNNING or RECOVERING job can be cancelled"));
  EXPECT_EQ(state_->GetJob(job.job_id())->message(), "cancelled: too big");
}

// Two live jobs given one checkpoint.dir (a submit retried after a timeout) would take each
// other's checkpoints for their own: the second is refused naming the first while that one is
// pending or running, and accepted once it has ended.
TEST_F(CoordinatorStateTest, ASecondLiveJobWithTheSameCheckpointFolderIsRefused) {
  auto submit = [&](const std::string& dir) {
    dlrm::v1::SubmitJobRequest r;
    r.set_spec_yaml(absl::StrCat(dlrm::testing::kTinySpec, "checkpoint: {dir: ", dir, "}\n"));
    r.set_workers(1);
    return state_->Submit(r, now_);
  };
  auto first = submit("/ckpt/a");
  ASSERT_TRUE(first.ok()) << first.status();
  for (const char* same : {"/ckpt/a", "/ckpt/a/", "/ckpt/./a"}) {
    auto second = submit(same);
    ASSERT_FALSE(second.ok()) << same;
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(second.status().message()),
                HasSubstr(absl::StrCat("checkpoint.dir ", same, " is the folder of ",
                                       first->job_id(), " (PENDING)")));
  }
  EXPECT_TRUE(submit("/ckpt/b").ok());
  ASSERT_TRUE(state_->Cancel(first->job_id(), "", now_).ok());
  EXPECT_TRUE(submit("/ckpt/a").ok()) << "the folder's job has ended";
}

TEST_F(CoordinatorStateTest, PendingJobsStartInOrderAsWorkersFreeUp) {
  RegisterAs(*state_, dlrm::v1::ROLE_PS, "h:1");
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  dlrm::v1::Job first = Submit(*state_, 1);
  dlrm::v1::Job second = Submit(*state_, 1);
  EXPECT_EQ(state_->GetJob(first.job_id())->state(), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(state_->GetJob(second.job_id())->state(), dlrm::v1::JOB_STATE_PENDING);
  ASSERT_TRUE(state_->Cancel(first.job_id(), "enough", now_).ok());
  EXPECT_EQ(state_->GetJob(first.job_id())->message(), "cancelled: enough");
  EXPECT_EQ(state_->GetJob(second.job_id())->state(), dlrm::v1::JOB_STATE_RUNNING);
  auto list = state_->ListJobs(dlrm::v1::JOB_STATE_UNSPECIFIED);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].job_id(), first.job_id());
  EXPECT_EQ(state_->ListJobs(dlrm::v1::JOB_STATE_RUNNING).size(), 1u);
}

// A job that cannot start says why in its message (so `dlrmctl status -o json` has it too): what it
// needs against what the cluster has, and the jobs it queues behind. The message changes, and the
// job's version with it, only when the answer does; it is cleared when the job starts.
TEST_F(CoordinatorStateTest, WaitingJobsSayWhatTheyWaitFor) {
  const std::string w0 = RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  const dlrm::v1::Job first = Submit(*state_, 2, 1);
  EXPECT_EQ(
      state_->GetJob(first.job_id())->message(),
      absl::StrCat("waiting for 2 idle workers and 1 parameter server; the cluster has 1 idle "
                   "worker (",
                   w0, "), 0 parameter servers"));
  const dlrm::v1::Job second = Submit(*state_, 1);
  EXPECT_EQ(state_->GetJob(second.job_id())->message(),
            absl::StrCat("waiting for 1 idle worker and at least 1 parameter server; the cluster "
                         "has 1 idle worker (",
                         w0, "), 0 parameter servers; queued behind ", first.job_id(),
                         " (jobs start in submission order)"));
  const int64_t version = state_->GetJob(first.job_id())->version();
  Submit(*state_, 1);  // tries the queue again: nothing changed for the first job
  EXPECT_EQ(state_->GetJob(first.job_id())->version(), version);

  const std::string ps = RegisterAs(*state_, dlrm::v1::ROLE_PS, "h:1");
  EXPECT_GT(state_->GetJob(first.job_id())->version(), version) << "it has a PS now";
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  ASSERT_EQ(state_->GetJob(first.job_id())->state(), dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(state_->GetJob(first.job_id())->message(), "");
  EXPECT_EQ(state_->GetJob(second.job_id())->message(),
            absl::StrCat("waiting for 1 idle worker and 1 parameter server; the cluster has 0 idle "
                         "workers, 2 busy workers, 1 parameter server (",
                         ps, ")"));
}

// ListJobs a page at a time: each page follows the one before in creation order, whatever
// changes in between; a page ends early at its byte budget (never empty while jobs are left),
// and a token no page gave is refused naming it.
TEST_F(CoordinatorStateTest, JobsAreListedAPageAtATime) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(*state_, 1).job_id());
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    std::string next;
    auto page = state_->ListJobsPage(dlrm::v1::JOB_STATE_UNSPECIFIED, token, 2, 1 << 20, &next);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->size(), 2u);
    for (const auto& job : *page) {
      listed.push_back(job.job_id());
      EXPECT_TRUE(job.spec_yaml().empty());
    }
    if (pages == 0) {
      ASSERT_EQ(next, "job-2");
      // Cancelled after the first page: the next page starts after job-2 all the same.
      ASSERT_TRUE(state_->Cancel("job-1", "gone", now_).ok());
      ASSERT_TRUE(state_->Cancel("job-3", "gone", now_).ok());
    }
    token = next;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(listed, ids);

  // A filter pages over the jobs it keeps.
  std::string next;
  auto cancelled = state_->ListJobsPage(dlrm::v1::JOB_STATE_CANCELLED, "", 1, 1 << 20, &next);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_EQ(cancelled->size(), 1u);
  EXPECT_EQ((*cancelled)[0].job_id(), "job-1");
  cancelled = state_->ListJobsPage(dlrm::v1::JOB_STATE_CANCELLED, next, 1, 1 << 20, &next);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_EQ(cancelled->size(), 1u);
  EXPECT_EQ((*cancelled)[0].job_id(), "job-3");
  EXPECT_EQ(next, "") << "no cancelled job after job-3: no further page";

  // A byte budget smaller than one job: one job a page, never none.
  auto one = state_->ListJobsPage(dlrm::v1::JOB_STATE_UNSPECIFIED, "", 1000, 1, &next);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(next, "job-1");
  // The whole list fits a budget of all its bytes.
  int64_t all_bytes = 0;
  for (const auto& job : state_->ListJobs(dlrm::v1::JOB_STATE_UNSPECIFIED)) {
    all_bytes += static_cast<int64_t>(job.ByteSizeLong());
  }
  auto all = state_->ListJobsPage(dlrm::v1::JOB_STATE_UNSPECIFIED, "", 1000, all_bytes, &next);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  EXPECT_EQ(next, "");
  all = state_->ListJobsPage(dlrm::v1::JOB_STATE_UNSPECIFIED, "", 1000, all_bytes - 1, &next);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
  EXPECT_EQ(next, "job-4");

  for (const std::string bad : {"nope", "job-", "job-0", "job-x", "job-01", "job--3"}) {
    auto refused = state_->ListJobsPage(dlrm::v1::JOB_STATE_UNSPECIFIED, bad, 2, 1 << 20, &next);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("page_token '" + bad + "'"));
  }
}

// Workers read Criteo input (13 dense features, 26 categorical ones), so a model of another
// shape is refused at submission, naming the key and both numbers, instead of being queued to
// fail on its workers.
TEST_F(CoordinatorStateTest, SubmitRefusesAModelThatDoesNotFitCriteoInput) {
  const dlrm::v1::Job queued = Submit(*state_, 1);
  const std::string tiny = dlrm::testing::kTinySpec;

  dlrm::v1::SubmitJobRequest dense;
  std::string five = tiny;
  five.replace(five.find("dense_features: 13"), 18, "dense_features: 5");
  dense.set_spec_yaml(five);
  auto refused = state_->Submit(dense, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("model.dense_features: Criteo input has 13 dense features, got 5"));

  dlrm::v1::SubmitJobRequest tables;
  std::string twenty_five = tiny.substr(0, tiny.find("tables:"));
  twenty_five += "tables:\n  cardinalities: [";
  for (int t = 0; t < 25; ++t) absl::StrAppend(&twenty_five, t == 0 ? "" : ", ", 10);
  twenty_five += "]\n";
  tables.set_spec_yaml(twenty_five);
  refused = state_->Submit(tables, now_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("tables: Criteo input has 26 categorical features (a table each), got 25 "
                        "tables"));

  // Nothing was queued: the job list is the one job, and the next job takes the next id.
  auto list = state_->ListJobs(dlrm::v1::JOB_STATE_UNSPECIFIED);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].job_id(), queued.job_id());
  EXPECT_EQ(Submit(*state_, 1).job_id(), "job-2");
}

TEST_F(CoordinatorStateTest, BadInputsNameTheValue) {
  dlrm::v1::SubmitJobRequest bad;
  bad.set_spec_yaml(dlrm::testing::kBadSpec);
  auto s = state_->Submit(bad, now_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("model.bottom_mlp"));

  dlrm::v1::SubmitJobRequest negative;
  negative.set_spec_yaml(dlrm::testing::kTinySpec);
  negative.set_workers(-3);
  EXPECT_THAT(state_->Submit(negative, now_).status().message(), HasSubstr("workers -3"));

  // The global batch (2048 by default) is split evenly across the workers.
  dlrm::v1::SubmitJobRequest uneven;
  uneven.set_spec_yaml(dlrm::testing::kTinySpec);
  uneven.set_workers(3);
  auto split = state_->Submit(uneven, now_);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(split.status().message(), HasSubstr("training.batch_size 2048"));
  EXPECT_THAT(split.status().message(), HasSubstr("3 workers"));

  auto missing = state_->GetJob("job-42");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("job-42"));
  EXPECT_EQ(state_->Cancel("job-42", "", now_).status().code(), absl::StatusCode::kNotFound);

  dlrm::v1::RegisterRequest no_role;
  EXPECT_EQ(state_->Register(no_role, now_).status().code(), absl::StatusCode::kInvalidArgument);
  dlrm::v1::RegisterRequest ps_without_address;
  ps_without_address.set_role(dlrm::v1::ROLE_PS);
  EXPECT_EQ(state_->Register(ps_without_address, now_).status().code(),
            absl::StatusCode::kInvalidArgument);

  RegisterAs(*state_, dlrm::v1::ROLE_PS, "h:1");
  RegisterAs(*state_, dlrm::v1::ROLE_WORKER, "");
  dlrm::v1::Job job = Submit(*state_, 1);
  auto rank = Report(job.job_id(), 5, false);
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.status().message(), HasSubstr("rank 5"));
}

}  // namespace
}  // namespace dlrm::server
