// The renderings of client/job_format.h and client/output_format.h without a coordinator: YAML
// that any YAML parser reads back to the same values as the JSON document, whatever the strings
// hold; the messages that explain a job's state; and how fast a watched job trains (run_speed.h).
#include "client/job_format.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/output_format.h"
#include "client/run_speed.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Strings that break naive YAML: indicators, keywords, numbers, quotes, escapes, and multi-line
// text with every kind of trailing newline and indentation.
const std::vector<std::string>& TrickyStrings() {
  static const std::vector<std::string> kStrings = {
      "",
      "plain words",
      "job-1",
      "127.0.0.1:50051",
      "key: value",
      "ends with colon:",
      "# comment",
      "value # comment",
      "- item",
      "? key",
      "*alias",
      "&anchor",
      "!tag",
      "|",
      ">",
      "%directive",
      "@reserved",
      "`reserved",
      "{flow: map}",
      "[flow, seq]",
      "yes",
      "No",
      "on",
      "OFF",
      "true",
      "null",
      "~",
      "Null",
      "y",
      "n",
      ".inf",
      "-.Inf",
      ".nan",
      "123",
      "0x1F",
      "0o17",
      "1e3",
      "1_000",
      "1:20",
      "2001-12-14",
      "-",
      "---",
      "...",
      " leading space",
      "trailing space ",
      "'single'",
      "\"double\"",
      "back\\slash",
      "tab\there",
      "carriage\rreturn",
      "bell\x07",
      "caf\xc3\xa9 \xe2\x82\xac",
      "line one\nline two",
      "line one\nline two\n",
      "line one\nline two\n\n\n",
      "\nstarts with newline",
      "  indented first line\nsecond",
      "first\n  indented second\n",
      "blank\n\nin the middle\n",
      "spaces only line\n   \nafter",
      "tab\tin a block\n\tline starting with tab\n",
      "name: tiny\nmodel:\n  bottom_mlp: [8, 4]\n  top_mlp: [8, 1]\n# comment\n",
      "\n",
      "\n\n",
  };
  return kStrings;
}

TEST(JobFormatYaml, EveryStringReadsBackUnchanged) {
  for (const std::string& s : TrickyStrings()) {
    dlrm::v1::Job job;
    job.set_job_id("job-1");
    job.set_name(s);
    job.set_spec_yaml(s);
    job.set_message(s);
    (*job.mutable_progress()->mutable_metrics())[s] = 0.5;
    const std::string yaml = ToYaml(job);
    YAML::Node node;
    try {
      node = YAML::Load(yaml);
    } catch (const YAML::Exception& e) {
      ADD_FAILURE() << "string '" << s << "': " << e.what() << "\n" << yaml;
      continue;
    }
    EXPECT_EQ(node["name"].as<std::string>(), s) << yaml;
    EXPECT_EQ(node["spec_yaml"].as<std::string>(), s) << yaml;
    EXPECT_EQ(node["message"].as<std::string>(), s) << yaml;
    EXPECT_EQ(node["progress"]["metrics"][s].as<double>(), 0.5) << yaml;
    EXPECT_EQ(node["job_id"].as<std::string>(), "job-1");
  }
}

