// `dlrm local` and the service roles as they start and stop, through the real binary: what
// `dlrm local` refuses before it starts a process (a model that does not fit its data, a resume
// checkpoint it cannot use, outputs that would replace its inputs), its exit status on SIGTERM,
// the log it keeps when the cluster cannot start, and a parameter server stopped before it
// registered.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/dlrm_cli_fixture.h"
#include "tests/integration/process_util.h"
#include "worker/input/synthetic.h"

namespace dlrm {
namespace {

using ::dlrm::testing::BinPath;
using ::dlrm::testing::ProcessResult;

using ::testing::HasSubstr;
using ::testing::Not;

// A tiny job for the tests that start `dlrm local`: `rows` generated Criteo rows in
// train.tsv (26 tables of 100 ids), an 8-wide model trained with SGD, written to job.yaml in
// `dir`. Returns the spec's path.
std::string WriteTinyJob(const dlrm::testing::ScopedTempDir& dir, const std::string& name,
                         int64_t rows, int64_t epochs) {
  worker::GenDataOptions gen;
  gen.output = dir.Sub("train.tsv");
  gen.num_rows = rows;
  gen.cardinalities = worker::CappedKaggleCardinalities(100);
  EXPECT_TRUE(worker::GenerateCriteoTsv(gen).ok());
  const std::vector<std::string> tables(26, "100");
  const std::string config = dir.Sub("job.yaml");
  std::ofstream(config) << "name: " << name << "\n"
                        << "model: {dense_features: 13, bottom_mlp: [8], top_mlp: [8, 1], "
                           "embedding_dim: 8}\n"
                        << "tables: {cardinalities: [" << absl::StrJoin(tables, ", ") << "]}\n"
                        << "optimizer: {dense: {type: sgd, learning_rate: 0.01}, sparse: "
                           "{type: sgd, learning_rate: 0.01}}\n"
                        << "training: {batch_size: 8, epochs: " << epochs << "}\n"
                        << "data: {train: train.tsv}\n";
  return config;
}

// `dlrm train` with tables bigger than the machine's memory was killed by the kernel (SIGKILL,
// no message) while it initialised the rows, after half a minute of swapping the machine out.
// Refused before anything is allocated, with the sizes and the remedies: 26 tables of 10^9
// rows of 8 floats (SGD keeps no state) need 832 GB.
TEST_F(DlrmCliTest, TrainRefusesTablesBiggerThanTheMemoryBeforeAllocatingThem) {
  WriteTinyJob(dir_, "huge", 16, 1);
  std::string spec;
  {
    std::ifstream in(dir_.Sub("job.yaml"));
    spec.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::vector<std::string> huge(26, "1000000000");
  spec.replace(spec.find("tables: {cardinalities: ["), std::string::npos,
               absl::StrCat("tables: {cardinalities: [", absl::StrJoin(huge, ", "), "]}\n",
                            spec.substr(spec.find("optimizer:"))));
  std::ofstream(dir_.Sub("job.yaml")) << spec;
  ExpectRefused({"train", "--config", "job.yaml", "--threads", "1"},
                {"the 26 embedding tables need 832000000000 bytes (774.9 GiB: rows x (dim + "
                 "optimizer state) x 4 B; the largest, table 0 (C1) with 1000000000 rows of dim "
                 "8, 29.8 GiB) and this process has ",
                 "of memory available (MemAvailable ", "cap the tables (tables.max_rows)"});
}

// A `dlrm local` killed with SIGKILL (or by the OOM killer) left its temporary folder, with its
// parameter servers' RocksDB rows, in $TMPDIR for good. The next run that makes a temporary
// folder removes the dlrm-local-* folders whose lock nobody holds, and only those: not one a
// running `dlrm local` holds, not one without a lock file (kept on purpose for its logs, or of an
// older version), not another name; its own goes at its end as before.
TEST_F(DlrmCliTest, LocalRemovesTheTemporaryFolderAKilledRunLeft) {
  const std::string config = WriteTinyJob(dir_, "tmp", 64, 1);
  const std::filesystem::path tmp = dir_.Sub("tmp");
  auto folder = [&](const std::string& name, bool lock_file) {
    std::filesystem::create_directories(tmp / name / "ps-0" / "rocksdb");
    std::ofstream(tmp / name / "ps-0" / "rocksdb" / "000001.sst") << std::string(4096, 'r');
    if (lock_file) std::ofstream(tmp / name / ".dlrm-local.lock");
  };
  folder("dlrm-local-killed", true);
  folder("dlrm-local-running", true);
  folder("dlrm-local-kept", false);
  folder("other-folder", true);
  // A running dlrm local holds its lock: here this test does.
  const int held = open((tmp / "dlrm-local-running" / ".dlrm-local.lock").c_str(), O_RDWR);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);
  const ProcessResult r = ::dlrm::testing::RunProcess(
      {"/usr/bin/env", "TMPDIR=" + tmp.string(), BinPath("dlrm"), "local", "--config", config,
       "--ps", "1", "--workers", "1", "--insecure", "--no-progress"},
      dir_.path(), "local-tmp", absl::Seconds(120), dir_.path());
  close(held);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("removed " + (tmp / "dlrm-local-killed").string() +
                               ", the folder of an earlier dlrm local that did not end"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "dlrm-local-killed"));
  EXPECT_TRUE(std::filesystem::exists(tmp / "dlrm-local-running" / "ps-0"));
  EXPECT_TRUE(std::filesystem::exists(tmp / "dlrm-local-kept" / "ps-0"));
  EXPECT_TRUE(std::filesystem::exists(tmp / "other-folder" / "ps-0"));
  int left = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp)) {
    left += entry.path().filename().string().rfind("dlrm-local-", 0) == 0;
  }
  EXPECT_EQ(left, 2) << "its own folder is removed at its end";
}

