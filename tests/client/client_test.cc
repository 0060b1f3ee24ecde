// CoordinatorClient and dlrmctl against a real in-process coordinator on loopback, plus one run
// of the real dlrmctl binary. Workers are played by threads speaking the member-side RPCs.
#include <cstdio>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/tls_flags.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/client_fixture.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Plaintext is served without --insecure only on a loopback address: an address literal, or
// "localhost"; a name that merely starts with "127." may resolve anywhere.
TEST(LoopbackAddress, OnlyLoopbackLiteralsAndLocalhost) {
  for (const char* yes : {"127.0.0.1:50051", "127.1.2.3:1", "localhost:50051", "[::1]:50051"}) {
    EXPECT_TRUE(IsLoopbackAddress(yes)) << yes;
  }
  for (const char* no : {"127.example.invalid:50051", "0.0.0.0:50051", "10.0.0.1:1", "[::]:1",
                         "vm:50051", "128.0.0.1:1", "[::2]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(no)) << no;
  }
}

TEST_F(ClientTest, SubmitGetListCancel) {
  auto job = client_->Submit(dlrm::testing::kTinySpec, {.workers = 2, .ps = 1});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), dlrm::v1::JOB_STATE_PENDING);
  EXPECT_EQ(job->name(), "tiny");
  EXPECT_EQ(client_->Get(job->job_id())->requested_workers(), 2);
  auto list = client_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  auto cancelled = client_->Cancel(job->job_id(), "test");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), dlrm::v1::JOB_STATE_CANCELLED);
  auto again = client_->Cancel(job->job_id());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(),
              HasSubstr("job-1 has already ended CANCELLED (cancelled: test)"));
  // The coordinator's refusal names the method once, not "CancelJob: CancelJob: ...".
  auto too_long = client_->Cancel(job->job_id(), std::string(common::kMaxMessageBytes + 1, 'x'));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr(": CancelJob: reason of 65537 bytes"));
  EXPECT_THAT(too_long.status().message(), Not(HasSubstr("CancelJob: CancelJob")));
  auto missing = client_->Get("job-404");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("job-404"));
  auto bad = client_->Submit(dlrm::testing::kBadSpec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("model.bottom_mlp"));
}

TEST_F(ClientTest, WatchSeesProgressUntilSucceeded) {
  auto job = client_->Submit(dlrm::testing::kTinySpec, {.workers = 1});
  ASSERT_TRUE(job.ok());
  RegisterPs();
  StartWorker();
  std::vector<dlrm::v1::JobState> states;
  auto last = client_->Watch(job->job_id(), [&](const dlrm::v1::JobEvent& e) {
    states.push_back(e.job().state());
    return true;
  });
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), dlrm::v1::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(last->final_metrics().auc(), 0.71);
  EXPECT_THAT(states, ::testing::Contains(dlrm::v1::JOB_STATE_RUNNING));
  auto members = client_->Members();
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->shard_map_size(), 1);
}

TEST_F(ClientTest, DeadCoordinatorFailsWithinTheDeadline) {
  int port = 0;
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.BuildAndStart()->Shutdown();
  }
  CoordinatorClientOptions options;
  options.address = absl::StrCat("127.0.0.1:", port);
  options.timeout = absl::Seconds(1);
  auto client = CoordinatorClient::Create(options);
  ASSERT_TRUE(client.ok());
  const absl::Time start = absl::Now();
  auto list = (*client)->List();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(absl::IsUnavailable(list.status()) || absl::IsDeadlineExceeded(list.status()))
      << list.status();
  EXPECT_THAT(list.status().message(), HasSubstr(options.address));
  std::string out, err;
  EXPECT_EQ(
      RunCtl("unused", {"--coordinator", options.address, "--timeout", "1", "list"}, &out, &err),
      kExitUnavailable);
  EXPECT_THAT(err, ::testing::AnyOf(HasSubstr("UNAVAILABLE"), HasSubstr("DEADLINE_EXCEEDED")));
  EXPECT_THAT(err, HasSubstr(options.address));
  EXPECT_THAT(err, HasSubstr("is a coordinator running"));
}