TEST(JobFormatYaml, HoldsWhatJsonHolds) {
  dlrm::v1::Job job;
  job.set_job_id("job-7");
  job.set_state(dlrm::v1::JOB_STATE_SUCCEEDED);
  job.set_requested_workers(3);
  job.set_total_samples(9007199254740993);  // above 2^53: only exact as a string
  job.add_worker_ids("w-0");
  job.add_worker_ids("w-1");
  job.add_rank_samples(64);
  job.add_rank_samples(128);
  job.mutable_progress()->set_loss(0.1);
  job.mutable_final_metrics()->set_auc(0.7123456789012345);
  job.mutable_final_metrics()->set_logloss(1e-300);
  const auto json = nlohmann::json::parse(ToJson(job));
  const std::string yaml_text = ToYaml(job);
  const YAML::Node yaml = YAML::Load(yaml_text);
  EXPECT_EQ(yaml["state"].as<std::string>(), json["state"].get<std::string>());
  EXPECT_EQ(yaml["requested_workers"].as<int>(), json["requested_workers"].get<int>());
  EXPECT_EQ(yaml["total_samples"].as<std::string>(), "9007199254740993");
  EXPECT_EQ(json["total_samples"], "9007199254740993");
  EXPECT_EQ(yaml["progress"]["loss"].as<double>(), 0.1);
  EXPECT_EQ(yaml["final_metrics"]["auc"].as<double>(), 0.7123456789012345);
  EXPECT_EQ(yaml["final_metrics"]["logloss"].as<double>(), 1e-300);
  ASSERT_EQ(yaml["worker_ids"].size(), 2u);
  EXPECT_EQ(yaml["worker_ids"][1].as<std::string>(), "w-1");
  EXPECT_EQ(yaml["rank_samples"][1].as<std::string>(), "128");
  EXPECT_TRUE(yaml["ps_addresses"].IsSequence());
  EXPECT_EQ(yaml["ps_addresses"].size(), 0u);
  // Every key of the JSON document is in the YAML one.
  for (const auto& [key, value] : json.items()) EXPECT_TRUE(yaml[key]) << key;
  // Fields in proto order, as people read them.
  EXPECT_LT(yaml_text.find("job_id:"), yaml_text.find("name:"));
  EXPECT_LT(yaml_text.find("name:"), yaml_text.find("state:"));
}

TEST(JobFormatYaml, ListsOfMessagesAndEmptyLists) {
  dlrm::v1::GetClusterViewResponse view;
  view.set_epoch(4);
  auto* m = view.add_members();
  m->set_member_id("m-1");
  m->set_name("ps-0");
  m->set_role(dlrm::v1::ROLE_PS);
  m->mutable_capabilities()->set_cpu_cores(16);
  view.add_members()->set_member_id("m-2");
  view.add_shard_map("127.0.0.1:7");
  view.add_shard_map("");
  const YAML::Node yaml = YAML::Load(ToYaml(view));
  ASSERT_EQ(yaml["members"].size(), 2u);
  EXPECT_EQ(yaml["members"][0]["name"].as<std::string>(), "ps-0");
  EXPECT_EQ(yaml["members"][0]["role"].as<std::string>(), "ROLE_PS");
  EXPECT_EQ(yaml["members"][0]["capabilities"]["cpu_cores"].as<int>(), 16);
  EXPECT_EQ(yaml["members"][1]["member_id"].as<std::string>(), "m-2");
  EXPECT_EQ(yaml["shard_map"][1].as<std::string>(), "");
  EXPECT_EQ(yaml["epoch"].as<std::string>(), "4");

  const YAML::Node empty = YAML::Load(ToYaml(dlrm::v1::ListJobsResponse()));
  EXPECT_TRUE(empty["jobs"].IsSequence());
  EXPECT_EQ(empty["jobs"].size(), 0u);
}

TEST(JobFormatDocument, OneDocumentPerFormat) {
  dlrm::v1::Job job;
  job.set_job_id("job-1");
  job.set_spec_yaml("name: a\nx: 1\n");
  const std::string json = ToDocument(job, OutputFormat::kJson);
  EXPECT_EQ(nlohmann::json::parse(json)["spec_yaml"], "name: a\nx: 1\n");
  EXPECT_EQ(json.back(), '\n');
  const std::string jsonl = ToDocument(job, OutputFormat::kJsonl);
  EXPECT_EQ(jsonl.find('\n'), jsonl.size() - 1) << jsonl;
  EXPECT_EQ(nlohmann::json::parse(jsonl)["job_id"], "job-1");
  EXPECT_EQ(YAML::Load(ToDocument(job, OutputFormat::kYaml))["job_id"].as<std::string>(), "job-1");
}

