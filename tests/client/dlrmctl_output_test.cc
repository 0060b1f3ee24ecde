// What a dlrmctl user sees: one document per call under -o json|yaml|jsonl, member names, why a
// job is pending, exit codes per kind of error, the command list on an unknown command, the
// version. Against a real in-process coordinator (tests/client/client_fixture.h).
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_util.h"
#include "embedding/checkpoint_manifest.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/client_fixture.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DlrmctlOutputTest : public ClientTest {};

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// A job asking for more workers than have registered would wait, and hold up every later job,
// with no word at submit: it now gets a warning on stderr (stdout stays the job id alone).
TEST_F(DlrmctlOutputTest, SubmitWarnsWhenTheClusterHasFewerWorkersThanTheJobAsks) {
  std::string out, err;
  RegisterPs();
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--workers", "4"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(out, "job-1\n");
  EXPECT_THAT(err, HasSubstr("dlrmctl: warning: job-1 asks for 4 workers and 0 are registered: it "
                             "stays PENDING until more register"))
      << err;
  for (int i = 0; i < 4; ++i) RegisterMember(dlrm::v1::ROLE_WORKER);
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--workers", "4"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(err, "");
}

TEST_F(DlrmctlOutputTest, ListIsOneDocumentInEveryDocumentFormat) {
  std::string out, err;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Ctl({"submit", "-f", spec_path_}, &out, &err), kExitOk) << err;
  }

  ASSERT_EQ(Ctl({"list", "-o", "json"}, &out, &err), kExitOk) << err;
  const auto json = nlohmann::json::parse(out);  // throws unless the whole output is one value
  ASSERT_EQ(json["jobs"].size(), 3u) << out;
  EXPECT_EQ(json["jobs"][0]["job_id"], "job-1");
  EXPECT_EQ(json["jobs"][2]["state"], "JOB_STATE_PENDING");

  ASSERT_EQ(Ctl({"list", "-o", "yaml"}, &out, &err), kExitOk) << err;
  const YAML::Node yaml = YAML::Load(out);
  ASSERT_TRUE(yaml["jobs"].IsSequence()) << out;
  ASSERT_EQ(yaml["jobs"].size(), 3u);
  EXPECT_EQ(yaml["jobs"][1]["job_id"].as<std::string>(), "job-2");
  EXPECT_EQ(yaml["jobs"][1]["name"].as<std::string>(), "tiny");
  EXPECT_EQ(yaml["jobs"][1]["requested_workers"].as<int>(), 1);
  // yaml holds what json holds.
  EXPECT_EQ(yaml["jobs"][1]["created_ms"].as<std::string>(),
            json["jobs"][1]["created_ms"].get<std::string>());

  ASSERT_EQ(Ctl({"list", "-o", "jsonl"}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Lines(out).size(), 1u) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["jobs"].size(), 3u);

  // Filtered to nothing: still one document.
  ASSERT_EQ(Ctl({"list", "--state", "running", "-o", "json"}, &out, &err), kExitOk) << err;
  EXPECT_TRUE(nlohmann::json::parse(out)["jobs"].empty()) << out;

  ASSERT_EQ(Ctl({"list", "-o", "wide"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(Lines(out).front(), HasSubstr("CREATED"));
  EXPECT_EQ(Lines(out).size(), 4u) << out;
}

TEST_F(DlrmctlOutputTest, StatusYamlKeepsTheSpecAndFieldOrder) {
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "-o", "yaml"}, &out, &err), kExitOk) << err;
  const YAML::Node submitted = YAML::Load(out);
  EXPECT_EQ(submitted["job_id"].as<std::string>(), "job-1");
  EXPECT_EQ(out.rfind("job_id: job-1\n", 0), 0u) << "fields in proto order:\n" << out;

  ASSERT_EQ(Ctl({"status", "job-1", "-o", "yaml"}, &out, &err), kExitOk) << err;
  const YAML::Node yaml = YAML::Load(out);
  auto job = client_->Get("job-1");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(yaml["spec_yaml"].as<std::string>(), job->spec_yaml());
  EXPECT_EQ(yaml["state"].as<std::string>(), "JOB_STATE_PENDING");
  // The spec, itself YAML, parses out of the document.
  EXPECT_EQ(YAML::Load(yaml["spec_yaml"].as<std::string>())["name"].as<std::string>(), "tiny");
}