// `dlrm local` with a model that does not fit its data (3 tables for Criteo's 26, as a spec
// written for other multi-hot data would have; or data.format naming the other format) started
// the whole cluster, failed the job in a worker and left the cluster's folder behind. Refused
// now before any process starts, naming the key and the counts.
TEST_F(DlrmCliTest, LocalRefusesAModelThatDoesNotFitTheDataBeforeStarting) {
  worker::GenDataOptions gen;
  gen.output = dir_.Sub("mh.bin");
  gen.num_rows = 20;
  gen.cardinalities = worker::CappedKaggleCardinalities(100);
  gen.format = worker::InputFormat::kBinary;
  gen.bags = worker::ParseBagSizes("2").value();
  ASSERT_TRUE(worker::GenerateCriteoTsv(gen).ok());
  auto spec = [this](const std::string& cardinalities, const std::string& format) {
    const std::string path = dir_.Sub("job.yaml");
    std::ofstream(path) << "name: mh\n"
                        << "model: {dense_features: 13, bottom_mlp: [8], top_mlp: [8, 1], "
                           "embedding_dim: 8, interaction: dcnv2, low_rank: 8}\n"
                        << "tables: {cardinalities: [" << cardinalities << "], dtype: fp16}\n"
                        << "optimizer: {dense: {type: adam, learning_rate: 0.001}, sparse: "
                           "{type: rowwise_adagrad, learning_rate: 0.05}}\n"
                        << "training: {batch_size: 8, epochs: 1}\n"
                        << "data: {train: mh.bin, format: " << format << "}\n";
    return path;
  };
  const std::string data_dir = dir_.Sub("cluster");
  auto local = [&data_dir](const std::string& config) {
    return std::vector<std::string>{"local",  "-c",         config,         "--data-dir",
                                    data_dir, "--insecure", "--no-progress"};
  };
  std::vector<std::string> tables(26, "100");
  const ProcessResult three = Dlrm(local(spec("100, 100, 100", "auto")));
  EXPECT_EQ(three.exit_code, 2) << three.err;
  EXPECT_THAT(three.err, HasSubstr("job.yaml: tables: Criteo input has 26 categorical features "
                                   "(a table each), got 3 tables"));
  EXPECT_THAT(three.err, Not(HasSubstr("local cluster up")));
  EXPECT_FALSE(std::filesystem::exists(data_dir));

  const ProcessResult tsv = Dlrm(local(spec(absl::StrJoin(tables, ", "), "tsv")));
  EXPECT_EQ(tsv.exit_code, 2) << tsv.err;
  EXPECT_THAT(tsv.err, HasSubstr("data.format: tsv, but "));
  EXPECT_THAT(tsv.err, HasSubstr("/mh.bin is binary (it starts with DLRMBIN1)"));
  EXPECT_THAT(tsv.err, Not(HasSubstr("local cluster up")));
  EXPECT_FALSE(std::filesystem::exists(data_dir));
}