// A map's keys (a job's progress.metrics) come sorted, the same on every call: the JSON printer
// reads the wire form, whose map entries follow a hash table's order that differs from process to
// process. Each document is printed from a fresh copy, as each dlrmctl call parses its own.
TEST(JobFormatDocument, MapKeysComeSorted) {
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back(absl::StrCat("metric_", (i * 17) % 40));
  dlrm::v1::Job job;
  job.set_job_id("job-1");
  for (const std::string& key : keys) (*job.mutable_progress()->mutable_metrics())[key] = 1.5;
  std::sort(keys.begin(), keys.end());
  for (OutputFormat format : {OutputFormat::kJson, OutputFormat::kJsonl}) {
    dlrm::v1::Job copy;
    ASSERT_TRUE(copy.ParseFromString(job.SerializeAsString()));
    const std::string json = ToDocument(copy, format);
    const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(json);
    std::vector<std::string> order;
    for (const auto& [key, value] : doc["progress"]["metrics"].items()) order.push_back(key);
    EXPECT_EQ(order, keys) << json;
  }
}

TEST(JobFormatOutput, ParsesEveryNamedFormatAndNothingElse) {
  for (const std::string& name : OutputFormatNames()) {
    ASSERT_TRUE(ParseOutputFormat(name).has_value()) << name;
  }
  EXPECT_EQ(ParseOutputFormat("wide"), OutputFormat::kWide);
  EXPECT_EQ(ParseOutputFormat("jsonl"), OutputFormat::kJsonl);
  EXPECT_FALSE(ParseOutputFormat("xml").has_value());
  EXPECT_FALSE(ParseOutputFormat("JSON").has_value());
  EXPECT_TRUE(IsDocumentFormat(OutputFormat::kYaml));
  EXPECT_FALSE(IsDocumentFormat(OutputFormat::kWide));
}

dlrm::v1::Member Worker(const std::string& id, const std::string& name, const std::string& job) {
  dlrm::v1::Member m;
  m.set_member_id(id);
  m.set_name(name);
  m.set_role(dlrm::v1::ROLE_WORKER);
  m.set_state(dlrm::v1::MEMBER_STATE_ALIVE);
  m.set_job_id(job);
  m.set_rank(job.empty() ? -1 : 0);
  m.set_shard_index(-1);
  return m;
}

TEST(JobFormatMessage, SubmitWarnsOnlyWhenTheClusterHasFewerMembersThanAsked) {
  dlrm::v1::Job job;
  job.set_job_id("job-3");
  job.set_requested_workers(4);
  job.set_requested_ps(2);
  dlrm::v1::GetClusterViewResponse view;
  *view.add_members() = Worker("m-1", "trainer-a", "");
  *view.add_members() = Worker("m-2", "", "job-1");  // busy: comes free when job-1 ends
  dlrm::v1::Member gone = Worker("m-3", "trainer-c", "");
  gone.set_state(dlrm::v1::MEMBER_STATE_EXPIRED);  // not counted
  *view.add_members() = gone;
  dlrm::v1::Member ps;
  ps.set_member_id("m-5");
  ps.set_role(dlrm::v1::ROLE_PS);
  ps.set_state(dlrm::v1::MEMBER_STATE_ALIVE);
  *view.add_members() = ps;
  EXPECT_EQ(FewerMembersThanAsked(job, view),
            "job-3 asks for 4 workers and 2 are registered; 2 parameter servers and 1 is "
            "registered: it stays PENDING until more register, and jobs submitted after it wait "
            "behind it (jobs start in submission order)");
  job.set_requested_ps(1);
  EXPECT_EQ(FewerMembersThanAsked(job, view),
            "job-3 asks for 4 workers and 2 are registered: it stays PENDING until more register, "
            "and jobs submitted after it wait behind it (jobs start in submission order)");
  job.set_requested_workers(2);
  EXPECT_EQ(FewerMembersThanAsked(job, view), "");
  job.set_requested_ps(0);  // 0: as many as there are
  EXPECT_EQ(FewerMembersThanAsked(job, view), "");
}

