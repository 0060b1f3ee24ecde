// The renderings of client/job_format.h without a coordinator: YAML that any YAML parser reads
// back to the same values as the JSON document, whatever the strings hold; and the messages
// that explain a job's state.
#include "client/job_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;

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

TEST(JobFormatMessage, PendingSaysWhatItNeedsAndWhatTheClusterHas) {
  dlrm::v1::Job job;
  job.set_job_id("job-3");
  job.set_state(dlrm::v1::JOB_STATE_PENDING);
  job.set_requested_workers(4);
  job.set_requested_ps(2);
  EXPECT_EQ(JobMessage(job, nullptr), "waiting for 4 idle workers and 2 parameter servers");

  ClusterSnapshot cluster;
  cluster.view.emplace();
  *cluster.view->add_members() = Worker("m-1", "trainer-a", "");
  *cluster.view->add_members() = Worker("m-2", "", "");
  *cluster.view->add_members() = Worker("m-3", "trainer-c", "job-1");
  dlrm::v1::Member gone = Worker("m-4", "trainer-d", "");
  gone.set_state(dlrm::v1::MEMBER_STATE_EXPIRED);
  *cluster.view->add_members() = gone;
  dlrm::v1::Member ps;
  ps.set_member_id("m-5");
  ps.set_name("ps-0");
  ps.set_role(dlrm::v1::ROLE_PS);
  ps.set_state(dlrm::v1::MEMBER_STATE_ALIVE);
  ps.set_shard_index(0);
  *cluster.view->add_members() = ps;
  cluster.pending_job_ids = std::vector<std::string>{"job-2", "job-3", "job-4"};
  EXPECT_EQ(JobMessage(job, &cluster),
            "waiting for 4 idle workers and 2 parameter servers; the cluster has 2 idle workers "
            "(trainer-a, m-2), 1 busy worker, 1 parameter server (ps-0); queued behind job-2 "
            "(jobs start in submission order)");

  // The coordinator's own message wins.
  job.set_message("needs a GPU");
  EXPECT_EQ(JobMessage(job, &cluster), "needs a GPU");
}

TEST(JobFormatMessage, OtherStates) {
  dlrm::v1::Job job;
  job.set_state(dlrm::v1::JOB_STATE_FAILED);
  EXPECT_EQ(JobMessage(job, nullptr), "no reason recorded");
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(JobMessage(job, nullptr), "");
  job.set_state(dlrm::v1::JOB_STATE_PENDING);
  job.set_requested_workers(1);
  EXPECT_THAT(JobEventLine(job, nullptr),
              HasSubstr("PENDING (waiting for 1 idle worker and at least 1 parameter server)"));
}

TEST(JobFormatEventLine, ShowsPercentAndEtaWhenTheTotalIsKnown) {
  dlrm::v1::Job job;
  job.set_job_id("job-7");
  job.set_state(dlrm::v1::JOB_STATE_RUNNING);
  job.set_started_ms(1'000'000);
  job.mutable_progress()->set_step(50);
  job.mutable_progress()->set_time_ms(1'010'000);  // 50 steps in 10 s
  (*job.mutable_progress()->mutable_metrics())["total_steps"] = 200;
  job.set_total_samples(51'200);
  // 150 steps left at 5 steps/s; 51,200 samples in 10 s.
  EXPECT_THAT(JobEventLine(job, nullptr), HasSubstr("step 50/200 (25%) ETA 30s"));
  EXPECT_THAT(JobEventLine(job, nullptr), HasSubstr("loss 0.0000 5120 samples/s"));
  job.mutable_progress()->mutable_metrics()->erase("total_steps");
  EXPECT_THAT(JobEventLine(job, nullptr), HasSubstr("step 50 samples"));
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
