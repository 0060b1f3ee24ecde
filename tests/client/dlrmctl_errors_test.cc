// dlrmctl's exit codes and messages when something is wrong: flag values that cannot work
// (usage, 2, naming the flag the user gave), a TLS handshake the coordinator answered but that
// failed (5) against one that cannot be told from a coordinator going away (4, saying so), a
// coordinator that stops answering during `checkpoint --wait` (4). Coordinators are fake Jobs
// services on loopback, with the certificates of common/certs.h where TLS is wanted.
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/dlrmctl.h"
#include "common/certs.h"
#include "common/grpc_util.h"
#include "embedding/checkpoint_manifest.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/client_fixture.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_specs.h"

namespace dlrm::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A Jobs service that lists no jobs, knows one RUNNING job whose spec checkpoints into
// `checkpoint_dir`, takes checkpoint requests, and stops answering GetJob once `stop_answering`
// is set (a coordinator stopped with SIGSTOP, or hung).
class FakeJobs final : public dlrm::v1::Jobs::Service {
 public:
  explicit FakeJobs(std::string checkpoint_dir) : checkpoint_dir_(std::move(checkpoint_dir)) {}
  ~FakeJobs() override { Stop(); }

  grpc::Status ListJobs(grpc::ServerContext*, const dlrm::v1::ListJobsRequest*,
                        dlrm::v1::ListJobsResponse*) override {
    ++list_calls_;
    return grpc::Status::OK;
  }
  int list_calls() const { return list_calls_.load(); }
  grpc::Status GetJob(grpc::ServerContext* context, const dlrm::v1::GetJobRequest* request,
                      dlrm::v1::Job* job) override {
    while (stop_answering_.load() && !context->IsCancelled() && !stopping_.HasBeenNotified()) {
      stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
    }
    job->set_job_id(request->job_id());
    job->set_state(dlrm::v1::JOB_STATE_RUNNING);
    if (end_after_checkpoint_request_.load() && checkpoint_requested_.load()) {
      // The job's final checkpoint is committed, then it ends: both between two reads of the
      // folder by `checkpoint --wait`.
      embedding::CheckpointManifest manifest;
      manifest.name = embedding::CheckpointDirName(500);
      manifest.job_id = request->job_id();
      manifest.step = 500;
      const std::string dir = absl::StrCat(checkpoint_dir_, "/", manifest.name);
      std::filesystem::create_directories(dir);
      if (!embedding::CommitManifest(dir, manifest).ok()) return grpc::Status::CANCELLED;
      job->set_state(dlrm::v1::JOB_STATE_SUCCEEDED);
    }
    job->set_spec_yaml(
        absl::StrCat(dlrm::testing::kTinySpec, "checkpoint:\n  dir: ", checkpoint_dir_, "\n"));
    return grpc::Status::OK;
  }
  grpc::Status CheckpointJob(grpc::ServerContext*, const dlrm::v1::CheckpointJobRequest* request,
                             dlrm::v1::Job* job) override {
    job->set_job_id(request->job_id());
    job->set_state(dlrm::v1::JOB_STATE_RUNNING);
    job->set_checkpoint_requests(1);
    checkpoint_requested_ = true;
    stop_answering_ = stop_after_checkpoint_request_.load();
    return grpc::Status::OK;
  }
  // A coordinator too slow to answer before the caller's deadline, which may still queue the job
  // or cancel it after that.
  grpc::Status SubmitJob(grpc::ServerContext* context, const dlrm::v1::SubmitJobRequest*,
                         dlrm::v1::SubmitJobResponse*) override {
    return AnswerLate(context);
  }
  grpc::Status CancelJob(grpc::ServerContext* context, const dlrm::v1::CancelJobRequest*,
                         dlrm::v1::Job*) override {
    return AnswerLate(context);
  }
  void StopAnsweringAfterCheckpointRequest() { stop_after_checkpoint_request_ = true; }
  void EndAfterCheckpointRequest() { end_after_checkpoint_request_ = true; }
  void Stop() {
    if (!stopping_.HasBeenNotified()) stopping_.Notify();
  }

 private:
  grpc::Status AnswerLate(grpc::ServerContext* context) {
    while (!context->IsCancelled() && !stopping_.HasBeenNotified()) {
      stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "too late");
  }

