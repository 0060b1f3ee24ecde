// CoordinatorClient and dlrmctl against a real in-process coordinator on loopback, plus one run
// of the real dlrmctl binary. Workers are played by threads speaking the member-side RPCs.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "client/dlrmctl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/coordinator.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_specs.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;

class ClientTest : public ::testing::Test {
 protected:
  ::dlrm::testing::ScopedTempDir dir_{"client_test"};  // unique: tests run in parallel
  void SetUp() override {
    const std::string dir = dir_.Sub("coordinator");
    server::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.data_dir = dir;
    options.lease_ttl = absl::Seconds(30);  // the test PS does not heartbeat
    auto c = server::Coordinator::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    ASSERT_TRUE(coordinator_->Start().ok());
    CoordinatorClientOptions client_options;
    client_options.address = coordinator_->address();
    client_options.timeout = absl::Seconds(5);
    auto client = CoordinatorClient::Create(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    spec_path_ = dir_.Sub("job.yaml");
    std::ofstream(spec_path_) << dlrm::testing::kTinySpec;
    bad_spec_path_ = dir_.Sub("bad_job.yaml");
    std::ofstream(bad_spec_path_) << dlrm::testing::kBadSpec;
  }
  void TearDown() override {
    for (auto& t : workers_) t.join();
    coordinator_->Shutdown();
  }

  // A worker: registers, waits for its assignment, reports a few steps, then finishes (or
  // fails when `fail`).
  void StartWorker(bool fail = false) {
    workers_.emplace_back([this, fail] {
      dlrm::v1::RegisterRequest r;
      r.set_role(dlrm::v1::ROLE_WORKER);
      auto reg = client_->Register(r);
      ASSERT_TRUE(reg.ok()) << reg.status();
      dlrm::v1::WorkerAssignment assignment;
      for (int i = 0; i < 200 && !assignment.has_job(); ++i) {
        auto hb = client_->Heartbeat(reg->member_id());
        ASSERT_TRUE(hb.ok()) << hb.status();
        if (hb->has_worker()) assignment = hb->worker();
        absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(assignment.has_job());
      for (int step = 1; step <= 3; ++step) {
        dlrm::v1::ReportProgressRequest p;
        p.set_job_id(assignment.job().job_id());
        p.set_rank(assignment.rank());
        p.set_member_id(reg->member_id());
        p.set_step(step);
        p.set_samples(step * 64);
        p.set_loss(0.69 / step);
        p.set_done(step == 3 && !fail);
        p.set_failed(step == 3 && fail);
        if (fail) p.set_message("disk on fire");
        if (step == 3) (*p.mutable_metrics())["auc"] = 0.71;
        ASSERT_TRUE(client_->ReportProgress(p).ok());
        absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(client_->Leave(reg->member_id()).ok());
    });
  }

  void RegisterPs() {
    dlrm::v1::RegisterRequest r;
    r.set_role(dlrm::v1::ROLE_PS);
    r.set_address("127.0.0.1:7");
    ASSERT_TRUE(client_->Register(r).ok());
  }

  int Ctl(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    args.insert(args.begin(), "dlrmctl");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream o, e;
    const int code =
        RunDlrmctl(static_cast<int>(argv.size()), argv.data(), coordinator_->address(), o, e);
    *out = o.str();
    if (err != nullptr) *err = e.str();
    return code;
  }

  std::unique_ptr<server::Coordinator> coordinator_;
  std::unique_ptr<CoordinatorClient> client_;
  std::vector<std::thread> workers_;
  std::string spec_path_;
  std::string bad_spec_path_;
};

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
  EXPECT_THAT(again.status().message(), HasSubstr("CANCELLED -> CANCELLED"));
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
  std::vector<std::string> args = {"dlrmctl", "--coordinator", options.address, "--timeout",
                                   "1",       "list"};
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream o, e;
  EXPECT_EQ(RunDlrmctl(static_cast<int>(argv.size()), argv.data(), "unused", o, e), kExitError);
  EXPECT_THAT(e.str(), ::testing::AnyOf(HasSubstr("UNAVAILABLE"), HasSubstr("DEADLINE_EXCEEDED")));
  EXPECT_THAT(e.str(), HasSubstr(options.address));
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
  EXPECT_EQ(Ctl({"watch", job_id}, &out), kExitJobCancelled);

  EXPECT_EQ(Ctl({"status", "job-99"}, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("job-99"));
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
  EXPECT_EQ(Ctl({"submit", "-f", bad_spec_path_}, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("model.bottom_mlp"));
  EXPECT_EQ(Ctl({"submit", "-f", "/no/such/job.yaml"}, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("/no/such/job.yaml"));
  EXPECT_EQ(Ctl({"list", "--state", "sleeping"}, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("sleeping"));
  EXPECT_NE(Ctl({"frobnicate"}, &out, &err), kExitOk);

  ASSERT_EQ(Ctl({"members", "-o", "json"}, &out), kExitOk);
  EXPECT_TRUE(nlohmann::json::parse(out).contains("epoch"));
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
  EXPECT_EQ(Ctl({"submit", "-f", spec_path_, "--wait"}, &out, &err), kExitJobFailed);
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
  auto run = [&](const std::string& args, std::string* out) {
    const std::string command =
        absl::StrCat("DLRM_COORDINATOR=", coordinator_->address(), " ", bin, " ", args, " 2>&1");
    FILE* pipe = popen(command.c_str(), "r");
    char buffer[4096];
    size_t n;
    out->clear();
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out->append(buffer, n);
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  ASSERT_EQ(run(absl::StrCat("submit -f ", spec_path_, " -o json"), &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["name"], "tiny");
  EXPECT_EQ(run("status job-1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("PENDING"));
  EXPECT_EQ(run("status job-2", &out), kExitError);
  EXPECT_THAT(out, HasSubstr("job-2"));
}

}  // namespace
}  // namespace dlrm::client
