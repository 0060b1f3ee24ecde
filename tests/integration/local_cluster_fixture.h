// What the integration suites that run `dlrm local` share: their job specs (one tiny model on the
// capped Kaggle tables) and a fixture with a folder of generated data for the whole suite, which
// starts a cluster that keeps running and follows its jobs through the coordinator.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/integration/process_util.h"

namespace dlrm::testing {

// A job spec of the integration tests: a tiny DLRM (13 dense features, bottom MLP [16, 8], top MLP
// [16, 1], 8-wide embeddings) on kCappedKaggleTablesYaml's tables. Each block's settings are YAML
// flow style without the braces: "batch_size: 256, epochs: 1".
struct JobSpec {
  std::string name;
  std::string model = "";        // settings besides the tiny model's ("pooling: sum")
  std::string table_dtype = "";  // tables.dtype; none (the default) when empty
  std::string dense_optimizer = "type: adam, learning_rate: 0.003";
  std::string sparse_optimizer = "type: rowwise_adagrad, learning_rate: 0.05";
  std::string lr_schedule = "";  // optimizer.schedule's settings; no schedule when empty
  std::string training;
  std::string train = "[train.tsv]";  // data.train (files in the spec's folder)
  std::string checkpoint = "";        // no checkpoint block when empty
};

// The spec as YAML (`dlrm train -c` and `dlrm local -c` read it).
std::string JobYaml(const JobSpec& spec);

// A suite whose tests share one folder of generated data: a derived suite makes it in its
// SetUpTestSuite with MakeDataDir and it is removed after the suite's last test. A test may start
// a cluster that keeps running (StartCluster) and then reaches its coordinator through client_.
class LocalClusterTest : public ::testing::Test {
 protected:
  // MakeGeneratedDataDir(prefix, rows, max_rows, seed) as the suite's folder; false (a failure
  // recorded) when it could not be made.
  static bool MakeDataDir(const std::string& prefix, int64_t rows, int64_t max_rows, int seed);
  // Removes the folder; a suite with a TearDownTestSuite of its own calls this one.
  static void TearDownTestSuite();
  // The suite's folder. REQUIRES: MakeDataDir succeeded.
  static const std::string& Dir() { return *dir_; }

  // Writes `spec` to Dir()/<spec.name>.yaml; returns that path.
  static std::string WriteSpec(const JobSpec& spec);

  // `dlrm local -c spec --keep-running` with `args` after the spec, its --data-dir
  // Dir()/<name>-cluster and its output in Dir()/<name>.{out,err}. Waits up to 120 s for the
  // cluster to be up, then connects (ConnectTo, calls time out after 2 s).
  std::unique_ptr<Process> StartCluster(const std::string& name, const std::string& spec,
                                        const std::vector<std::string>& args);

  // Connects to the coordinator of `local`, a `dlrm local` with the --data-dir `cluster_dir`:
  // fills address_ from cluster_dir/coordinator.port, tls_dir_ with the admin certificate's folder
  // and client_ with a client whose calls time out after `timeout`. Records a failure (with
  // `local`'s stderr) when the port file holds no port; leaves client_ null (a failure recorded)
  // when the client cannot be made.
  void ConnectTo(const Process& local, const std::string& cluster_dir, absl::Duration timeout);
  // Makes client_ for the coordinator at address_ with the certificate in tls_dir_, its calls
  // timing out after `timeout`; leaves it null (a failure recorded) when it cannot.
  void Connect(absl::Duration timeout);

  // Waits up to `timeout`, while `local` runs, for the lines a `dlrm local --keep-running` prints
  // once its job ended ("coordinator: ADDRESS", "tls-dir: DIR" of the admin certificate) and fills
  // address_ and tls_dir_ from them; what was not printed stays empty.
  void WaitForKeptRunning(Process& local, absl::Duration timeout);

  // Polls the job through client_ until `done` says so or `timeout` passes; returns the last
  // answer.
  dlrm::v1::Job WaitForJob(const std::string& job_id, absl::Duration timeout,
                           const std::function<bool(const dlrm::v1::Job&)>& done);
  // SUCCEEDED, FAILED or CANCELLED.
  static bool Ended(const dlrm::v1::Job& job);

  // The child of `local` whose command line holds `role_flag` (" ps ", " worker ",
  // " coordinator "); -1 when none does.
  static pid_t ChildWith(pid_t local, const std::string& role_flag);
  // Whether a checkpoint in the folder `ckpt` is committed (has its manifest).
  static bool Committed(const std::string& ckpt);
  // Waits up to `timeout`, while `local` runs, until a checkpoint in `ckpt` is committed; returns
  // whether one is.
  static bool WaitForCommitted(const std::string& ckpt, Process& local, absl::Duration timeout);

  // The test's cluster (StartCluster, ConnectTo, WaitForKeptRunning): its coordinator's address
  // and the admin certificate's folder, as dlrmctl takes them, and a client (not by
  // WaitForKeptRunning: Connect makes one).
  std::string address_;
  std::string tls_dir_;
  std::unique_ptr<client::CoordinatorClient> client_;

 private:
  static std::string* dir_;
};

}  // namespace dlrm::testing
