// Mutual TLS and the secure-by-default rule with the shipped binaries (issue 11): certificates
// from `dlrm certs`, a `dlrm coordinator` started as the Helm chart starts it (TLS folder, all
// interfaces), `dlrmctl` and `dlrm ps` as clients. The cluster's own identities get in; a client
// with a certificate of another CA, a plaintext client, and a parameter server with a foreign
// certificate do not; plaintext on a non-loopback address is refused unless --insecure.
// (A whole job over TLS runs in every `dlrm local` test: TLS is its default.)
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "common/grpc_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_load_request.h"
#include "tests/integration/process_util.h"
#include "tests/server/garbage_calls.h"
#include "worker/ps_client.h"

namespace dlrm::testing {
namespace {

namespace fs = std::filesystem;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dlrm-tls-it-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* ca : {"ours", "theirs"}) {
      ProcessResult certs = RunProcess({BinPath("dlrm"), "certs", "--out", dir_ + "/" + ca}, dir_,
                                       absl::StrCat("certs-", ca), absl::Seconds(30));
      ASSERT_EQ(certs.exit_code, 0) << certs.err;
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Starts a coordinator with `extra` flags; returns its port (0 when it did not come up).
  int StartCoordinator(std::unique_ptr<Process>* process, const std::vector<std::string>& extra) {
    const std::string port_file = dir_ + "/coordinator.port";
    std::error_code ec;
    fs::remove(port_file, ec);  // of the coordinator before
    std::vector<std::string> argv = {BinPath("dlrm"), "coordinator", "--data-dir",
                                     dir_ + "/coord", "--port-file", port_file};
    argv.insert(argv.end(), extra.begin(), extra.end());
    *process = std::make_unique<Process>(argv, dir_, "coordinator");
    int port = 0;
    for (int i = 0; i < 300 && !absl::SimpleAtoi(ReadFileOrEmpty(port_file), &port); ++i) {
      if (!(*process)->Running()) return 0;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return port;
  }

  ProcessResult Dlrmctl(int port, const std::vector<std::string>& tls, const std::string& name) {
    std::vector<std::string> argv = {BinPath("dlrmctl"), "--coordinator",
                                     absl::StrCat("127.0.0.1:", port), "--timeout", "3"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    argv.insert(argv.end(), {"members", "-o", "json"});
    return RunProcess(argv, dir_, name, absl::Seconds(30));
  }

  // A valid job spec to submit (it never runs: no workers).
  std::string WriteTinySpec() {
    const std::string spec = dir_ + "/job.yaml";
    // Criteo input's shape (13 dense features, 26 tables), which SubmitJob checks.
    std::ofstream(spec)
        << "name: x\nmodel: {dense_features: 13, bottom_mlp: [8], "
           "top_mlp: [4, 1], embedding_dim: 8}\ntables: {cardinalities: [10, 10, "
           "10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, "
           "10, 10, 10, 10, 10, 10]}\ndata: {train: [t.tsv]}\n";
    return spec;
  }

  std::string dir_;
};

TEST_F(TlsTest, OnlyTheClusterCaGetsIn) {
  // As the chart starts it: every interface, certificates from a folder.
  std::unique_ptr<Process> coordinator;
  const int port = StartCoordinator(
      &coordinator,
      {"--listen", "0.0.0.0:0", "--tls-dir", dir_ + "/ours/coordinator", "--lease-ttl", "3s"});
  ASSERT_GT(port, 0) << coordinator->Stderr();
  EXPECT_TRUE(absl::StrContains(coordinator->Stderr(), "mutual TLS")) << coordinator->Stderr();

  ProcessResult admin = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "admin");
  EXPECT_EQ(admin.exit_code, 0) << admin.err;

  // The same files one by one.
  ProcessResult by_file = Dlrmctl(port,
                                  {"--tls-cert", dir_ + "/ours/admin/tls.crt", "--tls-key",
                                   dir_ + "/ours/admin/tls.key", "--tls-ca", dir_ + "/ours/ca.crt"},
                                  "admin-files");
  EXPECT_EQ(by_file.exit_code, 0) << by_file.err;

  // Another CA's certificate, and no certificate at all: the handshake fails and nothing
  // reaches the coordinator. The client refuses the coordinator's certificate (not signed by
  // the CA it trusts): exit 5, naming the CA; a plaintext client sees a peer that goes away,
  // which gRPC cannot tell from an unreachable one: exit 4.
  ProcessResult foreign = Dlrmctl(port, {"--tls-dir", dir_ + "/theirs/admin"}, "foreign");
  EXPECT_EQ(foreign.exit_code, 5) << foreign.out << foreign.err;
  EXPECT_TRUE(absl::StrContains(foreign.err, "not signed by the CA this client trusts"))
      << foreign.err;
  ProcessResult plaintext = Dlrmctl(port, {}, "plaintext");
  EXPECT_EQ(plaintext.exit_code, 4) << plaintext.out << plaintext.err;
  ProcessResult partial =
      Dlrmctl(port, {"--tls-cert", dir_ + "/ours/admin/tls.crt"}, "partial-flags");
  EXPECT_NE(partial.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(partial.err, "--tls-key is missing")) << partial.err;

  // A parameter server with a foreign certificate never becomes a member; one with ours does.
  Process intruder({BinPath("dlrm"), "ps", "--coordinator", absl::StrCat("127.0.0.1:", port),
                    "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/ps-intruder", "--tls-dir",
                    dir_ + "/theirs/ps", "--name", "intruder"},
                   dir_, "ps-intruder");
  Process member({BinPath("dlrm"), "ps", "--coordinator", absl::StrCat("127.0.0.1:", port),
                  "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/ps-member", "--tls-dir",
                  dir_ + "/ours/ps", "--name", "member"},
                 dir_, "ps-member");
  std::string members;
  for (int i = 0; i < 100; ++i) {
    members = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "members").out;
    if (absl::StrContains(members, "\"member\"")) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(absl::StrContains(members, "\"member\"")) << members;
  absl::SleepFor(absl::Seconds(1));  // the intruder has retried meanwhile
  members = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "members-again").out;
  EXPECT_FALSE(absl::StrContains(members, "intruder")) << members;
  intruder.Signal(SIGTERM);
  member.Signal(SIGTERM);
  intruder.Wait(absl::Seconds(10));
  member.Wait(absl::Seconds(10));
  coordinator->Signal(SIGTERM);
  EXPECT_EQ(coordinator->Wait(absl::Seconds(10)).exit_code, 0);
}

// The access policy of common/authz.h: identities of our own CA that call what they may not are
// PERMISSION_DENIED (dlrmctl exit 5), naming the identity.
TEST_F(TlsTest, MembersStartedBeforeTheCoordinatorRegisterOnceItListens) {
  // Kubernetes starts pods in any order. Before the Register call waited for its channel, a
  // worker or PS started first over TLS kept failing fast while nothing drove its connection
  // attempts, each of which then ran past its connect deadline: it gave up after 60 s even
  // though the coordinator listened after 3 (k8s/checks/run_manifests.py found it).
  const int port = FreePort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  Process worker({BinPath("dlrm"), "worker", "--coordinator", address, "--tls-dir",
                  dir_ + "/ours/worker", "--metrics-port", "-1", "--name", "early-worker"},
                 dir_, "early-worker");
  Process ps({BinPath("dlrm"), "ps", "--coordinator", address, "--listen", "127.0.0.1:0",
              "--data-dir", dir_ + "/ps-early", "--tls-dir", dir_ + "/ours/ps", "--metrics-port",
              "-1", "--name", "early-ps"},
             dir_, "early-ps");
  absl::SleepFor(absl::Seconds(3));  // several failed connection attempts each
  std::unique_ptr<Process> coordinator;
  ASSERT_EQ(StartCoordinator(&coordinator,
                             {"--listen", address, "--tls-dir", dir_ + "/ours/coordinator"}),
            port)
      << coordinator->Stderr();
  const absl::Time listening = absl::Now();
  std::string members;
  while (absl::Now() - listening < absl::Seconds(20)) {
    members = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "members").out;
    if (absl::StrContains(members, "early-worker") && absl::StrContains(members, "early-ps")) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(absl::StrContains(members, "early-worker")) << members << worker.Stderr();
  EXPECT_TRUE(absl::StrContains(members, "early-ps")) << members << ps.Stderr();
  EXPECT_TRUE(worker.Running()) << worker.Stderr();
  EXPECT_TRUE(ps.Running()) << ps.Stderr();
  worker.Signal(SIGTERM);
  ps.Signal(SIGTERM);
  worker.Wait(absl::Seconds(10));
  ps.Wait(absl::Seconds(10));
  coordinator->Signal(SIGTERM);
  EXPECT_EQ(coordinator->Wait(absl::Seconds(10)).exit_code, 0);
}

TEST_F(TlsTest, AMemberHeartbeatsToACoordinatorBackAfterSecondsAway) {
  // A coordinator down for a few seconds (a pod rescheduled) and back at the same address: its
  // members' heartbeats reach it again at once. Failing fast while their channel was in
  // backoff, they drove no reconnection over TLS, so every member's lease ran out (14 s) and
  // every running job went RECOVERING.
  const int port = FreePort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::vector<std::string> flags = {"--listen", address, "--tls-dir",
                                          dir_ + "/ours/coordinator"};
  std::unique_ptr<Process> coordinator;
  ASSERT_EQ(StartCoordinator(&coordinator, flags), port) << coordinator->Stderr();
  Process worker({BinPath("dlrm"), "worker", "--coordinator", address, "--tls-dir",
                  dir_ + "/ours/worker", "--metrics-port", "-1", "--name", "steady-worker"},
                 dir_, "steady-worker");
  auto last_heartbeat_ms = [&]() -> int64_t {
    const std::string members = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "members").out;
    const size_t at = members.find("\"last_heartbeat_ms\"");
    int64_t ms = -1;
    if (at == std::string::npos) return ms;
    const size_t digits = members.find_first_of("0123456789", at + 19);
    const size_t end = members.find_first_not_of("0123456789", digits);
    (void)absl::SimpleAtoi(members.substr(digits, end - digits), &ms);
    return ms;
  };
  for (int i = 0; i < 100 && last_heartbeat_ms() <= 0; ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_GT(last_heartbeat_ms(), 0) << worker.Stderr();
  coordinator->Signal(SIGKILL);
  coordinator->Wait(absl::Seconds(10));
  absl::SleepFor(absl::Seconds(6));  // the worker's channel backs off meanwhile
  ASSERT_EQ(StartCoordinator(&coordinator, flags), port) << coordinator->Stderr();
  const int64_t back_ms = absl::ToUnixMillis(absl::Now());
  int64_t seen = -1;
  for (int i = 0; i < 80 && (seen = last_heartbeat_ms()) < back_ms; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GE(seen, back_ms) << "no heartbeat in 8 s after the coordinator came back\n"
                           << worker.Stderr();
  EXPECT_FALSE(absl::StrContains(worker.Stderr(), "registering again")) << worker.Stderr();
  worker.Signal(SIGTERM);
  worker.Wait(absl::Seconds(10));
  coordinator->Signal(SIGTERM);
  EXPECT_EQ(coordinator->Wait(absl::Seconds(10)).exit_code, 0);
}

TEST_F(TlsTest, EachIdentityCallsOnlyWhatItMay) {
  std::unique_ptr<Process> coordinator;
  const int port = StartCoordinator(
      &coordinator, {"--listen", "127.0.0.1:0", "--tls-dir", dir_ + "/ours/coordinator"});
  ASSERT_GT(port, 0) << coordinator->Stderr();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::string spec = WriteTinySpec();

  // A worker's certificate cannot submit or list jobs (only admin may).
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"submit", "-f", spec}, std::vector<std::string>{"list"}}) {
    std::vector<std::string> argv = {BinPath("dlrmctl"), "--coordinator", address, "--tls-dir",
                                     dir_ + "/ours/worker"};
    argv.insert(argv.end(), verb.begin(), verb.end());
    ProcessResult r = RunProcess(argv, dir_, "worker-as-admin-" + verb[0], absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "not allowed for identity 'worker'")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "PERMISSION_DENIED")) << r.err;
  }
  // The admin may.
  ProcessResult list = RunProcess(
      {BinPath("dlrmctl"), "--coordinator", address, "--tls-dir", dir_ + "/ours/admin", "list"},
      dir_, "admin-list", absl::Seconds(30));
  EXPECT_EQ(list.exit_code, 0) << list.err;

  // A parameter server started with a worker's (or the admin's) certificate cannot register as a
  // parameter server: it would receive the job's ids and gradients.
  Process posing(
      {BinPath("dlrm"), "ps", "--coordinator", address, "--listen", "127.0.0.1:0", "--data-dir",
       dir_ + "/ps-posing", "--tls-dir", dir_ + "/ours/worker", "--name", "posing"},
      dir_, "ps-posing");
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {
    refused = absl::StrContains(posing.Stderr(),
                                "registering as ps is not allowed for identity "
                                "'worker'");
    if (!refused) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(refused) << posing.Stderr();
  ProcessResult members = RunProcess({BinPath("dlrmctl"), "--coordinator", address, "--tls-dir",
                                      dir_ + "/ours/admin", "members", "-o", "json"},
                                     dir_, "members-after-posing", absl::Seconds(30));
  EXPECT_FALSE(absl::StrContains(members.out, "posing")) << members.out;
  posing.Signal(SIGKILL);
  posing.Wait(absl::Seconds(10));
  coordinator->Signal(SIGTERM);
  coordinator->Wait(absl::Seconds(10));
}