TEST_F(ClientTest, DlrmctlCommandsAndExitCodes) {
  std::string out, err;
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--workers", "1"}, &out, &err), kExitOk) << err;
  const std::string job_id(absl::StripTrailingAsciiWhitespace(out));
  EXPECT_EQ(job_id, "job-1");

  ASSERT_EQ(Ctl({"status", job_id, "-o", "json"}, &out), kExitOk);
  auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["job_id"], job_id);
  EXPECT_EQ(json["state"], "JOB_STATE_PENDING");

  ASSERT_EQ(Ctl({"list"}, &out), kExitOk);
  EXPECT_THAT(out, HasSubstr("PENDING"));
  EXPECT_THAT(out, HasSubstr("tiny"));

  ASSERT_EQ(Ctl({"cancel", job_id, "--reason", "changed my mind"}, &out), kExitOk);
  EXPECT_THAT(out, HasSubstr("CANCELLED"));
  EXPECT_EQ(Ctl({"watch", job_id}, &out), kExitFailed);
  EXPECT_THAT(out, HasSubstr("cancelled: changed my mind"));

  // Each kind of error has its own exit code.
  EXPECT_EQ(Ctl({"status", "job-99"}, &out, &err), kExitNotFound);
  EXPECT_THAT(err, HasSubstr("job-99"));
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
  EXPECT_EQ(Ctl({"watch", "job-99"}, &out, &err), kExitNotFound);
  EXPECT_EQ(Ctl({"cancel", "job-99"}, &out, &err), kExitNotFound);
  EXPECT_EQ(Ctl({"cancel", job_id}, &out, &err), kExitFailed);  // already CANCELLED
  EXPECT_THAT(err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_EQ(Ctl({"submit", "-f", bad_spec_path_}, &out, &err), kExitFailed);
  EXPECT_THAT(err, HasSubstr("model.bottom_mlp"));
  EXPECT_EQ(Ctl({"submit", "-f", "/no/such/job.yaml"}, &out, &err), kExitFailed);
  EXPECT_THAT(err, HasSubstr("/no/such/job.yaml"));
  EXPECT_EQ(Ctl({"list", "--state", "sleeping"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("sleeping"));
  EXPECT_EQ(Ctl({"list", "--state", "Cancelled"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr(job_id));
  // RECOVERING is a state `list` shows, so --state takes it too.
  EXPECT_EQ(Ctl({"list", "--state", "recovering"}, &out, &err), kExitOk) << err;
  EXPECT_EQ(out, "JOB  NAME  STATE  WORKERS  STEP  SAMPLES  AUC  MESSAGE\n");
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--workers", "0"}, &out, &err), kExitUsage);
  EXPECT_EQ(Ctl({"list", "-o", "xml"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("xml"));

  ASSERT_EQ(Ctl({"members", "-o", "json"}, &out), kExitOk);
  EXPECT_TRUE(nlohmann::json::parse(out).contains("epoch"));
}

// A model that does not fit Criteo input (5 dense features for its 13) is refused by the
// coordinator at once: dlrmctl exits with its code for a refused request (INVALID_ARGUMENT
// maps to kExitFailed) and prints the coordinator's message, and no job is queued.
TEST_F(ClientTest, DlrmctlSubmitRefusesAModelThatDoesNotFitCriteoInput) {
  std::string spec = dlrm::testing::kTinySpec;
  spec.replace(spec.find("dense_features: 13"), 18, "dense_features: 5");
  const std::string path = dir_.Sub("bad.yaml");
  std::ofstream(path) << spec;
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", path}, &out, &err), kExitFailed) << out << err;
  EXPECT_THAT(err, HasSubstr("model.dense_features: Criteo input has 13 dense features, got 5"));
  EXPECT_THAT(err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_EQ(out, "");
  auto jobs = client_->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 0u);
}

// The client reads every page of ListJobs: with pages of two jobs, all five come back, oldest
// first, and a filter keeps to its state across the pages.
TEST_F(ClientTest, ListFollowsThePagesToTheEnd) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client_->Submit(dlrm::testing::kTinySpec, {.workers = 1}).ok());
  }
  ASSERT_TRUE(client_->Cancel("job-4", "test").ok());
  auto jobs = client_->List(dlrm::v1::JOB_STATE_UNSPECIFIED, /*page_size=*/2);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> ids;
  for (const auto& job : *jobs) ids.push_back(job.job_id());
  EXPECT_THAT(ids, ::testing::ElementsAre("job-1", "job-2", "job-3", "job-4", "job-5"));
  auto pending = client_->List(dlrm::v1::JOB_STATE_PENDING, /*page_size=*/1);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->size(), 4u);
}

// `submit --resume-from` on a spec whose checkpoint.resume_from names another checkpoint is
// refused naming both, as `dlrm train --resume` refuses it, instead of silently overriding the
// spec; the same checkpoint named both ways (a relative and an absolute path) is fine.
TEST_F(ClientTest, SubmitResumeFromThatContradictsTheSpecIsRefused) {
  const std::string a = dir_.Sub("ckpt-a");
  const std::string b = dir_.Sub("ckpt-b");
  std::filesystem::create_directories(a);
  const std::string path = dir_.Sub("resume.yaml");
  std::ofstream(path) << dlrm::testing::kTinySpec << "checkpoint:\n  dir: " << dir_.Sub("ckpt")
                      << "\n  resume_from: ckpt-a\n";  // relative to the spec's folder
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", path, "--resume-from", b}, &out, &err), kExitUsage) << out;
  EXPECT_THAT(err, HasSubstr(absl::StrCat("--resume-from ", b,
                                          " and the job spec's checkpoint.resume_from ",
                                          std::filesystem::path(a).lexically_normal().string())));
  auto jobs = client_->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 0u) << "nothing submitted";

  ASSERT_EQ(Ctl({"submit", "-f", path, "--resume-from", a + "/"}, &out, &err), kExitOk) << err;
  auto job = client_->Get("job-1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->spec_yaml(), HasSubstr("/ckpt-a"));
  ASSERT_EQ(Ctl({"submit", "-f", spec_path_, "--resume-from", b}, &out, &err), kExitOk) << err;
  job = client_->Get("job-2");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->spec_yaml(), HasSubstr("resume_from: " + b));
  EXPECT_THAT(job->spec_yaml(), Not(HasSubstr("ckpt-a")));
}

TEST_F(ClientTest, SubmitWaitExitCodeIsTheJobsResult) {
  RegisterPs();
  StartWorker();
  std::string out, err;
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait"}, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(out, HasSubstr("auc 0.7100"));

  // The first worker leaves after its job; let it go before the next job can take it.
  workers_.back().join();
  workers_.pop_back();
  StartWorker(/*fail=*/true);
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait"}, &out, &err), kExitFailed);
  EXPECT_THAT(out, HasSubstr("disk on fire"));
}

TEST_F(ClientTest, RealDlrmctlBinary) {
  // $DLRM_BIN_DIR when set, else build/bin next to this test's build/tests.
  const char* bin_dir = std::getenv("DLRM_BIN_DIR");
  const std::filesystem::path dir =
      bin_dir != nullptr
          ? std::filesystem::path(bin_dir)
          : std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin";
  const std::string bin = (dir / "dlrmctl").string();
  ASSERT_TRUE(std::filesystem::exists(bin)) << bin;
  // stdout, with stderr too unless `stdout_only`.
  auto run = [&](const std::string& args, std::string* out, bool stdout_only = false) {
    const std::string command = absl::StrCat("DLRM_COORDINATOR=", coordinator_->address(), " ", bin,
                                             " ", args, stdout_only ? "" : " 2>&1");
    FILE* pipe = popen(command.c_str(), "r");
    char buffer[4096];
    size_t n;
    out->clear();
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out->append(buffer, n);
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  // The warning that no worker has registered goes to stderr: stdout is the document alone.
  ASSERT_EQ(run(absl::StrCat("submit -f ", spec_path_, " -o json"), &out, true), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["name"], "tiny");
  EXPECT_EQ(run("status job-1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("PENDING"));
  EXPECT_EQ(run("status job-2", &out), kExitNotFound);
  EXPECT_THAT(out, HasSubstr("job-2"));
}

}  // namespace
}  // namespace dlrm::client