// `dlrm local --resume-from` naming no checkpoint started the whole cluster and then failed the
// job; one naming another checkpoint than the spec's resume_from replaced it without a word.
TEST_F(DlrmCliTest, LocalRefusesAResumeFromBeforeStartingWhenItCannotBeUsed) {
  const std::string spec = dir_.Sub("job.yaml");
  std::ofstream(spec) << "name: r\n"
                      << "model: {dense_features: 13, bottom_mlp: [8], top_mlp: [8, 1], "
                         "embedding_dim: 8}\n"
                      << "tables: {cardinalities: [100]}\n"
                      << "training: {batch_size: 8}\n"
                      << "data: {train: nope.tsv}\n";
  const std::string missing = dir_.Sub("no-such-ckpt");
  ProcessResult r = Dlrm({"local", "-c", spec, "--insecure", "--resume-from", missing});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(missing + ": no such file or folder"));
  EXPECT_THAT(r.err, Not(HasSubstr("coordinator listening")));

  std::ofstream(spec, std::ios::app) << "checkpoint: {resume_from: " << dir_.Sub("a") << "}\n";
  r = Dlrm({"local", "-c", spec, "--insecure", "--resume-from", dir_.Sub("b")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--resume-from " + dir_.Sub("b") +
                               " and the job spec's checkpoint.resume_from " + dir_.Sub("a")));
}