// Workers share one certificate, so a certificate cannot tell the rank the coordinator chose from
// any other worker (common/grants.h). The data calls of a parameter server (LoadJob, Lookup,
// PushGradients, ReadRows) need the coordinator's member grant for the job at its epoch, which
// every rank of the job gets; its admin methods (WriteRows, Checkpoint, UnloadJob) need the job's
// admin grant, which only rank 0 gets. Here the test registers as a worker itself (with the
// worker certificate) and is given rank 0 of a submitted job: without the member grant, with a
// made-up one, with the grant of another epoch or for a made-up job, a worker certificate cannot
// load or read; with the member grant but no admin grant (or a made-up one), and with the admin
// certificate, it cannot overwrite rows, take a checkpoint or unload the job; rows read the same
// before and after.
TEST_F(TlsTest, ParameterServerCallsNeedTheCoordinatorsGrants) {
  using ::testing::HasSubstr;
  std::unique_ptr<Process> coordinator;
  const int port = StartCoordinator(
      &coordinator, {"--listen", "127.0.0.1:0", "--tls-dir", dir_ + "/ours/coordinator"});
  ASSERT_GT(port, 0) << coordinator->Stderr();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  Process ps({BinPath("dlrm"), "ps", "--coordinator", address, "--listen", "127.0.0.1:0",
              "--data-dir", dir_ + "/ps", "--tls-dir", dir_ + "/ours/ps"},
             dir_, "ps");
  auto coordinator_client = [&](const std::string& identity) {
    auto c = client::CoordinatorClient::Create(
        {.address = address,
         .security = common::TransportSecurity::FromDir(dir_ + "/ours/" + identity)});
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  auto as_worker = coordinator_client("worker");
  auto registered = as_worker->Register(
      client::MakeRegisterRequest(dlrm::v1::ROLE_WORKER, "127.0.0.1:1", "", "grant-test"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  // Submitted once the server has registered (a job starts on the servers alive then).
  for (int i = 0; i < 100; ++i) {
    auto members = coordinator_client("admin")->Members();
    if (members.ok() && members->shard_map_size() > 0 && !members->shard_map(0).empty()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::string spec_yaml;
  {
    std::ifstream in(WriteTinySpec());
    spec_yaml.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_TRUE(coordinator_client("admin")->Submit(spec_yaml).ok());
  dlrm::v1::WorkerAssignment assignment;
  for (int i = 0; i < 100 && !assignment.has_job(); ++i) {
    auto beat = as_worker->Heartbeat(registered->member_id(), registered->member_key());
    ASSERT_TRUE(beat.ok()) << beat.status();
    if (beat->has_worker() && beat->worker().has_job()) {
      assignment = beat->worker();
    } else {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  ASSERT_TRUE(assignment.has_job()) << ps.Stderr();
  ASSERT_EQ(assignment.rank(), 0);
  // One server, so one grant of each kind (made with that server's key).
  ASSERT_EQ(assignment.member_grants_size(), 1);
  ASSERT_EQ(assignment.job_grants_size(), 1);
  ASSERT_EQ(assignment.load_grants_size(), 1);
  const std::string job_id = assignment.job().job_id();
  const int64_t epoch = assignment.job().job_epoch();
  // The job's tables and parameters, as a worker takes them from its spec.
  auto spec = common::ParseJobSpec(assignment.job().job_spec_yaml(), "the assigned job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto params = server::PsJobParamsFromSpec(*spec, assignment.job().world_size(), false);
  ASSERT_TRUE(params.ok()) << params.status();

  auto client = [&](const std::string& identity, const std::string& job, int64_t at,
                    const std::string& member_grant, const std::string& job_grant,
                    const std::string& load_grant = "",
                    std::vector<embedding::TableConfig> tables = {}) {
    worker::PsClientOptions options;
    options.ps_addresses.assign(assignment.job().ps_addresses().begin(),
                                assignment.job().ps_addresses().end());
    options.job_id = job;
    options.job_epoch = at;
    options.tables = tables.empty() ? server::TableConfigsFromSpec(*spec) : tables;
    options.rpc_timeout = absl::Seconds(10);
    options.security = common::TransportSecurity::FromDir(dir_ + "/ours/" + identity);
    if (!member_grant.empty()) options.member_grants = {member_grant};
    if (!job_grant.empty()) options.job_grants = {job_grant};
    if (!load_grant.empty()) options.load_grants = {load_grant};
    auto c = worker::GrpcPsClient::Create(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  const std::string grant = assignment.member_grants(0);
  const std::string load_grant = assignment.load_grants(0);
  const std::string made_up(64, 'a');
  for (auto [job, at, member] :
       {std::tuple{job_id, epoch, std::string()}, std::tuple{job_id, epoch, made_up},
        std::tuple{job_id, epoch + 1, grant},
        std::tuple{std::string("made-up-job"), epoch, grant}}) {
    absl::Status loaded = client("worker", job, at, member, "", load_grant)->LoadJobOnAll(*params);
    EXPECT_EQ(loaded.code(), absl::StatusCode::kPermissionDenied) << loaded;
    EXPECT_THAT(std::string(loaded.message()),
                HasSubstr("needs the coordinator's grant for the job's ranks"));
  }
  // A rank's member grant, but tables of its own choosing (as rank 0 loaded 2^33-row tables of
  // a job of 10-row ones before load grants) or no load grant: refused.
  std::vector<embedding::TableConfig> huge_tables = server::TableConfigsFromSpec(*spec);
  for (embedding::TableConfig& t : huge_tables) t.rows = int64_t{1} << 33;
  for (auto [tables, load] : {std::pair{huge_tables, load_grant},
                              std::pair{std::vector<embedding::TableConfig>{}, std::string()}}) {
    absl::Status loaded =
        client("worker", job_id, epoch, grant, "", load, tables)->LoadJobOnAll(*params);
    EXPECT_EQ(loaded.code(), absl::StatusCode::kPermissionDenied) << loaded;
    EXPECT_THAT(std::string(loaded.message()), HasSubstr("needs the coordinator's load grant"));
  }
  auto worker = client("worker", job_id, epoch, grant, "", load_grant);
  ASSERT_TRUE(worker->LoadJobOnAll(*params).ok());
  auto read = [&] {
    embedding::TableRows r;
    r.ids = {1, 2, 3};
    EXPECT_TRUE(worker->ReadStoredRows({&r, 1}).ok());
    return r.values;
  };
  const std::vector<float> before = read();
  embedding::TableRows probe;
  probe.ids = {1, 2, 3};
  absl::Status unread = client("worker", job_id, epoch, "", "")->ReadStoredRows({&probe, 1});
  EXPECT_EQ(unread.code(), absl::StatusCode::kPermissionDenied) << unread;
  embedding::TableRows huge;
  huge.ids = {1, 2, 3};
  huge.values.assign(huge.ids.size() * before.size() / 3, 1e30f);
  for (const std::string& admin_grant : {std::string(), made_up}) {
    auto forger = client("worker", job_id, epoch, grant, admin_grant);
    absl::Status written = forger->WriteStoredRows({&huge, 1});
    EXPECT_EQ(written.code(), absl::StatusCode::kPermissionDenied) << written;
    EXPECT_THAT(std::string(written.message()), HasSubstr("the coordinator's grant for the job"));
    absl::Status snapshot = forger->CheckpointAll(1, /*write=*/false, "").status();
    EXPECT_EQ(snapshot.code(), absl::StatusCode::kPermissionDenied) << snapshot;
    absl::Status unloaded = forger->UnloadJobOnAll();
    EXPECT_EQ(unloaded.code(), absl::StatusCode::kPermissionDenied) << unloaded;
  }
  absl::Status as_admin =
      client("admin", job_id, epoch, grant, assignment.job_grants(0))->WriteStoredRows({&huge, 1});
  EXPECT_EQ(as_admin.code(), absl::StatusCode::kPermissionDenied) << as_admin;
  EXPECT_THAT(std::string(as_admin.message()), HasSubstr("identity 'admin'"));
  EXPECT_EQ(read(), before);  // the job is still loaded and its rows are untouched
  // Rank 0's grants together: the rows are written.
  EXPECT_TRUE(client("worker", job_id, epoch, grant, assignment.job_grants(0))
                  ->WriteStoredRows({&huge, 1})
                  .ok());
  EXPECT_NE(read(), before);
  ps.Signal(SIGTERM);
  ps.Wait(absl::Seconds(10));
  coordinator->Signal(SIGTERM);
  coordinator->Wait(absl::Seconds(10));
}

// Every certificate of the cluster's CA verifies, so a member checks the identity of the server
// it dials too: whoever holds a worker's certificate and takes over the coordinator's or a
// server's address is refused at the handshake, before a registration or a row leaves.
TEST_F(TlsTest, MembersRefuseAServerWithAnotherRolesCertificate) {
  std::unique_ptr<Process> impostor;
  const int port =
      StartCoordinator(&impostor, {"--listen", "127.0.0.1:0", "--tls-dir", dir_ + "/ours/worker"});
  ASSERT_GT(port, 0) << impostor->Stderr();
  Process ps({BinPath("dlrm"), "ps", "--coordinator", absl::StrCat("127.0.0.1:", port), "--listen",
              "127.0.0.1:0", "--data-dir", dir_ + "/ps", "--tls-dir", dir_ + "/ours/ps"},
             dir_, "ps");
  const std::string refused = "of the identity 'worker', not 'coordinator'";
  for (int i = 0; i < 600 && !absl::StrContains(ps.Stderr(), refused); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::StrContains(ps.Stderr(), refused)) << ps.Stderr();
  EXPECT_FALSE(absl::StrContains(impostor->Stderr(), "registered")) << impostor->Stderr();
  ps.Signal(SIGTERM);
  ps.Wait(absl::Seconds(10));
  impostor->Signal(SIGTERM);
  impostor->Wait(absl::Seconds(10));

  // A worker's parameter-server client and a server with the worker certificate.
  auto fake_ps = common::GrpcServer::Start(
      {.listen_address = "127.0.0.1:0",
       .security = common::TransportSecurity::FromDir(dir_ + "/ours/worker")},
      {});
  ASSERT_TRUE(fake_ps.ok()) << fake_ps.status();
  worker::PsClientOptions options;
  options.ps_addresses = {(*fake_ps)->address()};
  options.job_id = "job-1";
  options.tables = {{"t0", 100, 4}};
  options.rpc_timeout = absl::Seconds(3);
  options.security = common::TransportSecurity::FromDir(dir_ + "/ours/worker");
  auto client = worker::GrpcPsClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Status loaded = (*client)->LoadJobOnAll({});
  EXPECT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.message()),
              ::testing::HasSubstr("of the identity 'worker', not 'ps'"));
}

// Bearer tokens (--tokens on the coordinator, --token-file on dlrmctl): people come without a
// certificate; admin may submit, viewer only read; a wrong token is UNAUTHENTICATED; certificates
// still work.
TEST_F(TlsTest, TokensLetPeopleInWithoutACertificate) {
  const std::string tokens = dir_ + "/tokens";
  std::ofstream(tokens) << "# identity token\nadmin admin-0123456789abcdef\n\n"
                           "viewer viewer-0123456789abcdef\n";
  std::ofstream(dir_ + "/admin.tok") << "admin-0123456789abcdef\n";
  std::ofstream(dir_ + "/viewer.tok") << "viewer-0123456789abcdef\n";
  std::ofstream(dir_ + "/wrong.tok") << "admin-0123456789abcdeX\n";
  std::unique_ptr<Process> coordinator;
  const int port = StartCoordinator(&coordinator, {"--listen", "127.0.0.1:0", "--tls-dir",
                                                   dir_ + "/ours/coordinator", "--tokens", tokens});
  ASSERT_GT(port, 0) << coordinator->Stderr();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::string spec = WriteTinySpec();
  auto ctl = [&](const std::string& token, std::vector<std::string> verb) {
    std::vector<std::string> argv = {BinPath("dlrmctl"), "--coordinator",       address,
                                     "--tls-ca",         dir_ + "/ours/ca.crt", "--token-file",
                                     dir_ + "/" + token};
    argv.insert(argv.end(), verb.begin(), verb.end());
    return RunProcess(argv, dir_, token + "-" + verb[0], absl::Seconds(30));
  };
  ProcessResult admin = ctl("admin.tok", {"submit", "-f", spec});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  ProcessResult viewer_reads = ctl("viewer.tok", {"list"});
  EXPECT_EQ(viewer_reads.exit_code, 0) << viewer_reads.err;
  EXPECT_TRUE(absl::StrContains(viewer_reads.out, "job-1")) << viewer_reads.out;
  ProcessResult viewer_cancels = ctl("viewer.tok", {"cancel", "job-1"});
  EXPECT_EQ(viewer_cancels.exit_code, 5) << viewer_cancels.err;
  EXPECT_TRUE(absl::StrContains(viewer_cancels.err, "identity 'viewer'")) << viewer_cancels.err;
  ProcessResult wrong = ctl("wrong.tok", {"list"});
  EXPECT_EQ(wrong.exit_code, 5) << wrong.err;
  EXPECT_TRUE(absl::StrContains(wrong.err, "UNAUTHENTICATED")) << wrong.err;
  EXPECT_FALSE(absl::StrContains(wrong.err, "0123456789")) << "a token in a message";
  // A caller without a valid token is refused before its request is parsed (a parse may take many
  // times a request's size in memory): bytes that are no request answer UNAUTHENTICATED, not
  // "malformed".
  {
    common::TransportSecurity no_certificate;
    no_certificate.mode = common::TransportSecurity::Mode::kTls;
    no_certificate.root_certs_path = dir_ + "/ours/ca.crt";
    no_certificate.bearer_token = "admin-0123456789abcdeX";
    auto channel = common::MakeChannel({.target = address, .security = no_certificate});
    ASSERT_TRUE(channel.ok()) << channel.status();
    for (const char* method : {"/dlrm.v1.Jobs/SubmitJob", "/dlrm.v1.Jobs/ListJobs",
                               "/dlrm.v1.Coordinator/Register", "/dlrm.v1.Coordinator/KvGet"}) {
      const grpc::Status s = RawUnaryCall(*channel, method, std::string(1 << 16, '\xff'));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << ": " << s.error_message();
    }
  }
  // Certificates still work next to tokens.
  ProcessResult by_cert = Dlrmctl(port, {"--tls-dir", dir_ + "/ours/admin"}, "cert-with-tokens");
  EXPECT_EQ(by_cert.exit_code, 0) << by_cert.err;
  // A token is never sent in plaintext.
  ProcessResult plaintext = RunProcess(
      {BinPath("dlrmctl"), "--coordinator", address, "--token-file", dir_ + "/admin.tok", "list"},
      dir_, "token-plaintext", absl::Seconds(30));
  EXPECT_NE(plaintext.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(plaintext.err, "only sent over TLS")) << plaintext.err;
  coordinator->Signal(SIGTERM);
  coordinator->Wait(absl::Seconds(10));

  // A token file with a short token, and --tokens without TLS, stop the coordinator at start.
  std::ofstream(dir_ + "/bad-tokens") << "admin short\n";
  std::unique_ptr<Process> bad;
  EXPECT_EQ(StartCoordinator(&bad, {"--listen", "127.0.0.1:0", "--tls-dir",
                                    dir_ + "/ours/coordinator", "--tokens", dir_ + "/bad-tokens"}),
            0);
  EXPECT_TRUE(absl::StrContains(bad->Wait(absl::Seconds(10)).err, "bad-tokens line 1"));
  std::unique_ptr<Process> plain;
  EXPECT_EQ(StartCoordinator(&plain, {"--listen", "127.0.0.1:0", "--tokens", tokens}), 0);
  EXPECT_TRUE(absl::StrContains(plain->Wait(absl::Seconds(10)).err, "--tokens needs TLS"));
}

TEST_F(TlsTest, PlaintextOffLoopbackNeedsInsecure) {
  std::unique_ptr<Process> refused;
  EXPECT_EQ(StartCoordinator(&refused, {"--listen", "0.0.0.0:0"}), 0);
  ProcessResult result = refused->Wait(absl::Seconds(10));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(result.err, "refusing to serve plaintext gRPC on 0.0.0.0:0"))
      << result.err;
  ProcessResult ps = RunProcess({BinPath("dlrm"), "ps", "--data-dir", dir_ + "/ps"}, dir_,
                                "ps-default-listen", absl::Seconds(10));
  EXPECT_NE(ps.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(ps.err, "0.0.0.0:50061")) << ps.err;

  // --insecure accepts it, loudly.
  std::unique_ptr<Process> insecure;
  const int port = StartCoordinator(&insecure, {"--listen", "0.0.0.0:0", "--insecure"});
  ASSERT_GT(port, 0) << insecure->Stderr();
  EXPECT_TRUE(absl::StrContains(insecure->Stderr(), "--insecure: plaintext gRPC"))
      << insecure->Stderr();
  ProcessResult plaintext = Dlrmctl(port, {}, "plaintext-ok");
  EXPECT_EQ(plaintext.exit_code, 0) << plaintext.err;
  insecure->Signal(SIGTERM);
  insecure->Wait(absl::Seconds(10));

  // TLS together with --insecure is a usage error.
  std::unique_ptr<Process> both;
  EXPECT_EQ(StartCoordinator(&both, {"--insecure", "--tls-dir", dir_ + "/ours/coordinator"}), 0);
  EXPECT_TRUE(absl::StrContains(both->Wait(absl::Seconds(10)).err, "choose one"));
}

}  // namespace
}  // namespace dlrm::testing