// describe (-o wide) says, for each recovery, where its run rolled back to once rank 0 has said.
TEST(JobFormatDetail, ARecoverySaysWhereItRolledBackTo) {
  dlrm::v1::Job job;
  job.set_job_id("job-4");
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  job.set_recoveries(2);
  job.set_max_recoveries(3);
  for (int i = 0; i < 3; ++i) {
    dlrm::v1::JobRecovery* r = job.add_recovery_history();
    r->set_started_ms(1'700'000'000'000 + i * 60'000);
    r->set_resumed_ms(r->started_ms() + 6'500);
    r->set_step_at_loss(701);
    r->set_reason("member worker-2 lease expired");
  }
  job.mutable_recovery_history(0)->set_restored_from("/ck/ckpt-000000000650");
  job.mutable_recovery_history(0)->set_restored_step(650);
  job.mutable_recovery_history(1)->set_restored_step(0);  // no checkpoint yet: the start
  const std::string detail = JobDetail(job, /*wide=*/true);
  EXPECT_THAT(detail, HasSubstr("at step 701, running again after 6.5 s from "
                                "/ck/ckpt-000000000650 (step 650): member worker-2"));
  EXPECT_THAT(detail, HasSubstr("running again after 6.5 s from the start: member"));
  EXPECT_THAT(detail, HasSubstr("running again after 6.5 s: member"));  // rank 0 not heard yet
}

TEST(JobFormatMessage, OtherStates) {
  dlrm::v1::Job job;
  job.set_state(dlrm::v1::JOB_STATE_FAILED);
  EXPECT_EQ(JobMessage(job), "no reason recorded");
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(JobMessage(job), "");
  job.set_state(dlrm::v1::JOB_STATE_PENDING);
  job.set_message("waiting for 1 idle worker and at least 1 parameter server");
  EXPECT_THAT(JobEventLine(job),
              HasSubstr("PENDING (waiting for 1 idle worker and at least 1 parameter server)"));
}

// A job that succeeded without eval data shows its metrics as n/a in every form, not the
// AUC 0.5, logloss 0 and accuracy 0 it showed before.
TEST(JobFormatMetrics, NoEvalDataIsNotShownAsZeros) {
  dlrm::v1::Job job;
  job.set_job_id("job-9");
  job.set_state(dlrm::v1::JOB_STATE_SUCCEEDED);
  job.mutable_final_metrics()->set_samples_per_sec(1234.5);
  EXPECT_THAT(JobEventLine(job), HasSubstr(" auc n/a (no eval data) samples/s 1234.5"));
  EXPECT_THAT(JobDetail(job, false), HasSubstr("auc:"));
  EXPECT_THAT(JobDetail(job, false), HasSubstr("n/a (no eval data)"));
  EXPECT_THAT(JobDetail(job, false), Not(HasSubstr("0.500000")));
  EXPECT_THAT(JobTable({job}, false), HasSubstr("n/a"));
  job.mutable_final_metrics()->set_auc(0.75);
  job.mutable_final_metrics()->set_logloss(0.45);
  job.mutable_final_metrics()->set_accuracy(0.8);
  EXPECT_THAT(JobEventLine(job),
              HasSubstr(" auc 0.7500 logloss 0.4500 accuracy 0.8000 samples/s 1234.5"));
  EXPECT_THAT(JobTable({job}, false), HasSubstr("0.7500"));
}

// A RUNNING job's event as the coordinator sends it: the newest report at `time_ms`, and each
// rank's samples.
dlrm::v1::Job Running(int64_t time_ms, int64_t step, std::vector<int64_t> rank_samples) {
  dlrm::v1::Job job;
  job.set_job_id("job-7");
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  job.set_started_ms(1'000'000);
  job.mutable_progress()->set_step(step);
  job.mutable_progress()->set_time_ms(time_ms);
  int64_t total = 0;
  for (int64_t s : rank_samples) {
    job.add_rank_samples(s);
    total += s;
  }
  job.set_total_samples(total);
  return job;
}

TEST(JobFormatEventLine, ShowsPercentAndEtaWhenTheTotalIsKnown) {
  RunSpeed speed;
  dlrm::v1::Job job = Running(1'010'000, 50, {51'200});
  (*job.mutable_progress()->mutable_metrics())["total_steps"] = 200;
  speed.Observe(job);
  // One report: no rate yet.
  EXPECT_THAT(JobEventLine(job, &speed), HasSubstr("step 50/200 (25%) samples 51200"));
  EXPECT_THAT(JobEventLine(job, &speed), Not(HasSubstr("ETA")));
  EXPECT_THAT(JobEventLine(job, &speed), Not(HasSubstr("samples/s")));
  job = Running(1'020'000, 100, {102'400});  // 50 steps and 51,200 samples in 10 s
  (*job.mutable_progress()->mutable_metrics())["total_steps"] = 200;
  speed.Observe(job);
  // 100 steps left at 5 steps/s.
  EXPECT_THAT(JobEventLine(job, &speed), HasSubstr("step 100/200 (50%) ETA 20s"));
  EXPECT_THAT(JobEventLine(job, &speed), HasSubstr("loss 0.0000 5120 samples/s"));
  job.mutable_progress()->mutable_metrics()->erase("total_steps");
  EXPECT_THAT(JobEventLine(job, &speed), HasSubstr("step 100 samples"));
  // Without the watcher's measure, no rate.
  EXPECT_THAT(JobEventLine(job), Not(HasSubstr("samples/s")));
}

// A job that started but whose workers reported no step yet (or that failed before its first:
// a --resume-from that does not exist) has no loss: "-", not 0, which reads as a perfect model,
// in the detail, the wide table and the watch line; a reported loss of 0 is still printed.
TEST(JobFormatLoss, NoProgressReportedShowsNoLoss) {
  dlrm::v1::Job job;
  job.set_job_id("job-2");
  job.set_state(dlrm::v1::JOB_STATE_FAILED);
  job.set_started_ms(1'000'000);
  job.set_message("rank 0 (worker-1) failed");
  EXPECT_THAT(JobDetail(job, /*wide=*/false), HasSubstr("loss:     -\n"));
  EXPECT_THAT(JobDetail(job, /*wide=*/false), Not(HasSubstr("0.000000")));
  EXPECT_THAT(JobTable({job}, /*wide=*/true), Not(HasSubstr("0.0000")));
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  job.clear_message();
  EXPECT_EQ(JobEventLine(job), "job-2 RUNNING step 0 samples 0 loss -");

  job = Running(1'010'000, 0, {0});
  EXPECT_THAT(JobEventLine(job), HasSubstr("loss 0.0000"));
  EXPECT_THAT(JobDetail(job, /*wide=*/false), HasSubstr("loss:     0.000000"));
  EXPECT_THAT(JobTable({job}, /*wide=*/true), HasSubstr("0.0000"));
}

// Messages come from others (a cancel's --reason, a worker's error quoting a file name): their
// control characters are shown as \xNN, never sent to the reader's terminal (which would recolour
// or clear it, or redraw a line over another). Newlines stay in the detail and history and
// become spaces on the one-line forms.
TEST(JobFormatMessage, ControlCharactersAreShownNotSentToTheTerminal) {
  dlrm::v1::Job job;
  job.set_job_id("job-7");
  job.set_state(dlrm::v1::JOB_STATE_CANCELLED);
  job.set_message("cancelled: a\nb \x1b[2J\x1b[31mred\r\x7f");
  dlrm::v1::JobStateChange* change = job.add_history();
  change->set_state(dlrm::v1::JOB_STATE_CANCELLED);
  change->set_message(job.message());
  job.add_recovery_history()->set_reason("lost \x1b]0;title\x07");
  job.set_recoveries(1);
  const std::string shown = "cancelled: a\nb \\x1b[2J\\x1b[31mred\\x0d\\x7f";
  EXPECT_EQ(JobMessage(job), shown);
  EXPECT_THAT(HistoryLine(*change), ::testing::EndsWith(shown));
  EXPECT_THAT(JobDetail(job, /*wide=*/true), HasSubstr("lost \\x1b]0;title\\x07"));
  EXPECT_THAT(JobTable({job}, /*wide=*/false),
              HasSubstr("cancelled: a b \\x1b[2J\\x1b[31mred\\x0d\\x7f"));
  EXPECT_EQ(JobEventLine(job), "job-7 CANCELLED (cancelled: a b \\x1b[2J\\x1b[31mred\\x0d\\x7f)");
  for (const std::string& text : {JobDetail(job, true), JobTable({job}, true), HistoryLine(*change),
                                  JobDescription(job, {}), JobEventLine(job)}) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  }
}

// A job resumed from a checkpoint at step 900 of 1760, on 2 workers: its totals start at the
// checkpoint's, and each rank's first report adds its share of them at once. The rate and the
// ETA count only what the run trains: 2 x 51,200 samples and 50 steps in 2 s.
TEST(JobFormatEventLine, ResumedJobCountsOnlyWhatThisRunTrains) {
  RunSpeed speed;
  std::vector<std::string> lines;
  auto observe = [&](dlrm::v1::Job job) {
    (*job.mutable_progress()->mutable_metrics())["total_steps"] = 1760;
    speed.Observe(job);
    lines.push_back(JobEventLine(job, &speed));
  };
  observe(Running(1'001'000, 901, {916'384, 0}));        // rank 0's first report
  observe(Running(1'001'100, 901, {916'384, 921'504}));  // rank 1's: the total doubles
  EXPECT_THAT(lines.back(), HasSubstr("samples 1837888"));
  EXPECT_THAT(lines.back(), Not(HasSubstr("samples/s")));  // nothing trained yet
  observe(Running(1'003'100, 950, {967'584, 921'504}));
  observe(Running(1'003'100, 951, {967'584, 972'704}));
  const std::optional<double> rate = speed.samples_per_sec();
  ASSERT_TRUE(rate.has_value());
  EXPECT_NEAR(*rate, 102'400 / 2.1, 1);  // 48,762 samples/s, not the 600k of totals / time
  // 50 steps in 2.1 s: 809 steps left take 34 s.
  EXPECT_THAT(lines.back(), HasSubstr("step 951/1760 (54%) ETA 34s"));
  EXPECT_THAT(lines.back(), HasSubstr(" 48762 samples/s"));
}

// `dlrm local --resume-from` on the same resumed job: its progress line shows the rate this run
// trains, not the totals (the checkpoint's 1.8M samples) over the time since the command started,
// and no line before that rate is measured.
TEST(JobProgressMeterTest, ResumedJobShowsTheRateThisRunTrains) {
  JobProgressMeter meter;
  auto observe = [&](dlrm::v1::Job job) {
    (*job.mutable_progress()->mutable_metrics())["total_steps"] = 1760;
    return meter.Observe(job);
  };
  dlrm::v1::Job pending = Running(0, 0, {0, 0});
  pending.set_state(dlrm::v1::JOB_STATE_PENDING);
  EXPECT_FALSE(observe(pending).has_value());
  EXPECT_FALSE(observe(Running(1'001'000, 901, {916'384, 0})).has_value());
  EXPECT_FALSE(observe(Running(1'001'100, 901, {916'384, 921'504})).has_value());
  // Rank 0's second report, 2.1 s after the first: 51,200 samples trained so far.
  ASSERT_TRUE(observe(Running(1'003'100, 950, {967'584, 921'504})).has_value());
  const std::optional<ProgressFigures> f = observe(Running(1'003'100, 951, {967'584, 972'704}));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 951);
  EXPECT_EQ(f->samples, 1'940'288);
  EXPECT_EQ(f->total_steps, 1760);
  EXPECT_NEAR(f->samples_per_sec, 102'400 / 2.1, 1);  // 48,762 samples/s
  ASSERT_TRUE(f->steps_per_sec.has_value());          // for the ETA: 50 steps in 2.1 s
  EXPECT_NEAR(*f->steps_per_sec, 50 / 2.1, 1e-6);
  // Without the total, the line shows no percent (and ProgressLine no ETA).
  EXPECT_EQ(meter.Observe(Running(1'004'100, 975, {992'160, 997'280}))->total_steps, -1);
  // A job that ended draws no more line.
  dlrm::v1::Job done = Running(1'004'100, 975, {992'160, 997'280});
  done.set_state(dlrm::v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(meter.Observe(done).has_value());
}

// A resumed job's total samples are whole only once every rank has reported (each brings its
// share of the checkpoint's with its first report).
TEST(EveryRankReportedTest, OnlyWhenNoRankIsSilent) {
  EXPECT_FALSE(EveryRankReported(Running(1'001'000, 901, {})));
  EXPECT_FALSE(EveryRankReported(Running(1'001'000, 901, {916'384, 0})));
  EXPECT_FALSE(EveryRankReported(Running(1'001'000, 901, {0, 916'384})));
  EXPECT_TRUE(EveryRankReported(Running(1'001'100, 901, {916'384, 921'504})));
  EXPECT_TRUE(EveryRankReported(Running(1'001'100, 1, {512})));
}

// A recovery rolls the job back to its checkpoint: the measure starts over, and the samples
// trained again are counted as they come, not the drop.
TEST(JobFormatEventLine, RecoveryStartsTheMeasureOver) {
  RunSpeed speed;
  speed.Observe(Running(1'001'000, 100, {102'400}));
  speed.Observe(Running(1'011'000, 200, {204'800}));
  EXPECT_NEAR(*speed.samples_per_sec(), 10'240, 1e-6);
  dlrm::v1::Job recovering = Running(1'011'000, 200, {204'800});
  recovering.set_state(dlrm::v1::JOB_STATE_RECOVERING);
  recovering.set_recoveries(1);
  speed.Observe(recovering);
  EXPECT_FALSE(speed.samples_per_sec().has_value());
  dlrm::v1::Job again = Running(1'020'000, 150, {153'600});  // from the checkpoint at step 150
  again.set_recoveries(1);
  speed.Observe(again);
  again = Running(1'022'000, 170, {174'080});
  again.set_recoveries(1);
  speed.Observe(again);
  EXPECT_NEAR(*speed.samples_per_sec(), 10'240, 1e-6);
  EXPECT_NEAR(*speed.steps_per_sec(), 10, 1e-6);
  // A rank that goes back with no change of state or recoveries seen (events coalesce): the same.
  again = Running(1'030'000, 120, {122'880});
  again.set_recoveries(1);
  speed.Observe(again);
  EXPECT_FALSE(speed.samples_per_sec().has_value());
  again = Running(1'032'000, 140, {143'360});
  again.set_recoveries(1);
  speed.Observe(again);
  EXPECT_NEAR(*speed.samples_per_sec(), 10'240, 1e-6);
}

TEST(JobFormatTable, NoRecoveryLeftComesFirstOnOneLine) {
  dlrm::v1::Job job;
  job.set_job_id("job-3");
  job.set_name("criteo");
  job.set_state(dlrm::v1::JOB_STATE_FAILED);
  job.set_message(
      "rank 0 (m-9) lost a peer: Gloo connectFullMesh failed: Connection reset\nby peer; no "
      "recovery left (3 of max_recoveries 3 used); recovery 1: member m-4 (WORKER rank 1) lease "
      "expired; recovery 2: member m-7 (PS shard 0) left; recovery 3: rank 1 (m-8) lost a peer: "
      "timeout");
  for (const bool wide : {false, true}) {
    const std::vector<std::string> lines =
        absl::StrSplit(JobTable({job}, wide), '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 2u) << lines.back();  // the header and one line
    EXPECT_THAT(lines[1], HasSubstr("no recovery left (3 of max_recoveries 3 used): rank 0 (m-9) "
                                    "lost a peer: Gloo connectFullMesh failed: Connection reset "
                                    "by peer"));
    EXPECT_THAT(lines[1], Not(HasSubstr("recovery 1:")));
  }
  // The job's detail keeps the coordinator's whole message.
  EXPECT_THAT(JobDetail(job, false), HasSubstr("recovery 3: rank 1 (m-8)"));
}

TEST(JobFormatSpec, ShortestFloats) {
  EXPECT_EQ(ShortestFloats("  beta1: 0.90000000000000002\n  learning_rate: "
                           "0.050000000000000003\n"),
            "  beta1: 0.9\n  learning_rate: 0.05\n");
  EXPECT_EQ(ShortestFloats("dense: {type: adam, learning_rate: 0.001, epsilon: "
                           "1.0000000000000001e-05}\nx: [0.10000000000000001, 2]"),
            "dense: {type: adam, learning_rate: 0.001, epsilon: 1e-05}\nx: [0.1, 2]");
  EXPECT_EQ(ShortestFloats("- 0.20000000000000001\n- 3\n"), "- 0.2\n- 3\n");
  EXPECT_EQ(ShortestFloats("a: 2.0000000000000000\n"), "a: 2.0\n");  // still a float
  // Left alone: what is not a plain float of 16 digits or more, and what is shortest already.
  for (const char* yaml :
       {"name: \"0.90000000000000002\"\n", "name: '0.90000000000000002'", "name: 1.10\n",
        "train: [/data/0.10000000000000001.bin]\n", "# 0.10000000000000001\n",
        "v: 0.30000000000000004\n", "steps: 12345678901234567\n", "x: 0.10000000000000001 m\n",
        "name: v0.10000000000000001\n"}) {
    EXPECT_EQ(ShortestFloats(yaml), yaml);
  }
  // Every value reads back the same.
  const std::string spec =
      "optimizer:\n  dense: {type: adam, learning_rate: 0.0030000000000000001, beta1: "
      "0.90000000000000002, beta2: 0.999}\ndata:\n  eval_fraction: 0.10000000000000001\n";
  const YAML::Node before = YAML::Load(spec);
  const YAML::Node after = YAML::Load(ShortestFloats(spec));
  EXPECT_EQ(after["optimizer"]["dense"]["learning_rate"].as<double>(),
            before["optimizer"]["dense"]["learning_rate"].as<double>());
  EXPECT_EQ(after["optimizer"]["dense"]["beta1"].as<double>(),
            before["optimizer"]["dense"]["beta1"].as<double>());
  EXPECT_EQ(after["data"]["eval_fraction"].as<double>(),
            before["data"]["eval_fraction"].as<double>());
}

TEST(JobFormatDocument, HistoryIsOneDocument) {
  std::vector<dlrm::v1::JobStateChange> history(3);
  history[0].set_state(dlrm::v1::JOB_STATE_PENDING);
  history[0].set_time_ms(1'000);
  history[0].set_message("queued for 1 worker(s)");
  history[1].set_state(dlrm::v1::JOB_STATE_RUNNING);
  history[1].set_time_ms(2'000);
  history[1].set_message("started: \"quoted\"\nand a second line");
  history[1].set_job_epoch(3);
  history[2].set_state(dlrm::v1::JOB_STATE_FAILED);
  history[2].set_time_ms(3'000);
  history[2].set_message("key: value # not a comment");
  const auto json = nlohmann::json::parse(HistoryDocument("job-2", history, OutputFormat::kJson));
  EXPECT_EQ(json["job_id"], "job-2");
  ASSERT_EQ(json["history"].size(), 3u);
  const YAML::Node yaml = YAML::Load(HistoryDocument("job-2", history, OutputFormat::kYaml));
  EXPECT_EQ(yaml["job_id"].as<std::string>(), "job-2");
  ASSERT_EQ(yaml["history"].size(), 3u);
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(json["history"][i], nlohmann::json::parse(ToJson(history[i]))) << i;
    EXPECT_EQ(yaml["history"][i]["state"].as<std::string>(), json["history"][i]["state"]);
    EXPECT_EQ(yaml["history"][i]["message"].as<std::string>(), history[i].message());
    EXPECT_EQ(yaml["history"][i]["time_ms"].as<std::string>(), json["history"][i]["time_ms"]);
  }
  // No changes: still one document with an empty list.
  EXPECT_TRUE(
      nlohmann::json::parse(HistoryDocument("job-2", {}, OutputFormat::kJson))["history"].empty());
  EXPECT_EQ(YAML::Load(HistoryDocument("job-2", {}, OutputFormat::kYaml))["history"].size(), 0u);
}

TEST(JobFormatMembers, TableShowsNamesAndDashesForNone) {
  dlrm::v1::GetClusterViewResponse view;
  *view.add_members() = Worker("m-1", "trainer-a", "job-1");
  *view.add_members() = Worker("m-2", "", "");
  const std::string table = MemberTable(view, 0, /*wide=*/false);
  EXPECT_THAT(table, HasSubstr("MEMBER  NAME"));
  EXPECT_THAT(table, ::testing::ContainsRegex("m-1 +trainer-a +WORKER"));
  EXPECT_THAT(table, ::testing::ContainsRegex("m-2 +- +WORKER"));
  EXPECT_THAT(MemberTable(view, 0, /*wide=*/true), HasSubstr("REGISTERED"));
}

}  // namespace
}  // namespace dlrm::client