  const std::string checkpoint_dir_;
  std::atomic<bool> stop_after_checkpoint_request_{false};
  std::atomic<bool> end_after_checkpoint_request_{false};
  std::atomic<bool> checkpoint_requested_{false};
  std::atomic<bool> stop_answering_{false};
  std::atomic<int> list_calls_{0};
  absl::Notification stopping_;
};

class DlrmctlErrorsTest : public ::testing::Test {
 protected:
  // Serves FakeJobs with `security` on loopback.
  void Serve(const common::TransportSecurity& security = {}) {
    std::filesystem::create_directories(dir_.Sub("checkpoints"));
    service_ = std::make_unique<FakeJobs>(dir_.Sub("checkpoints"));
    auto server = common::GrpcServer::Start({.listen_address = "127.0.0.1:0", .security = security},
                                            {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Stop();
    if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
  }
  // A CA and its certificates (coordinator, admin, ...) in dir/name.
  std::string Certificates(const std::string& name) {
    const std::string out = dir_.Sub(name);
    EXPECT_TRUE(common::WriteClusterCertificates({.out_dir = out}).ok());
    return out;
  }
  int Ctl(std::vector<std::string> args, std::string* err) {
    std::string out;
    return RunCtl(server_ != nullptr ? server_->address() : "127.0.0.1:1", std::move(args), &out,
                  err);
  }

  ::dlrm::testing::ScopedTempDir dir_{"dlrmctl_errors_test"};
  std::unique_ptr<FakeJobs> service_;
  std::unique_ptr<common::GrpcServer> server_;
};

// A flag value that cannot work is a usage error (2), named as the user gave it; nothing is
// dialled. (A missing --tls-dir exited 3, "no such job", naming --tls-ca.)
TEST_F(DlrmctlErrorsTest, UnusableFlagValuesAreUsageErrors) {
  std::string err;
  EXPECT_EQ(Ctl({"--tls-dir", "/nonexistent", "list"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("--tls-dir '/nonexistent' is not a folder"));
  EXPECT_THAT(err, Not(HasSubstr("--tls-ca")));

  // A folder without the files: each named as a file of --tls-dir.
  const std::string empty = dir_.Sub("empty_tls");
  std::filesystem::create_directories(empty);
  EXPECT_EQ(Ctl({"--tls-dir", empty, "list"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("ca.crt of --tls-dir"));
  EXPECT_THAT(err, Not(HasSubstr("(--tls-ca)")));
  // The same from the environment.
  ASSERT_EQ(setenv("DLRM_TLS_DIR", empty.c_str(), 1), 0);
  EXPECT_EQ(Ctl({"list"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("ca.crt of $DLRM_TLS_DIR"));
  ASSERT_EQ(unsetenv("DLRM_TLS_DIR"), 0);

  EXPECT_EQ(Ctl({"--token-file", "/nonexistent", "list"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("--token-file"));
  const std::string token = dir_.Sub("token");
  std::ofstream(token) << "secret\n";
  EXPECT_EQ(Ctl({"--token-file", token, "--tls-ca", "/nonexistent/ca.crt", "list"}, &err),
            kExitUsage)
      << err;
  EXPECT_THAT(err, HasSubstr("TLS CA (--tls-ca): cannot read '/nonexistent/ca.crt'"));

  EXPECT_EQ(Ctl({"status", ""}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("the job id is empty"));
  EXPECT_THAT(err, HasSubstr("dlrmctl status --help"));
  EXPECT_EQ(Ctl({"logs", "", "-f"}, &err), kExitUsage) << err;

  // Readable, not "Value 0 not in range 0.000000 to 1797693134862315708145274237317043567981...".
  EXPECT_EQ(Ctl({"--timeout", "0", "list"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("--timeout: '0' is not a number of seconds > 0"));
  EXPECT_LT(err.size(), 200u) << err;
  EXPECT_EQ(Ctl({"--timeout", "nan", "list"}, &err), kExitUsage) << err;
  EXPECT_EQ(Ctl({"checkpoint", "job-1", "--wait", "--wait-timeout", "-1"}, &err), kExitUsage)
      << err;
  EXPECT_THAT(err, HasSubstr("--wait-timeout: '-1' is not a number of seconds > 0"));

  // Not "Value 2.5 not in range 1 to 1024": 2.5 is in that range, and "abc" is not a number.
  for (const char* workers : {"2.5", "abc", "", "0", "1025", "99999999999"}) {
    EXPECT_EQ(Ctl({"submit", "-f", "job.yaml", "--workers", workers}, &err), kExitUsage) << err;
    EXPECT_THAT(err, HasSubstr(absl::StrCat("--workers: '", workers,
                                            "' is not a whole number from 1 to 1024")));
  }
  EXPECT_EQ(Ctl({"submit", "-f", "job.yaml", "--ps", "-1"}, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("--ps: '-1' is not a whole number from 0 to 1024"));
}

// An address gRPC would dial as port 0, or not at all, is a usage error naming where it came
// from; addresses it can dial go through (nothing listens there: 4).
TEST_F(DlrmctlErrorsTest, CoordinatorAddressMustHaveAPort) {
  std::string out, err;
  for (const char* address : {"127.0.0.1:", "127.0.0.1:0", "127.0.0.1", "127.0.0.1:70000",
                              "127.0.0.1:-1", "127.0.0.1:5 0", ":50051", "::1:50051", "[::1]"}) {
    EXPECT_EQ(RunCtl("unused:1", {"--coordinator", address, "list"}, &out, &err), kExitUsage)
        << address << ": " << err;
    EXPECT_THAT(err, HasSubstr(absl::StrCat("--coordinator '", address, "'"))) << address;
    EXPECT_THAT(err, HasSubstr("HOST:PORT")) << address;
  }
  EXPECT_EQ(RunCtl("127.0.0.1:", {"list"}, &out, &err), kExitUsage) << err;
  EXPECT_THAT(err, HasSubstr("$DLRM_COORDINATOR '127.0.0.1:'"));
  for (const char* address : {"127.0.0.1:1", "[::1]:1", "localhost:1", "dns:///127.0.0.1:1"}) {
    EXPECT_EQ(RunCtl("unused:1", {"--coordinator", address, "--timeout", "2", "list"}, &out, &err),
              kExitUnavailable)
        << address << ": " << err;
  }
  // version works without a coordinator, and says why it has none.
  EXPECT_EQ(RunCtl("unused:1", {"--coordinator", "127.0.0.1:", "version"}, &out, &err), kExitOk);
  EXPECT_THAT(out, HasSubstr("server: unknown (--coordinator '127.0.0.1:': no port"));
}

// The admin certificate of another cluster's CA: the coordinator answers, the handshake fails.
// That is an authentication failure (5), not an unreachable coordinator (4, "is a coordinator
// running?"). So is a coordinator whose certificate does not name the host, or one that does not
// speak TLS at all.
TEST_F(DlrmctlErrorsTest, TlsHandshakeFailuresAreAuthenticationFailures) {
  const std::string ours = Certificates("ours");
  const std::string theirs = Certificates("theirs");
  Serve(common::TransportSecurity::FromDir(ours + "/coordinator"));
  std::string err;
  ASSERT_EQ(Ctl({"--tls-dir", ours + "/admin", "list"}, &err), kExitOk) << err;
  EXPECT_EQ(service_->list_calls(), 1);

  EXPECT_EQ(Ctl({"--tls-dir", theirs + "/admin", "--timeout", "5", "list"}, &err), kExitDenied)
      << err;
  EXPECT_THAT(err, HasSubstr("not signed by the CA this client trusts"));
  EXPECT_THAT(err, Not(HasSubstr("is a coordinator running")));
  EXPECT_EQ(Ctl({"--tls-dir", theirs + "/admin", "--timeout", "5", "watch", "job-1"}, &err),
            kExitDenied)
      << err;

  EXPECT_EQ(
      Ctl({"--tls-dir", ours + "/admin", "--tls-server-name", "elsewhere.example", "list"}, &err),
      kExitDenied)
      << err;
  EXPECT_THAT(err, HasSubstr("--tls-server-name"));

  // Our CA, but a certificate of theirs: the coordinator closes the connection, which gRPC
  // reports as it reports a coordinator going away. The message says so; the code stays 4.
  EXPECT_EQ(Ctl({"--tls-ca", ours + "/admin/ca.crt", "--tls-cert", theirs + "/admin/tls.crt",
                 "--tls-key", theirs + "/admin/tls.key", "--timeout", "5", "list"},
                &err),
            kExitUnavailable)
      << err;
  EXPECT_THAT(err, HasSubstr("gRPC does not tell that apart"));
}

// A server of the cluster's own CA that is not the coordinator (a worker's certificate, as anyone
// holding it could serve at the coordinator's address): refused at the handshake, naming both
// identities, before a request or a token leaves the client.
TEST_F(DlrmctlErrorsTest, AServerWithAnotherRolesCertificateIsNotTheCoordinator) {
  const std::string ours = Certificates("ours");
  for (const char* role : {"worker", "admin", "ps"}) {
    Serve(common::TransportSecurity::FromDir(ours + "/" + role));
    std::string err;
    EXPECT_EQ(Ctl({"--tls-dir", ours + "/admin", "--timeout", "5", "list"}, &err), kExitDenied)
        << role << ": " << err;
    EXPECT_THAT(err, HasSubstr(absl::StrCat("identity '", role, "', not 'coordinator'"))) << role;
    EXPECT_THAT(err, HasSubstr("is not the coordinator")) << role;
    EXPECT_EQ(service_->list_calls(), 0) << role;
    TearDown();
  }
}

TEST_F(DlrmctlErrorsTest, TlsClientOfAPlaintextCoordinatorIsRefused) {
  const std::string ours = Certificates("ours");
  Serve();
  std::string err;
  EXPECT_EQ(Ctl({"--tls-dir", ours + "/admin", "--timeout", "5", "list"}, &err), kExitDenied)
      << err;
  EXPECT_THAT(err, HasSubstr("does not speak TLS"));
}

// `checkpoint --wait` whose coordinator stops answering: 4 within --timeout, not 1 after the
// whole --wait-timeout.
TEST_F(DlrmctlErrorsTest, CheckpointWaitEndsWhenTheCoordinatorStopsAnswering) {
  Serve();
  service_->StopAnsweringAfterCheckpointRequest();
  std::string err;
  const absl::Time start = absl::Now();
  EXPECT_EQ(Ctl({"--timeout", "1", "checkpoint", "job-6", "--wait", "--wait-timeout", "20"}, &err),
            kExitUnavailable)
      << err;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(err, HasSubstr("checkpoint requested"));
  EXPECT_THAT(err, HasSubstr("DEADLINE_EXCEEDED"));
}

// `checkpoint --wait` on a job that commits its final checkpoint and ends between two reads of
// its folder: the checkpoint is printed (0), not "ended before a new checkpoint was committed".
TEST_F(DlrmctlErrorsTest, CheckpointWaitSeesTheFinalCheckpointOfAJobThatEnded) {
  Serve();
  service_->EndAfterCheckpointRequest();
  std::string out, err;
  EXPECT_EQ(RunCtl(server_->address(), {"checkpoint", "job-6", "--wait"}, &out, &err), kExitOk)
      << err;
  EXPECT_EQ(out, absl::StrCat(dir_.Sub("checkpoints"), "/ckpt-000000000500\n"));
  EXPECT_THAT(err, Not(HasSubstr("ended")));
}

// A submit or cancel whose answer does not come within --timeout: the coordinator is there
// (slow), and may have queued or cancelled the job. dlrmctl says so, and how to check, instead
// of asking whether a coordinator runs there (a user who trusts that submits the job twice).
TEST_F(DlrmctlErrorsTest, ChangeWithoutAnAnswerMayHaveBeenMade) {
  Serve();
  const std::string spec = dir_.Sub("job.yaml");
  std::ofstream(spec) << dlrm::testing::kTinySpec;
  std::string err;
  EXPECT_EQ(Ctl({"--timeout", "0.5", "submit", "-f", spec}, &err), kExitUnavailable) << err;
  EXPECT_THAT(err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(err, HasSubstr("did not answer within --timeout 0.5 s, but it may have queued the "
                             "job: see 'dlrmctl list' before submitting it again"));
  EXPECT_THAT(err, Not(HasSubstr("is a coordinator running")));
  EXPECT_EQ(Ctl({"--timeout", "0.5", "cancel", "job-3"}, &err), kExitUnavailable) << err;
  EXPECT_THAT(err, HasSubstr("but it may have cancelled job job-3: see 'dlrmctl status job-3'"));
  EXPECT_THAT(err, Not(HasSubstr("is a coordinator running")));
  // A coordinator that is not there: no change could have been made.
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(Ctl({"--timeout", "2", "submit", "-f", spec}, &err), kExitUnavailable) << err;
  EXPECT_THAT(err, HasSubstr("is a coordinator running"));
  EXPECT_THAT(err, Not(HasSubstr("may have")));
}

}  // namespace
}  // namespace dlrm::client