// `dlrm local` stopped by SIGTERM (`kill`, systemd, a container runtime) exited 130, as for
// Ctrl-C; README says 128 + N when signal N stopped a run: 143.
TEST_F(DlrmCliTest, LocalStoppedBySigtermExits143) {
  // Far more steps than the test waits for: it is stopped while it trains.
  const std::string config = WriteTinyJob(dir_, "long", 400, 100000);
  dlrm::testing::Process local({BinPath("dlrm"), "local", "-c", config, "--data-dir",
                                dir_.Sub("cluster"), "--insecure", "--no-progress"},
                               dir_.path(), "local-sigterm");
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(local.Stderr(), "submitted job") && local.Running() &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(local.Stderr(), HasSubstr("submitted job"));
  local.Signal(SIGTERM);
  const ProcessResult r = local.Wait(absl::Seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_THAT(r.err, HasSubstr("terminated: stopping the local cluster"));
}

// A parameter server waiting for its coordinator (started first, or the address is wrong) said
// nothing for the minute it tried, and stopped then it exited 0 without a word: it says why it
// waits after the first attempt, and that it stopped.
TEST_F(DlrmCliTest, APsStoppedBeforeItRegisteredSaysSo) {
  const std::string coordinator = absl::StrCat("127.0.0.1:", dlrm::testing::FreePort());
  dlrm::testing::Process ps({BinPath("dlrm"), "ps", "--data-dir", dir_.Sub("p"), "--listen",
                             "127.0.0.1:0", "--insecure", "--coordinator", coordinator},
                            dir_.path(), "ps-unregistered");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!absl::StrContains(ps.Stderr(), "parameter server listening") && ps.Running() &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(ps.Stderr(), HasSubstr("parameter server listening"));
  // The first failed attempt is logged (it waited out its minute without a word).
  while (!absl::StrContains(ps.Stderr(), "cannot register with coordinator") && ps.Running() &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(ps.Stderr(), HasSubstr(": cannot register with coordinator " + coordinator +
                                     " yet (dialled in plaintext): "));
  // A second past the 0.5 s pause between attempts, the next attempt is waiting (up to
  // --rpc-timeout, 10 s) for the coordinator to connect: the stop ends that wait. It took 8-10 s,
  // as long as the wait had left.
  absl::SleepFor(absl::Seconds(1));
  ps.Signal(SIGTERM);
  const absl::Time stopped = absl::Now();
  const ProcessResult r = ps.Wait(absl::Seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(5));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopped before it registered with " + coordinator));
}

// A parameter server restarted under its name (a pod, a child of `dlrm local`) registers while
// the old process may still hold its lease: the coordinator takes the old one for dead at once.
// Were the old one still running (two processes started under one name), it is told so at its
// next heartbeat and stops with an error naming its replacement, instead of both serving.
TEST_F(DlrmCliTest, AParameterServerRegisteredAgainUnderItsNameStopsTheOlderOne) {
  const std::string port_file = dir_.Sub("coordinator.port");
  dlrm::testing::Process coordinator(
      {BinPath("dlrm"), "coordinator", "--data-dir", dir_.Sub("c"), "--listen", "127.0.0.1:0",
       "--insecure", "--port-file", port_file, "--lease-ttl", "2s"},
      dir_.path(), "coordinator");
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  std::string port;
  while (port.empty() && coordinator.Running() && absl::Now() < give_up) {
    port = std::string(absl::StripAsciiWhitespace(dlrm::testing::ReadFileOrEmpty(port_file)));
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_FALSE(port.empty()) << coordinator.Stderr();
  auto start_ps = [&](const std::string& folder) {
    return std::make_unique<dlrm::testing::Process>(
        std::vector<std::string>{BinPath("dlrm"), "ps", "--data-dir", dir_.Sub(folder), "--listen",
                                 "127.0.0.1:0", "--insecure", "--coordinator", "127.0.0.1:" + port,
                                 "--name", "ps-0"},
        dir_.path(), folder);
  };
  auto registered = [&](dlrm::testing::Process& p) {
    while (!absl::StrContains(p.Stderr(), " registered as ") && p.Running() &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    return absl::StrContains(p.Stderr(), " registered as ");
  };
  auto first = start_ps("ps-a");
  ASSERT_TRUE(registered(*first)) << first->Stderr();
  auto second = start_ps("ps-b");
  ASSERT_TRUE(registered(*second)) << second->Stderr();
  // Heartbeats come every eighth of the 2 s lease: the old one hears within a second or so.
  const ProcessResult r = first->Wait(absl::Seconds(10));
  EXPECT_FALSE(r.timed_out) << "the older process still runs";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("was replaced by "));
  EXPECT_THAT(r.err, HasSubstr("which registered with the same name"));
  EXPECT_THAT(coordinator.Stderr(), HasSubstr("was replaced by "));
  EXPECT_TRUE(second->Running()) << second->Stderr();
  second->Signal(SIGTERM);
  EXPECT_EQ(second->Wait(absl::Seconds(30)).exit_code, 0);
  coordinator.Signal(SIGTERM);
  EXPECT_EQ(coordinator.Wait(absl::Seconds(30)).exit_code, 0);
}

// `dlrm local` whose coordinator cannot start (here: its metrics port is taken) says "see
// /tmp/dlrm-local-XXXXXX/logs/coordinator.log", but removed that temporary folder on exit, log
// and all. The folder is kept, as after a failed job.
TEST_F(DlrmCliTest, LocalKeepsTheLogItNamesWhenTheClusterCannotStart) {
  const std::string config = WriteTinyJob(dir_, "short", 40, 1);
  // A listening socket on the coordinator's metrics port.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  const ProcessResult r = Dlrm({"local", "-c", config, "--insecure", "--no-progress", "--metrics",
                                "--metrics-base-port", absl::StrCat(port)});
  close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const size_t at = r.err.find("see /tmp/");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string log = r.err.substr(at + 4, r.err.find(':', at) - at - 4);
  EXPECT_TRUE(std::filesystem::exists(log)) << log << "\n" << r.err;
  const std::string folder = log.substr(0, log.find("/logs/"));
  if (absl::StartsWith(folder, "/tmp/dlrm-local-")) std::filesystem::remove_all(folder);
}

// `dlrm local` truncated every child's log when it started: a second run on the same --data-dir
// (after a crash, or refused by a cluster still running there) wiped the logs that said what had
// happened (audit). The logs are appended to, each start marked, and what a failed start shows
// is the last start's part.
TEST_F(DlrmCliTest, LocalAppendsToTheLogsOfADataDirUsedAgain) {
  const std::string config = WriteTinyJob(dir_, "short", 40, 1);
  const std::string data = dir_.Sub("cluster");
  for (int run = 1; run <= 2; ++run) {
    const ProcessResult r =
        Dlrm({"local", "-c", config, "--insecure", "--no-progress", "--data-dir", data});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  for (const char* name : {"coordinator", "ps-0", "worker-0"}) {
    const std::string log = ::dlrm::testing::ReadFileOrEmpty(data + "/logs/" + name + ".log");
    int starts = 0;
    for (size_t at = log.find("---- dlrm local (pid "); at != std::string::npos;
         at = log.find("---- dlrm local (pid ", at + 1)) {
      ++starts;
    }
    EXPECT_EQ(starts, 2) << name << ":\n" << log;
  }
}

// A `dlrm local` killed with its job left that job unfinished in the coordinator's store under
// --data-dir: the next run on the folder started it again before its own job, and it held its
// checkpoint folder against a --resume-from (audit). The next run cancels it, and says so.
TEST_F(DlrmCliTest, LocalCancelsTheJobAnEarlierRunOnItsDataDirLeft) {
  const std::string long_job = WriteTinyJob(dir_, "long", 2000, 100000);
  const std::string data = dir_.Sub("cluster");
  {
    ::dlrm::testing::Process killed({BinPath("dlrm"), "local", "-c", long_job, "--insecure",
                                     "--no-progress", "--data-dir", data},
                                    dir_.path(), "killed-local");
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!absl::StrContains(killed.Stderr(), "submitted job") && killed.Running() &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_TRUE(absl::StrContains(killed.Stderr(), "submitted job")) << killed.Stderr();
    absl::SleepFor(absl::Seconds(1));
    killed.Signal(SIGKILL);
    killed.Wait(absl::Seconds(30));
  }
  const std::string short_job = WriteTinyJob(dir_, "short", 40, 1);
  ProcessResult r;
  // The killed run's children stop on their parent's death; the coordinator's store is free
  // once its process has gone.
  for (int attempt = 0; attempt < 20; ++attempt) {
    r = Dlrm({"local", "-c", short_job, "--insecure", "--no-progress", "--data-dir", data});
    if (!absl::StrContains(r.err, "in use by another process")) break;
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cancelled job job-1 (JOB_STATE_"));
  EXPECT_THAT(r.err, HasSubstr("left unfinished by an earlier run on this --data-dir"));
  EXPECT_THAT(r.err, HasSubstr("submitted job job-2"));
}

// `dlrm local` writes --report and --metrics-out after the job: one naming the spec or its data
// replaced it with the page or the metrics, and one that could not be written failed only after
// the whole job. Each is refused before any process starts, and the spec is left as it was.
// Refused before any child started (more CUDA workers than GPUs), `dlrm local` left an empty
// /tmp/dlrm-local-XXXXXX/logs behind without naming it. With no child, there is no log to keep.
TEST_F(DlrmCliTest, LocalRefusedBeforeStartingLeavesNoTemporaryFolder) {
  const std::string config = WriteTinyJob(dir_, "short", 40, 1);
  const ::dlrm::testing::ProcessResult r = Dlrm(
      {"local", "-c", config, "--insecure", "--no-progress", "--device", "cuda", "--workers", "9"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda: 9 workers need 9 CUDA devices"));
  // The child's TMPDIR is the test's folder (RunProcess).
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), "dlrm-local-"))
        << "left " << entry.path();
  }
}

// `dlrm local` into a checkpoint folder that holds another run's newer checkpoints is refused
// before any process starts (it failed the job once the whole cluster was up).
TEST_F(DlrmCliTest, LocalRefusesAFolderOfAnotherRunsCheckpointsBeforeStarting) {
  const std::string config = WriteTinyJob(dir_, "ck", 40, 1);
  std::ofstream(config, std::ios::app) << "checkpoint: {dir: ck}\n";
  const ProcessResult trained = Dlrm({"train", "-c", config, "--no-progress"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string data_dir = dir_.Sub("cluster");
  const ProcessResult r =
      Dlrm({"local", "-c", config, "--data-dir", data_dir, "--insecure", "--no-progress"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("already holds checkpoint ckpt-000000000005"));
  EXPECT_THAT(r.err, HasSubstr("dlrm local --resume-from DIR"));
  EXPECT_THAT(r.err, Not(HasSubstr("local cluster up")));
  EXPECT_FALSE(std::filesystem::exists(data_dir));
}

TEST_F(DlrmCliTest, LocalRefusesOutputsThatWouldReplaceItsInputsBeforeStarting) {
  const std::string config = WriteTinyJob(dir_, "out", 20, 1);
  const std::string spec_text = dlrm::testing::ReadFileOrEmpty(config);
  const std::string data_dir = dir_.Sub("cluster");
  auto local = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"local",  "-c",         config,         "--data-dir",
                                     data_dir, "--insecure", "--no-progress"};
    args.insert(args.end(), flags.begin(), flags.end());
    return Dlrm(args);
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--report", config}, "--report"},
      {{"--report", dir_.Sub("train.tsv")}, "--report"},
      {{"--metrics-out", config}, "--metrics-out"},
      {{"--metrics-out", dir_.Sub("no/such/folder/m.json")}, "--metrics-out"},
      {{"--report", dir_.Sub("r.json"), "--metrics-out", dir_.Sub("r.json")}, "are the same file"}};
  for (const auto& [flags, message] : refused) {
    const ProcessResult r = local(flags);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(flags, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(flags, " ");
    EXPECT_THAT(r.err, Not(HasSubstr("local cluster up")));
    EXPECT_FALSE(std::filesystem::exists(data_dir)) << absl::StrJoin(flags, " ");
  }
  EXPECT_EQ(dlrm::testing::ReadFileOrEmpty(config), spec_text);
}

}  // namespace
}  // namespace dlrm
