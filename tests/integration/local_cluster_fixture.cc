#include "tests/integration/local_cluster_fixture.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace dlrm::testing {

namespace fs = std::filesystem;

std::string JobYaml(const JobSpec& spec) {
  return absl::StrCat(
      "name: ", spec.name,
      "\nmodel: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8",
      spec.model.empty() ? "" : ", ", spec.model, "}\n", kCappedKaggleTablesYaml,
      spec.table_dtype.empty() ? "" : absl::StrCat("  dtype: ", spec.table_dtype, "\n"),
      "optimizer:\n  dense: {", spec.dense_optimizer, "}\n  sparse: {", spec.sparse_optimizer,
      "}\n", spec.lr_schedule.empty() ? "" : absl::StrCat("  schedule: {", spec.lr_schedule, "}\n"),
      "training: {", spec.training, "}\ndata: {train: ", spec.train, ", eval_fraction: 0.1}\n",
      spec.checkpoint.empty() ? "" : absl::StrCat("checkpoint: {", spec.checkpoint, "}\n"));
}

std::string* LocalClusterTest::dir_ = nullptr;

bool LocalClusterTest::MakeDataDir(const std::string& prefix, int64_t rows, int64_t max_rows,
                                   int seed) {
  dir_ = new std::string(MakeGeneratedDataDir(prefix, rows, max_rows, seed));
  return !dir_->empty();
}

void LocalClusterTest::TearDownTestSuite() {
  std::error_code ec;
  if (dir_ != nullptr && !dir_->empty()) fs::remove_all(*dir_, ec);
  delete dir_;
  dir_ = nullptr;
}

std::string LocalClusterTest::WriteSpec(const JobSpec& spec) {
  const std::string path = absl::StrCat(Dir(), "/", spec.name, ".yaml");
  std::ofstream(path) << JobYaml(spec);
  return path;
}

std::unique_ptr<Process> LocalClusterTest::StartCluster(const std::string& name,
                                                        const std::string& spec,
                                                        const std::vector<std::string>& args) {
  const std::string cluster = absl::StrCat(Dir(), "/", name, "-cluster");
  std::vector<std::string> argv = {
      BinPath("dlrm"),    "local", "-c",         spec,   "--keep-running", "--no-progress",
      "--worker-threads", "1",     "--data-dir", cluster};
  argv.insert(argv.end(), args.begin(), args.end());
  auto local = std::make_unique<Process>(argv, Dir(), name);
  // The job's run prints the address only when it ends: read the cluster's port file.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline && local->Running() &&
         !absl::StrContains(local->Stderr(), "local cluster up")) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ConnectTo(*local, cluster, absl::Seconds(2));
  return local;
}

void LocalClusterTest::ConnectTo(const Process& local, const std::string& cluster_dir,
                                 absl::Duration timeout) {
  const std::string port_file = cluster_dir + "/coordinator.port";
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(ReadFileOrEmpty(port_file), &port))
      << port_file << "; " << local.Stderr();
  address_ = absl::StrCat("127.0.0.1:", port);
  tls_dir_ = cluster_dir + "/tls/admin";
  Connect(timeout);
}

void LocalClusterTest::Connect(absl::Duration timeout) {
  auto client =
      client::CoordinatorClient::Create({.address = address_,
                                         .timeout = timeout,
                                         .security = common::TransportSecurity::FromDir(tls_dir_)});
  EXPECT_TRUE(client.ok()) << client.status();
  if (client.ok()) client_ = std::move(*client);
}

void LocalClusterTest::WaitForKeptRunning(Process& local, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while ((address_.empty() || tls_dir_.empty()) && local.Running() && absl::Now() < deadline) {
    for (absl::string_view line : absl::StrSplit(local.Stdout(), '\n')) {
      if (absl::ConsumePrefix(&line, "coordinator: ")) address_ = std::string(line);
      if (absl::ConsumePrefix(&line, "tls-dir: ")) tls_dir_ = std::string(line);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

dlrm::v1::Job LocalClusterTest::WaitForJob(const std::string& job_id, absl::Duration timeout,
                                           const std::function<bool(const dlrm::v1::Job&)>& done) {
  dlrm::v1::Job last;
  const absl::Time deadline = absl::Now() + timeout;
  while (client_ != nullptr && absl::Now() < deadline) {
    absl::StatusOr<dlrm::v1::Job> job = client_->Get(job_id);
    if (job.ok()) {
      last = *job;
      if (done(last)) break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return last;
}

bool LocalClusterTest::Ended(const dlrm::v1::Job& job) {
  return job.state() == dlrm::v1::JOB_STATE_SUCCEEDED ||
         job.state() == dlrm::v1::JOB_STATE_FAILED || job.state() == dlrm::v1::JOB_STATE_CANCELLED;
}

pid_t LocalClusterTest::ChildWith(pid_t local, const std::string& role_flag) {
  for (pid_t child : ChildrenOf(local)) {
    if (absl::StrContains(CommandLine(child) + " ", role_flag)) return child;
  }
  return -1;
}

bool LocalClusterTest::Committed(const std::string& ckpt) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt, ec)) {
    if (fs::exists(e.path() / "MANIFEST.json")) return true;
  }
  return false;
}

bool LocalClusterTest::WaitForCommitted(const std::string& ckpt, Process& local,
                                        absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!Committed(ckpt) && local.Running() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  return Committed(ckpt);
}

}  // namespace dlrm::testing