TEST_F(DlrmctlOutputTest, SubmitWaitJsonPrintsOnlyTheFinalJob) {
  RegisterPs();
  StartWorker();
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--wait", "-o", "json"}, &out, &err), kExitOk) << err;
  const auto json = nlohmann::json::parse(out);  // one document, however many events
  EXPECT_EQ(json["state"], "JOB_STATE_SUCCEEDED") << out;
  EXPECT_DOUBLE_EQ(json["final_metrics"]["auc"].get<double>(), 0.71);
  EXPECT_THAT(out, Not(HasSubstr("submitted")));

  // The job is over: watch sees its last event and prints it as one line of JSON.
  ASSERT_EQ(Ctl({"watch", "job-1", "-o", "jsonl"}, &out, &err), kExitOk) << err;
  const auto lines = Lines(out);
  ASSERT_GE(lines.size(), 1u);
  for (const auto& line : lines) {
    const auto event = nlohmann::json::parse(line);
    EXPECT_EQ(event["job"]["job_id"], "job-1");
  }
  EXPECT_EQ(nlohmann::json::parse(lines.back())["job"]["state"], "JOB_STATE_SUCCEEDED");

  ASSERT_EQ(Ctl({"watch", "job-1", "-o", "yaml"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(YAML::Load(out)["state"].as<std::string>(), "JOB_STATE_SUCCEEDED");
}

TEST_F(DlrmctlOutputTest, SubmitWaitJsonlStreamsEventsAndFailureExitsOne) {
  RegisterPs();
  StartWorker(/*fail=*/true);
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait", "-o", "jsonl"}, &out, &err), kExitFailed);
  const auto lines = Lines(out);
  ASSERT_GE(lines.size(), 2u) << out;  // at least PENDING or RUNNING, then FAILED
  std::vector<std::string> states;
  for (const auto& line : lines) {
    states.push_back(nlohmann::json::parse(line)["job"]["state"].get<std::string>());
  }
  EXPECT_EQ(states.back(), "JOB_STATE_FAILED");
  EXPECT_THAT(nlohmann::json::parse(lines.back())["job"]["message"].get<std::string>(),
              HasSubstr("disk on fire"));
}

// describe and logs tell the state history with reasons; logs -f follows a job to its end.
TEST_F(DlrmctlOutputTest, DescribeAndLogsTellTheStateHistory) {
  RegisterPs();
  StartWorker(/*fail=*/true);
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait"}, &out, &err), kExitFailed);
  ASSERT_EQ(Ctl({"logs", "job-1"}, &out, &err), kExitOk) << err;
  const auto lines = Lines(out);
  ASSERT_EQ(lines.size(), 3u) << out;
  EXPECT_THAT(lines[0], HasSubstr("PENDING"));
  EXPECT_THAT(lines[0], HasSubstr("queued for 1 worker(s)"));
  EXPECT_THAT(lines[1], HasSubstr("RUNNING"));
  EXPECT_THAT(lines[1], HasSubstr("started on workers worker-"));
  EXPECT_THAT(lines[2], HasSubstr("FAILED"));
  EXPECT_THAT(lines[2], HasSubstr("disk on fire"));
  ASSERT_EQ(Ctl({"logs", "job-1", "-o", "jsonl"}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Lines(out).size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(Lines(out)[2])["state"], "JOB_STATE_FAILED");
  // -f on a job that is over prints the same and returns, with the exit code of watch: the job
  // FAILED (it exited 0).
  ASSERT_EQ(Ctl({"logs", "job-1", "-f"}, &out, &err), kExitFailed) << err;
  EXPECT_EQ(Lines(out).size(), 3u);
  EXPECT_EQ(Ctl({"watch", "job-1"}, &out, &err), kExitFailed) << err;

  ASSERT_EQ(Ctl({"describe", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("history:"));
  EXPECT_THAT(out, HasSubstr("disk on fire"));
  EXPECT_THAT(out, HasSubstr("spec:"));
  EXPECT_THAT(out, HasSubstr("name: tiny"));
  ASSERT_EQ(Ctl({"describe", "job-1", "-o", "json"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(nlohmann::json::parse(out)["history"].size(), 3u);
  EXPECT_EQ(Ctl({"describe", "job-404"}, &out, &err), kExitNotFound);

  // The coordinator reports its version.
  ASSERT_EQ(Ctl({"version", "-o", "json"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(nlohmann::json::parse(out)["server_version"], kDlrmctlVersion);
}

// logs under json and yaml is one document per call (it printed a JSON object per line, and the
// table under yaml); jsonl is a change per line.
TEST_F(DlrmctlOutputTest, LogsIsOneDocumentPerCall) {
  RegisterPs();
  StartWorker(/*fail=*/true);
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait"}, &out, &err), kExitFailed);
  for (const std::vector<std::string>& follow :
       {std::vector<std::string>{}, std::vector<std::string>{"-f"}}) {
    std::vector<std::string> args = {"logs", "job-1", "-o", "json"};
    args.insert(args.end(), follow.begin(), follow.end());
    ASSERT_EQ(Ctl(args, &out, &err), follow.empty() ? kExitOk : kExitFailed) << err;
    const auto json = nlohmann::json::parse(out);  // throws unless the whole output is one value
    EXPECT_EQ(json["job_id"], "job-1");
    ASSERT_EQ(json["history"].size(), 3u) << out;
    EXPECT_EQ(json["history"][0]["state"], "JOB_STATE_PENDING");
    EXPECT_EQ(json["history"][2]["state"], "JOB_STATE_FAILED");
    EXPECT_THAT(json["history"][2]["message"].get<std::string>(), HasSubstr("disk on fire"));

    args[3] = "yaml";
    ASSERT_EQ(Ctl(args, &out, &err), follow.empty() ? kExitOk : kExitFailed) << err;
    const YAML::Node yaml = YAML::Load(out);
    EXPECT_EQ(yaml["job_id"].as<std::string>(), "job-1") << out;
    ASSERT_EQ(yaml["history"].size(), 3u) << out;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(yaml["history"][i]["state"].as<std::string>(), json["history"][i]["state"]);
      EXPECT_EQ(yaml["history"][i]["message"].as<std::string>(), json["history"][i]["message"]);
    }
  }
  ASSERT_EQ(Ctl({"logs", "job-1", "-o", "jsonl"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(Lines(out).size(), 3u);
}

// describe shows the spec with floats as people write them (0.90000000000000002 was shown).
TEST_F(DlrmctlOutputTest, DescribeWritesTheSpecsFloatsShortest) {
  const std::string spec = dir_.Sub("adam.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec
                      << "optimizer:\n  dense: {type: adam, learning_rate: 0.003, beta1: 0.9}\n"
                         "  sparse: {type: rowwise_adagrad, learning_rate: 0.05}\n";
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"describe", "job-1"}, &out, &err), kExitOk) << err;
  const std::string shown = out.substr(out.find("\nspec:\n") + 7);
  EXPECT_THAT(shown, Not(::testing::ContainsRegex("[0-9]\\.[0-9]{15}"))) << shown;
  EXPECT_THAT(shown, HasSubstr("learning_rate: 0.003"));
  EXPECT_THAT(shown, HasSubstr("beta1: 0.9"));
  EXPECT_THAT(shown, HasSubstr("learning_rate: 0.05"));
  // The same values as the stored spec.
  auto job = client_->Get("job-1");
  ASSERT_TRUE(job.ok());
  std::string unindented;
  for (const std::string& line : Lines(shown)) absl::StrAppend(&unindented, line.substr(2), "\n");
  const YAML::Node described = YAML::Load(unindented);
  const YAML::Node stored = YAML::Load(job->spec_yaml());
  for (const char* key : {"learning_rate", "beta1", "beta2", "epsilon"}) {
    if (!stored["optimizer"]["dense"][key]) continue;
    EXPECT_EQ(described["optimizer"]["dense"][key].as<double>(),
              stored["optimizer"]["dense"][key].as<double>())
        << key;
  }
}

// A committed checkpoint of job "tiny" (job id `job_id`, "" for none) at `step` in `root`: its
// manifest only, which is what dlrmctl reads.
void CommitCheckpoint(const std::string& root, int64_t step, const std::string& job_id,
                      double created_unix = 0) {
  embedding::CheckpointManifest manifest;
  manifest.name = embedding::CheckpointDirName(step);
  manifest.job_name = "tiny";
  manifest.job_id = job_id;
  manifest.step = step;
  manifest.created_unix = created_unix;
  const std::string dir = absl::StrCat(root, "/", manifest.name);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(embedding::CommitManifest(dir, manifest).ok()) << dir;
}

// The checkpoints table's CREATED column is in the form of every other time dlrmctl prints:
// 2026-12-01T17:00:00Z.
TEST_F(DlrmctlOutputTest, CheckpointsTableTimesAreUtcIso) {
  const std::string root = dir_.Sub("ckpt");
  const std::string spec = dir_.Sub("ckpt.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec << "checkpoint:\n  dir: " << root << "\n";
  CommitCheckpoint(root, 100, "", 1796400000.25);  // 2026-12-04T16:00:00Z
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Lines(out).size(), 2u) << out << err;
  EXPECT_THAT(Lines(out)[1], HasSubstr("2026-12-04T16:00:00Z")) << out;
}

// A checkpoint folder can hold another job's checkpoints (a job resumed from them, or given the
// same checkpoint.dir): `checkpoints` names the job that wrote each (JOB column, "job_id"), and
// `describe` marks those another job wrote, instead of showing them as this job's.
TEST_F(DlrmctlOutputTest, CheckpointsNameTheJobThatWroteEach) {
  const std::string root = dir_.Sub("ckpt");
  const std::string spec = dir_.Sub("ckpt.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec << "checkpoint:\n  dir: " << root << "\n";
  CommitCheckpoint(root, 100, "job-7");
  CommitCheckpoint(root, 200, "job-1");
  CommitCheckpoint(root, 300, "");
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  const std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 4u) << out;
  EXPECT_THAT(lines[0], ::testing::EndsWith("  JOB"));
  EXPECT_THAT(lines[1], ::testing::EndsWith("  job-7"));
  EXPECT_THAT(lines[2], ::testing::EndsWith("  job-1"));
  EXPECT_THAT(lines[3], ::testing::EndsWith("  -"));

  ASSERT_EQ(Ctl({"checkpoints", "job-1", "-o", "json"}, &out, &err), kExitOk) << err;
  const auto json = nlohmann::json::parse(out);
  ASSERT_EQ(json["checkpoints"].size(), 3u) << out;
  EXPECT_EQ(json["checkpoints"][0]["job_id"], "job-7");
  EXPECT_EQ(json["checkpoints"][1]["job_id"], "job-1");
  EXPECT_EQ(json["checkpoints"][2]["job_id"], "");

  ASSERT_EQ(Ctl({"describe", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("  ckpt-000000000100  step 100  0 bytes  full  (written by job-7)\n"));
  EXPECT_THAT(out, HasSubstr("  ckpt-000000000200  step 200  0 bytes  full\n"));
  EXPECT_THAT(out,
              HasSubstr("  ckpt-000000000300  step 300  0 bytes  full  (written by dlrm train)\n"));
}

// `checkpoints` of a job whose folder this machine does not have says so: the client may not
// see the volume the job writes to; "no committed checkpoint" alone would be taken as the job's.
TEST_F(DlrmctlOutputTest, CheckpointsOfAFolderNotHereSaySo) {
  const std::string root = dir_.Sub("not-mounted/ckpt");
  const std::string spec = dir_.Sub("ckpt.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec << "checkpoint:\n  dir: " << root << "\n";
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(err, HasSubstr(absl::StrCat("no committed checkpoint in ", root,
                                          ": the folder does not exist on this machine")));
  std::filesystem::create_directories(root);
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(err, absl::StrCat("no committed checkpoint in ", root, "\n"));
}

// `checkpoints` of a job that takes none answers "none", as for an empty folder: exit 0, the
// reason on stderr and, for a script, a document with empty lists.
TEST_F(DlrmctlOutputTest, CheckpointsOfAJobWithoutACheckpointFolderAreNone) {
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(out, "");
  EXPECT_THAT(err, HasSubstr("job-1 takes no checkpoints (its spec has no checkpoint.dir)"));
  ASSERT_EQ(Ctl({"checkpoints", "job-1", "-o", "json"}, &out, &err), kExitOk) << err;
  const auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["dir"], "");
  EXPECT_TRUE(json["checkpoints"].is_array() && json["checkpoints"].empty()) << out;
  EXPECT_TRUE(json["damaged"].is_array() && json["damaged"].empty()) << out;
  ASSERT_EQ(Ctl({"checkpoints", "job-1", "-o", "yaml"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(YAML::Load(out)["checkpoints"].size(), 0u) << out;
}

// `checkpoints` tells which checkpoints a job could resume from: STATE "broken" for an
// incremental whose parent is gone (the reason on stderr, and in `describe`), a damaged manifest
// on stderr instead of left out silently, and with --verify every file's size and CRC32C too.
TEST_F(DlrmctlOutputTest, CheckpointsSayWhichChainsAreBroken) {
  const std::string root = dir_.Sub("ckpt");
  const std::string spec = dir_.Sub("ckpt.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec << "checkpoint:\n  dir: " << root << "\n";
  CommitCheckpoint(root, 100, "job-1", 1796400000);
  auto incremental = [&](int64_t step, int64_t parent, double created) {
    embedding::CheckpointManifest m;
    m.name = embedding::CheckpointDirName(step);
    m.job_name = "tiny";
    m.job_id = "job-1";
    m.step = step;
    m.created_unix = created;
    m.incremental = true;
    m.parent = embedding::CheckpointDirName(parent);
    m.parent_created_unix = 1796400000;
    const std::string dir = absl::StrCat(root, "/", m.name);
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(embedding::CommitManifest(dir, m).ok()) << dir;
  };
  incremental(200, 100, 1796400100);
  incremental(400, 300, 1796400300);  // ckpt-000000000300 is gone
  std::filesystem::create_directories(absl::StrCat(root, "/ckpt-000000000500"));
  std::ofstream(absl::StrCat(root, "/ckpt-000000000500/MANIFEST.json")) << "{not json";
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec}, &out, &err), kExitOk) << err;
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 4u) << out;
  EXPECT_THAT(lines[0], HasSubstr("  STATE "));
  EXPECT_THAT(lines[1], HasSubstr("  ok "));
  EXPECT_THAT(lines[2], HasSubstr("  ok "));
  EXPECT_THAT(lines[3], HasSubstr("  broken "));
  EXPECT_THAT(err, HasSubstr("ckpt-000000000400 cannot be resumed from: "));
  EXPECT_THAT(err, HasSubstr("ckpt-000000000300, which is gone"));
  EXPECT_THAT(err, HasSubstr("damaged: "));
  EXPECT_THAT(err, HasSubstr("ckpt-000000000500/MANIFEST.json"));

  ASSERT_EQ(Ctl({"checkpoints", "job-1", "-o", "json"}, &out, &err), kExitOk) << err;
  auto json = nlohmann::json::parse(out);
  ASSERT_EQ(json["checkpoints"].size(), 3u) << out;
  EXPECT_EQ(json["checkpoints"][1]["state"], "ok");
  EXPECT_EQ(json["checkpoints"][2]["state"], "broken");
  EXPECT_THAT(json["checkpoints"][2]["problem"].get<std::string>(), HasSubstr("which is gone"));
  ASSERT_EQ(json["damaged"].size(), 1u) << out;

  ASSERT_EQ(Ctl({"describe", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("  ckpt-000000000400  step 400  0 bytes  incremental  (broken: "));

  // The full checkpoint lists a file it does not hold: only --verify reads files.
  embedding::CheckpointManifest full =
      *embedding::ReadManifest(absl::StrCat(root, "/ckpt-000000000100"));
  full.files.push_back({.name = "dense.bin", .kind = "dense", .bytes = 8, .crc32c = 1});
  ASSERT_TRUE(embedding::CommitManifest(absl::StrCat(root, "/ckpt-000000000100"), full).ok());
  ASSERT_EQ(Ctl({"checkpoints", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(Lines(out)[1], HasSubstr("  ok "));
  ASSERT_EQ(Ctl({"checkpoints", "job-1", "--verify"}, &out, &err), kExitOk) << err;
  lines = Lines(out);
  ASSERT_EQ(lines.size(), 4u) << out;
  EXPECT_THAT(lines[1], HasSubstr("  broken "));
  EXPECT_THAT(lines[2], HasSubstr("  broken ")) << "its parent does not verify";
  EXPECT_THAT(err, HasSubstr("dense.bin"));
}

TEST_F(DlrmctlOutputTest, MembersShowNamesNextToIds) {
  RegisterPs("ps-east-0");
  const std::string worker = RegisterMember(dlrm::v1::ROLE_WORKER, "trainer-a");
  const std::string unnamed = RegisterMember(dlrm::v1::ROLE_WORKER);
  std::string out, err;
  ASSERT_EQ(Ctl({"members"}, &out, &err), kExitOk) << err;
  const auto lines = Lines(out);
  EXPECT_THAT(lines.front(), HasSubstr("NAME"));
  bool named_row = false;
  for (const auto& line : lines) {
    if (line.find(worker) != std::string::npos) {
      named_row = true;
      EXPECT_THAT(line, HasSubstr("trainer-a"));
    }
  }
  EXPECT_TRUE(named_row) << out;
  EXPECT_THAT(out, HasSubstr("ps-east-0"));
  EXPECT_THAT(out, HasSubstr(unnamed));

  ASSERT_EQ(Ctl({"members", "-o", "wide"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(Lines(out).front(), HasSubstr("CORES"));
  EXPECT_THAT(out, HasSubstr("trainer-a"));

  ASSERT_EQ(Ctl({"members", "-o", "yaml"}, &out, &err), kExitOk) << err;
  const YAML::Node yaml = YAML::Load(out);
  ASSERT_EQ(yaml["members"].size(), 3u) << out;
  std::vector<std::string> names;
  for (const auto& m : yaml["members"]) names.push_back(m["name"].as<std::string>());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("ps-east-0", "trainer-a", ""));
  EXPECT_EQ(yaml["shard_map"].size(), 1u);

  ASSERT_EQ(Ctl({"members", "-o", "json"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(nlohmann::json::parse(out)["members"].size(), 3u);
}

TEST_F(DlrmctlOutputTest, PendingJobSaysWhatItWaitsFor) {
  RegisterMember(dlrm::v1::ROLE_WORKER, "trainer-a");
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--workers", "2", "--ps", "1"}, &out, &err), kExitOk)
      << err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_}, &out, &err), kExitOk) << err;

  ASSERT_EQ(Ctl({"status", "job-1"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("waiting for 2 idle workers and 1 parameter server; the cluster has "
                             "1 idle worker (worker-1 (name trainer-a)), 0 parameter servers"));
  EXPECT_THAT(out, Not(HasSubstr("queued behind")));

  // job-2 needs what the cluster has, but job-1 starts first.
  ASSERT_EQ(Ctl({"status", "job-2"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("waiting for 1 idle worker and at least 1 parameter server"));
  EXPECT_THAT(out, HasSubstr("queued behind job-1"));

  ASSERT_EQ(Ctl({"list"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("queued behind job-1"));
  EXPECT_THAT(out, HasSubstr("1 idle worker (worker-1 (name trainer-a))"));

  // The coordinator says it, so the document (the API object) carries it too.
  ASSERT_EQ(Ctl({"status", "job-2", "-o", "json"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(nlohmann::json::parse(out)["message"].get<std::string>(),
              ::testing::EndsWith("; queued behind job-1 (jobs start in submission order)"));
}

TEST_F(DlrmctlOutputTest, UnknownCommandListsTheCommands) {
  std::string out, err;
  EXPECT_EQ(Ctl({"frobnicate"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("unknown command \"frobnicate\""));
  for (const char* verb : {"submit", "status", "watch", "cancel", "list", "members", "version"}) {
    EXPECT_THAT(err, HasSubstr(verb));
  }
  // Global options before the command are skipped when naming it.
  EXPECT_EQ(Ctl({"--timeout", "3", "-o", "json", "lsit"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("unknown command \"lsit\""));
  EXPECT_EQ(Ctl({}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("a command is required; commands: submit, status"));
  EXPECT_EQ(Ctl({"status"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("dlrmctl status --help"));
}

TEST_F(DlrmctlOutputTest, HelpDocumentsTheExitCodes) {
  std::string out, err;
  ASSERT_EQ(Ctl({"--help"}, &out, &err), kExitOk);
  EXPECT_THAT(out, HasSubstr("Exit codes:"));
  EXPECT_THAT(out, HasSubstr("2  usage"));
  EXPECT_THAT(out, HasSubstr("3  not found"));
  EXPECT_THAT(out, HasSubstr("4  coordinator unavailable"));
  EXPECT_THAT(out, HasSubstr("5  unauthenticated or permission denied"));
  EXPECT_THAT(out, HasSubstr("version"));
  // How long a call to a coordinator that does not answer waits, and what submit asks for.
  EXPECT_THAT(out, HasSubstr("--timeout FLOAT:SECONDS=10 "));
  ASSERT_EQ(Ctl({"submit", "--help"}, &out, &err), kExitOk);
  EXPECT_THAT(out, HasSubstr("--workers INT:INT in [1 - 1024]=1\n"));
  EXPECT_THAT(out, HasSubstr("--ps INT:INT in [0 - 1024]=0\n"));
  ASSERT_EQ(Ctl({"checkpoint", "--help"}, &out, &err), kExitOk);
  EXPECT_THAT(out, HasSubstr("--wait-timeout FLOAT:SECONDS=600\n"));
}

TEST_F(DlrmctlOutputTest, VersionPrintsTheClientsAndSaysTheServersIsUnknown) {
  EXPECT_STREQ(kDlrmctlVersion, DLRM_PROJECT_VERSION);
  std::string out, err;
  // No coordinator is dialled: the API cannot tell its version.
  ASSERT_EQ(RunCtl("127.0.0.1:1", {"version"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("client: ", kDlrmctlVersion)));
  EXPECT_THAT(out, HasSubstr("server: unknown"));
  ASSERT_EQ(RunCtl("127.0.0.1:1", {"version", "-o", "json"}, &out, &err), kExitOk) << err;
  const auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["client_version"], kDlrmctlVersion);
  EXPECT_TRUE(json["server_version"].is_null());
  EXPECT_LT(out.find("client_version"), out.find("server_version"));  // the same every call
  ASSERT_EQ(RunCtl("127.0.0.1:1", {"version", "-o", "jsonl"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(out, absl::StrCat("{\"client_version\":\"", kDlrmctlVersion,
                              "\",\"server_version\":null}\n"));
  ASSERT_EQ(RunCtl("127.0.0.1:1", {"version", "-o", "yaml"}, &out, &err), kExitOk) << err;
  const YAML::Node yaml = YAML::Load(out);
  EXPECT_EQ(yaml["client_version"].as<std::string>(), kDlrmctlVersion);
  EXPECT_TRUE(yaml["server_version"].IsNull());
}

TEST(DlrmctlExitCodes, MapStatusCodes) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("job-9")), kExitNotFound);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("down")), kExitUnavailable);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("slow")), kExitUnavailable);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("who")), kExitDenied);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("no")), kExitDenied);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("done")), kExitFailed);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("spec")), kExitFailed);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("bug")), kExitFailed);
  // The same through gRPC's codes, as the client receives them.
  const std::pair<grpc::StatusCode, int> wire[] = {
      {grpc::StatusCode::NOT_FOUND, kExitNotFound},
      {grpc::StatusCode::UNAVAILABLE, kExitUnavailable},
      {grpc::StatusCode::DEADLINE_EXCEEDED, kExitUnavailable},
      {grpc::StatusCode::UNAUTHENTICATED, kExitDenied},
      {grpc::StatusCode::PERMISSION_DENIED, kExitDenied},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, kExitFailed},
  };
  for (const auto& [code, exit_code] : wire) {
    EXPECT_EQ(ExitCodeForStatus(common::FromGrpcStatus(grpc::Status(code, "x"))), exit_code)
        << code;
  }
  // gRPC's UNAVAILABLE for a TLS handshake that a coordinator answered but that failed: refused
  // credentials, not a coordinator that is down.
  for (const char* message :
       {"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5: Ssl handshake "
        "failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed",
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5: Peer name "
        "elsewhere is not in peer certificate"}) {
    EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError(message)), kExitDenied) << message;
  }
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError(
                "failed to connect to all addresses; last error: UNAVAILABLE: "
                "ipv4:127.0.0.1:5: Socket closed")),
            kExitUnavailable);
  // Distinct codes for distinct causes.
  const std::vector<int> codes = {kExitOk,       kExitFailed,      kExitUsage,
                                  kExitNotFound, kExitUnavailable, kExitDenied};
  EXPECT_EQ(std::set<int>(codes.begin(), codes.end()).size(), codes.size());
}

// A Jobs service that refuses every caller, as the coordinator will once auth lands. A real
// server on loopback, so the code crosses the wire.
class RefusingJobs final : public dlrm::v1::Jobs::Service {
 public:
  explicit RefusingJobs(grpc::StatusCode code) : code_(code) {}
  grpc::Status ListJobs(grpc::ServerContext*, const dlrm::v1::ListJobsRequest*,
                        dlrm::v1::ListJobsResponse*) override {
    return grpc::Status(code_, "a token is required");
  }
  grpc::Status GetJob(grpc::ServerContext*, const dlrm::v1::GetJobRequest*,
                      dlrm::v1::Job*) override {
    return grpc::Status(code_, "a token is required");
  }

 private:
  grpc::StatusCode code_;
};

TEST(DlrmctlExitCodes, RefusedCallerExitsFive) {
  for (const grpc::StatusCode code :
       {grpc::StatusCode::UNAUTHENTICATED, grpc::StatusCode::PERMISSION_DENIED}) {
    RefusingJobs service(code);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    std::string out, err;
    EXPECT_EQ(RunCtl(absl::StrCat("127.0.0.1:", port), {"list"}, &out, &err), kExitDenied);
    EXPECT_THAT(err, HasSubstr("a token is required"));
    EXPECT_EQ(RunCtl(absl::StrCat("127.0.0.1:", port), {"status", "job-1"}, &out, &err),
              kExitDenied);
    server->Shutdown();
  }
}

}  // namespace
}  // namespace dlrm::client
