// `dlrm`'s flags as a user gives them, run through the real binary: every --threads has a limit,
// `bench` and `gen-data` refuse sizes they cannot mean, integers are decimal, an unknown
// subcommand is named, and `dlrm certs` keeps an existing CA. Every refusal comes from the flag
// checks, before any work: each run takes milliseconds. Also the library side of the same checks
// (RunTrainingBench, GenerateCriteoTsv), for callers that skip the flags. `dlrm local` and the
// roles as they start and stop are in dlrm_cli_runs_test.cc.

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/training_bench.h"
#include "client/dlrm_commands.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/dlrm_cli_fixture.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/process_util.h"
#include "worker/input/synthetic.h"

namespace dlrm {
namespace {

using ::dlrm::testing::BinPath;
using ::dlrm::testing::ProcessResult;
using ::dlrm::testing::RunProcess;

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The validators themselves, in process: what each accepts and the message for what it refuses.
// Returns "" when `value` is accepted (and *out set), else CLI11's message.
template <typename T>
std::string ParseFlag(const CLI::Validator& check, const std::string& value, T* out) {
  CLI::App app;
  app.add_option("--flag", *out)->check(check);
  try {
    app.parse(std::vector<std::string>{"--flag=" + value});
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(DlrmFlagsTest, IntegersAreDecimalAndInRange) {
  int64_t v = 0;
  const CLI::Validator threads = ThreadCount();
  EXPECT_EQ(ParseFlag(threads, "0", &v), "");
  EXPECT_EQ(ParseFlag(threads, "1024", &v), "");
  EXPECT_EQ(v, 1024);
  EXPECT_EQ(ParseFlag(threads, "+12", &v), "");
  EXPECT_EQ(v, 12);
  for (const std::string over : {"1025", "20000", "100000", "99999999999999999999"}) {
    EXPECT_EQ(ParseFlag(threads, over, &v),
              "--flag: " + over + " is over the limit of 1024 (kMaxThreads in common/limits.h)");
  }
  EXPECT_EQ(ParseFlag(threads, "-1", &v), "--flag: -1 is not in [0, 1024]");
  EXPECT_EQ(ParseFlag(threads, "-99999999999999999999", &v),
            "--flag: -99999999999999999999 is not in [0, 1024]");
  // CLI11 alone read 010 as octal 8, 0x10 as 16.
  EXPECT_EQ(ParseFlag(threads, "010", &v),
            "--flag: '010' has a leading zero (integers are decimal: write 10)");
  EXPECT_EQ(ParseFlag(threads, "-007", &v),
            "--flag: '-007' has a leading zero (integers are decimal: write -7)");
  EXPECT_EQ(ParseFlag(threads, "00", &v),
            "--flag: '00' has a leading zero (integers are decimal: write 0)");
  for (const std::string bad : {"0x10", "10abc", "1e3", "-", " 5", "1.0"}) {
    EXPECT_EQ(ParseFlag(threads, bad, &v), "--flag: '" + bad + "' is not an integer") << bad;
  }
  const CLI::Validator rows = IntegerIn(1, common::kMaxGenDataRows);
  EXPECT_EQ(ParseFlag(rows, "0", &v), "--flag: 0 is not in [1, 1000000000000]");
  // Without a limit's name, past max is out of the range too.
  EXPECT_EQ(ParseFlag(rows, "99999999999999999999", &v),
            "--flag: 99999999999999999999 is not in [1, 1000000000000]");
  EXPECT_EQ(ParseFlag(rows, "1000000000000", &v), "");
  EXPECT_EQ(v, 1000000000000);
}

TEST(DlrmFlagsTest, LocalClusterSizeIsOneUpToTheLimit) {
  int v = 0;
  EXPECT_EQ(ParseFlag(LocalMemberCount(), "1", &v), "");
  EXPECT_EQ(ParseFlag(LocalMemberCount(), "256", &v), "");
  EXPECT_EQ(v, common::kMaxLocalMembers);
  EXPECT_EQ(ParseFlag(LocalMemberCount(), "257", &v),
            "--flag: 257 is over the limit of 256 (kMaxLocalMembers in common/limits.h)");
  EXPECT_EQ(ParseFlag(LocalMemberCount(), "0", &v), "--flag: 0 is not in [1, 256]");
}

TEST(DlrmFlagsTest, UnsignedIntegersRefuseASign) {
  uint64_t seed = 0;
  EXPECT_EQ(ParseFlag(UnsignedInteger(), "18446744073709551615", &seed), "");
  EXPECT_EQ(seed, UINT64_MAX);
  // CLI11 alone read -1 as 2^64 - 1.
  EXPECT_EQ(ParseFlag(UnsignedInteger(), "-1", &seed),
            "--flag: -1 is not in [0, 18446744073709551615]");
  EXPECT_EQ(ParseFlag(UnsignedInteger(), "18446744073709551616", &seed),
            "--flag: 18446744073709551616 is not in [0, 18446744073709551615]");
  EXPECT_EQ(ParseFlag(UnsignedInteger(), "0x5", &seed), "--flag: '0x5' is not an integer");
}

TEST(DlrmFlagsTest, NumbersAreFiniteAndInRange) {
  double x = 0;
  const CLI::Validator zipf =
      FiniteNumberIn(0, std::numeric_limits<double>::infinity(), /*min_excluded=*/true);
  EXPECT_EQ(ParseFlag(zipf, "1.05", &x), "");
  EXPECT_DOUBLE_EQ(x, 1.05);
  for (const std::string bad : {"-1", "0", "inf", "nan", "-inf", "1e999"}) {
    EXPECT_EQ(ParseFlag(zipf, bad, &x), "--flag: " + bad + " is not a finite number > 0") << bad;
  }
  EXPECT_EQ(ParseFlag(zipf, "abc", &x), "--flag: 'abc' is not a number");
  const CLI::Validator fraction = FiniteNumberIn(0, 1);
  EXPECT_EQ(ParseFlag(fraction, "0", &x), "");
  EXPECT_EQ(ParseFlag(fraction, "1.5", &x), "--flag: 1.5 is not a finite number in [0, 1]");
}

// Each flag of the binary has its check: one refused value per flag (each run loads the binary
// and its libraries, about a second on a loaded machine).
TEST_F(DlrmCliTest, EveryThreadsFlagHasALimit) {
  // The arguments each subcommand needs besides --threads (never used: the flag is refused).
  const std::vector<std::vector<std::string>> commands = {
      {"train", "--config", "job.yaml", "--threads"},
      {"eval", "--checkpoint", "ck", "--data", "x.tsv", "--threads"},
      {"predict", "--checkpoint", "ck", "--data", "x.tsv", "--out", "s.tsv", "--threads"},
      {"bench", "--shape", "model1", "--threads"},
      {"worker", "--coordinator", "127.0.0.1:1", "--threads"},
      {"ps", "--data-dir", "ps", "--threads"},
      {"local", "--config", "job.yaml", "--worker-threads"},
  };
  for (const auto& command : commands) {
    // Was an abort (std::system_error from thread creation) or a run that made no progress.
    std::vector<std::string> args = command;
    args.push_back("100000");
    ExpectRefused(args, {command.back() + ": 100000 is over the limit of 1024", "kMaxThreads"});
  }
}

// Every --device names its value when it is no device, before the command opens anything (a
// train run reported its missing data file first).
TEST_F(DlrmCliTest, EveryDeviceFlagNamesABadDevice) {
  const std::vector<std::vector<std::string>> commands = {
      {"train", "--config", "missing.yaml", "--device"},
      {"eval", "--checkpoint", "ck", "--data", "x.tsv", "--device"},
      {"predict", "--checkpoint", "ck", "--data", "x.tsv", "--out", "s.tsv", "--device"},
      {"bench", "--shape", "model1", "--device"},
      {"worker", "--coordinator", "127.0.0.1:1", "--device"},
      {"local", "--config", "missing.yaml", "--device"},
  };
  for (const auto& command : commands) {
    std::vector<std::string> args = command;
    args.push_back("tpu");
    ExpectRefused(args, {"--device: tpu not in {auto,cpu,cuda}"});
  }
}

// An address flag without a port, or with one no socket can have, is refused naming the flag and
// the value, exit 2, before anything starts. gRPC read a --listen port past 65535 modulo 65536
// (`--listen 127.0.0.1:99999` served on 34463, saying nothing), and a parameter server or worker
// given such a --coordinator (or none of a port) retried for a minute before it failed, exit 1.
TEST_F(DlrmCliTest, AddressFlagsNeedAPortInRange) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:99999"},
       "--listen '127.0.0.1:99999': port 99999 is not in [0, 65535]"},
      {{"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:-1"},
       "--listen '127.0.0.1:-1': port -1 is not in [0, 65535]"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:70000"},
       "--listen '127.0.0.1:70000': port 70000 is not in [0, 65535]"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:0", "--coordinator",
        "127.0.0.1"},
       "--coordinator '127.0.0.1': no port"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:0", "--coordinator",
        "127.0.0.1:0"},
       "--coordinator '127.0.0.1:0': port 0 is not in [1, 65535]"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:0", "--advertise",
        "ps-0.example"},
       "--advertise 'ps-0.example': no port"},
      {{"worker", "--insecure", "--coordinator", "127.0.0.1:99999"},
       "--coordinator '127.0.0.1:99999': port 99999 is not in [1, 65535]"},
      {{"worker", "--insecure", "--coordinator", "::1:50051"},
       "--coordinator '::1:50051': an IPv6 address goes in brackets"},
      // A host only: a port was taken as part of the host name, and the job's collectives failed.
      {{"worker", "--insecure", "--coordinator", "127.0.0.1:1", "--advertise-host",
        "10.0.0.5:7000"},
       "--advertise-host '10.0.0.5:7000': give a host name or address without a port"},
  };
  for (const auto& [args, message] : cases) {
    const ProcessResult r = Dlrm(args);
    EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(args, " ");
  }
}

// --metrics-port is read as decimal, as every integer flag: CLI11 alone read `010` as octal 8
// and `0x10` as 16, and the process served its metrics there without a word.
TEST_F(DlrmCliTest, EveryMetricsPortIsDecimal) {
  const std::vector<std::vector<std::string>> commands = {
      {"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:0"},
      {"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:0"},
      {"worker", "--insecure", "--coordinator", "127.0.0.1:1"},
  };
  for (const auto& command : commands) {
    for (const auto& [value, message] :
         {std::pair<std::string, std::string>{"010", "--metrics-port: '010' has a leading zero"},
          {"0x10", "--metrics-port: '0x10' is not an integer"}}) {
      std::vector<std::string> args = command;
      args.insert(args.end(), {"--metrics-port", value});
      const ProcessResult r = Dlrm(args);
      EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
      EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(args, " ");
    }
  }
}

// The TLS flags' refusals are usage errors: exit 2 (as dlrmctl's for the same flags), naming the
// flag and the path. They exited 1, as a run that failed does.
TEST_F(DlrmCliTest, ATlsFlagThatCannotBeUsedExitsTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"worker", "--coordinator", "127.0.0.1:1", "--tls-dir", "no-such-dir"},
       "--tls-dir 'no-such-dir' is not a folder"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--listen", "127.0.0.1:0", "--coordinator",
        "127.0.0.1:1", "--tls-cert", "no.crt", "--tls-key", "no.key", "--tls-ca", "no-ca.crt"},
       "(--tls-ca): cannot read 'no-ca.crt'"},
      {{"coordinator", "--data-dir", dir_.Sub("c"), "--listen", "0.0.0.0:0"},
       "refusing to serve plaintext gRPC on 0.0.0.0:0"},
      {{"coordinator", "--data-dir", dir_.Sub("c"), "--listen", "127.0.0.1:0", "--tls-cert",
        "x.crt"},
       "--tls-key is missing"},
  };
  for (const auto& [args, message] : cases) {
    const ProcessResult r = Dlrm(args);
    EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(args, " ");
  }
}

// A certificate and key that are no pair (swapped, or another identity's key) passed the check
// that each file holds PEM: the coordinator then failed with "cannot listen on ... (address in
// use?)", exit 1, and a worker retried for a minute saying nothing. Refused naming both files.
TEST_F(DlrmCliTest, ATlsCertificateAndKeyThatAreNoPairAreRefused) {
  const std::string certs_dir = dir_.Sub("certs");
  const ProcessResult certs = Dlrm({"certs", "--out", certs_dir});
  ASSERT_EQ(certs.exit_code, 0) << certs.err;
  const std::string c = certs_dir + "/coordinator/";
  const std::string mixed = dir_.Sub("mixed");
  std::filesystem::create_directory(mixed);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{c + "ca.crt", "ca.crt"},
                                 {c + "tls.crt", "tls.crt"},
                                 {certs_dir + "/admin/tls.key", "tls.key"}}) {
    std::filesystem::copy_file(from, mixed + "/" + to);
  }
  const std::string ps_key = certs_dir + "/ps/tls.key";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"coordinator", "--data-dir", dir_.Sub("c"), "--listen", "127.0.0.1:0", "--tls-cert",
        c + "tls.key", "--tls-key", c + "tls.crt", "--tls-ca", c + "ca.crt"},
       "TLS certificate (--tls-cert): '" + c + "tls.key' holds no certificate"},
      {{"worker", "--coordinator", "127.0.0.1:1", "--tls-cert", c + "tls.crt", "--tls-key", ps_key,
        "--tls-ca", c + "ca.crt"},
       "TLS key (--tls-key): '" + ps_key + "' is not the key of the certificate '" + c +
           "tls.crt' (--tls-cert)"},
      {{"ps", "--data-dir", dir_.Sub("p"), "--listen", "127.0.0.1:0", "--coordinator",
        "127.0.0.1:1", "--tls-dir", mixed},
       "TLS key (tls.key of --tls-dir): '" + mixed + "/tls.key' is not the key of the certificate"},
  };
  for (const auto& [args, message] : cases) {
    const ProcessResult r = Dlrm(args);
    EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(args, " ");
  }
}

// `dlrm local --ps N` and `--workers N` start N processes each on this machine: past
// kMaxLocalMembers the flag is refused, naming the value and the limit, with the exit code of any
// other flag refused (as --worker-threads), and before anything starts.
TEST_F(DlrmCliTest, LocalClusterSizeHasALimit) {
  const ProcessResult threads =
      Dlrm({"local", "--config", "job.yaml", "--worker-threads", "100000"});
  ASSERT_GT(threads.exit_code, 0) << threads.err;
  for (const std::string flag : {"--ps", "--workers"}) {
    // Was 100000 child processes started, until the machine ran out of them.
    for (const std::string over : {"257", "100000"}) {
      const ProcessResult r = Dlrm({"local", "--config", "job.yaml", flag, over});
      EXPECT_FALSE(r.timed_out) << flag << " " << over;
      EXPECT_EQ(r.exit_code, threads.exit_code) << flag << " " << over << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr(flag + ": " + over +
                                   " is over the limit of 256 (kMaxLocalMembers in "
                                   "common/limits.h)"));
    }
    ExpectRefused({"local", "--config", "job.yaml", flag, "0"}, {flag + ": 0 is not in [1, 256]"});
  }
}

// Members heartbeat every eighth of the lease: one under a second expired members that were alive
// (`dlrm local --lease-ttl 1ms` failed its job after its recoveries). Refused, exit 2.
TEST_F(DlrmCliTest, ALeaseShorterThanASecondIsRefused) {
  for (const std::string ttl : {"1ns", "500ms"}) {
    const std::vector<std::vector<std::string>> commands = {
        {"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:0",
         "--lease-ttl", ttl},
        {"local", "--config", "job.yaml", "--lease-ttl", ttl},
    };
    for (const auto& args : commands) {
      const ProcessResult r = Dlrm(args);
      EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
      EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr("--lease-ttl '" + ttl + "' is shorter than 1s"));
    }
  }
}

TEST_F(DlrmCliTest, BenchRefusesSizesItCannotMean) {
  auto bench = [](std::vector<std::string> more) {
    std::vector<std::string> args = {"bench", "--shape", "model1"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  // Was an abort: "out of memory allocating 39999999616 bytes".
  ExpectRefused(bench({"--batch-size", "99999999"}),
                {"--batch-size: 99999999 is over the limit of 1048576", "kMaxBatchSize"});
  // Was the shape's batch, silently.
  ExpectRefused(bench({"--batch-size", "-1"}), {"--batch-size: -1 is not in [0, 1048576]"});
  ExpectRefused(bench({"--zipf", "-1"}), {"--zipf: -1 is not a finite number > 0"});
  ExpectRefused(bench({"--hot-budget", "-5"}), {"--hot-budget: -5 is not in [0, "});
  ExpectRefused(bench({"--gpu-table-budget", "-2"}), {"--gpu-table-budget: -2 is not in [-1, "});
}

TEST_F(DlrmCliTest, GenDataRefusesCountsItCannotMeanAndReadsDecimal) {
  const std::string out = dir_.Sub("g.tsv");
  auto gen = [&out](std::vector<std::string> more) {
    std::vector<std::string> args = {"gen-data", "--out", out};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  // Was "not in range 0.000000 to 17976931348623157..." (300 digits).
  ExpectRefused(gen({"--rows", "0"}), {"--rows: 0 is not in [1, 1000000000000]"});
  // Was read as INT64_MAX, and written until killed.
  ExpectRefused(
      gen({"--rows", "99999999999999999999"}),
      {"--rows: 99999999999999999999 is over the limit of 1000000000000", "kMaxGenDataRows"});
  // Was the full cardinalities, silently.
  ExpectRefused(gen({"--rows", "10", "--max-rows", "-1"}),
                {"--max-rows: -1 is not in [0, 8589934592]"});
  // Was seed 2^64 - 1.
  ExpectRefused(gen({"--rows", "10", "--seed", "-1"}), {"--seed: -1 is not in [0, "});
  // Was taken as no --multi-hot at all: one-hot TSV, written where a multi-hot file was asked for.
  ExpectRefused(gen({"--rows", "10", "--multi-hot", ""}),
                {"bag sizes '': '' is not a number in [1, 4096]"});
  // Named no flag, where convert's names its own.
  ExpectRefused(gen({"--rows", "10", "--multi-hot", "0"}),
                {"gen-data --multi-hot: bag sizes '0': '0' is not a number in [1, 4096]"});
  // No refusal left a file behind.
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));

  // Was octal: 8 rows.
  const ProcessResult r = Dlrm(gen({"--rows", "12", "--max-rows", "10"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 12);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
}

TEST_F(DlrmCliTest, AnUnknownSubcommandIsNamed) {
  // Was "A subcommand is required".
  ExpectRefused({"--log-level", "debug", "frob", "--x"},
                {"unknown subcommand 'frob' (one of: bench, certs, convert, coordinator, eval, "
                 "gen-data, local, predict, ps, train, worker)"});
}

TEST_F(DlrmCliTest, ASpecThatCannotBeReadIsNamedWithTheReason) {
  ExpectRefused({"train", "--config", "nope.yaml"},
                {"cannot read job spec 'nope.yaml': No such file or directory"});
  ExpectRefused({"train", "--config", "."}, {"cannot read job spec '.': is a directory"});
}

// A usage error exited with CLI11's own status (106 for a missing flag, 109 for an unknown one,
// 105 for a bad value), while a value the command refuses exits 2: every usage error exits 2 now,
// and --help 0.
TEST_F(DlrmCliTest, AUsageErrorExitsTwo) {
  const std::vector<std::vector<std::string>> usage = {
      {"train"}, {"train", "--config", "x.yaml", "--bogus"}, {"gen-data", "--out", "x", "-n", "0"}};
  for (const auto& args : usage) {
    const ProcessResult r = Dlrm(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
  }
  EXPECT_EQ(Dlrm({"train", "--help"}).exit_code, 0);
}

// `dlrm bench > /dev/full` exited 0 with its JSON lost; a result that could not be written is a
// failure. --log-level works after the subcommand too (it was "arguments were not expected").
TEST_F(DlrmCliTest, AResultThatCannotBeWrittenFailsTheRun) {
  const ProcessResult r = RunProcess(
      {"/bin/sh", "-c",
       absl::StrCat(BinPath("dlrm"), " bench --shape kaggle-shape --rounds 1 --steps 1 --max-rows ",
                    "1000 --batch-size 64 --log-level warning > /dev/full")},
      dir_.path(), "full", absl::Seconds(60), dir_.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: cannot write to standard output: No space left on device"));
  EXPECT_THAT(r.err, Not(HasSubstr("training on cpu"))) << "--log-level warning after bench";
}

// An output in a missing folder is a usage error (exit 2) for every command that writes one: it was
// 2 for predict, eval and train but 1 for gen-data and convert, which found out only as they
// opened the file.
TEST_F(DlrmCliTest, AnOutputInAMissingFolderExitsTwo) {
  const std::string tsv = dir_.Sub("a.tsv");
  std::ofstream(tsv) << "1\t1\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"gen-data", "--rows", "10", "--out", "nodir/x.tsv"},
        std::vector<std::string>{"convert", "--out", "nodir/y.bin", tsv}}) {
    const ProcessResult r = Dlrm(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat(args[0], " --out: cannot write 'nodir/")));
    EXPECT_THAT(r.err, HasSubstr("folder 'nodir': No such file or directory"));
  }
}

// An empty path (`--metrics-out "$UNSET"`) was taken as no flag: `dlrm train` and `eval` succeeded
// and wrote no metrics or page, and `--resume ""` started from scratch. Refused before any work
// (the spec here does not exist: without the check the error would be about it).
TEST_F(DlrmCliTest, AnEmptyPathFlagIsRefusedNotIgnored) {
  for (const std::string flag : {"--metrics-out", "--report", "--resume"}) {
    ExpectRefused({"train", "--config", "nope.yaml", flag, ""}, {flag + ": no path given"});
  }
  ExpectRefused({"eval", "--checkpoint", "nope", "--data", "x.tsv", "--metrics-out", ""},
                {"--metrics-out: no path given"});
}

// The same for `dlrm local` and the service roles: `local --report ""` (or --metrics-out,
// --resume-from, --data-dir) trained and wrote nothing, or started from scratch; `ps
// --checkpoint-root ""` let checkpoint files go anywhere; `coordinator --tokens ""` ran without
// the tokens and `--port-file ""` wrote no port. Refused, exit 2, before anything starts.
TEST_F(DlrmCliTest, AnEmptyPathFlagOfLocalOrAServiceRoleIsRefused) {
  for (const std::string flag : {"--data-dir", "--metrics-out", "--report", "--resume-from"}) {
    const ProcessResult r = Dlrm({"local", "--config", "nope.yaml", "--insecure", flag, ""});
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag + ": no path given"));
  }
  const std::vector<std::vector<std::string>> roles = {
      {"ps", "--data-dir", dir_.Sub("p"), "--insecure", "--listen", "127.0.0.1:0",
       "--checkpoint-root"},
      {"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:0",
       "--tokens"},
      {"coordinator", "--data-dir", dir_.Sub("c"), "--insecure", "--listen", "127.0.0.1:0",
       "--port-file"},
  };
  for (const auto& command : roles) {
    std::vector<std::string> args = command;
    args.push_back("");
    const ProcessResult r = Dlrm(args);
    EXPECT_FALSE(r.timed_out) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(command.back() + ": no path given"));
  }
}

TEST_F(DlrmCliTest, CertsKeepsAnExistingCaUnlessToldToOverwrite) {
  const std::string out = dir_.Sub("certs");
  ProcessResult r = Dlrm({"certs", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ca = dlrm::testing::ReadFileOrEmpty(out + "/ca.crt"),
                    ca_key = dlrm::testing::ReadFileOrEmpty(out + "/ca.key");
  const std::string ps = dlrm::testing::ReadFileOrEmpty(out + "/ps/tls.crt");
  ExpectRefused({"certs", "--out", out, "--host", "other"},
                {out + "/ca.key' exists", "already holds a CA", "--overwrite"});
  EXPECT_EQ(dlrm::testing::ReadFileOrEmpty(out + "/ca.crt"), ca);
  EXPECT_EQ(dlrm::testing::ReadFileOrEmpty(out + "/ca.key"), ca_key);
  EXPECT_EQ(dlrm::testing::ReadFileOrEmpty(out + "/ps/tls.crt"), ps);

  r = Dlrm({"certs", "--out", out, "--overwrite"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(dlrm::testing::ReadFileOrEmpty(out + "/ca.crt"), ca);
  EXPECT_NE(dlrm::testing::ReadFileOrEmpty(out + "/ps/tls.crt"), ps);
}

// RunTrainingBench checks its options itself, before it allocates anything.
TEST(TrainingBenchOptionsTest, OutOfRangeOptionsAreRefusedNamingTheValueAndTheLimit) {
  struct Case {
    bench::TrainingBenchOptions options;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{.shape = "model1", .batch_size = 99999999}, {"batch_size 99999999", "kMaxBatchSize"}},
      {{.shape = "model1", .batch_size = -1}, {"batch_size -1 must be >= 0"}},
      {{.shape = "model1", .threads = 100000}, {"threads 100000", "1024", "kMaxThreads"}},
      {{.shape = "model1", .threads = -3}, {"threads -3 must be >= 0"}},
      {{.shape = "model1", .zipf_exponent = -1}, {"zipf exponent -1", "finite number > 0"}},
      {{.shape = "model1", .hot_budget_bytes = -5}, {"hot_budget -5 bytes must be >= 0"}},
      {{.shape = "model1", .hot_budget_bytes = common::kMaxByteSize + 1}, {"kMaxByteSize"}},
      {{.shape = "model1", .gpu_table_budget_bytes = -2}, {"gpu_table_budget -2"}},
  };
  for (const Case& c : cases) {
    auto json = bench::RunTrainingBench(c.options);
    ASSERT_FALSE(json.ok()) << c.parts[0];
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument) << c.parts[0];
    for (const std::string& part : c.parts) {
      EXPECT_THAT(std::string(json.status().message()), HasSubstr(part));
    }
  }
}

TEST(GenDataOptionsTest, ARowCountPastTheLimitAndAnInfiniteZipfAreRefused) {
  dlrm::testing::ScopedTempDir dir("gen_data_options");
  worker::GenDataOptions options;
  options.output = dir.Sub("x.tsv");
  options.num_rows = common::kMaxGenDataRows + 1;
  absl::Status st = worker::GenerateCriteoTsv(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("1000000000001"), HasSubstr("kMaxGenDataRows")));
  options.num_rows = 10;
  options.zipf_exponent = std::numeric_limits<double>::infinity();
  st = worker::GenerateCriteoTsv(options);  // was a sampler loop that never ended
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("finite"));
  EXPECT_FALSE(std::filesystem::exists(options.output + ".tmp"));
}

// `--memory-budget 0.5` gave a parameter server a memory tier of 0 bytes (read as half a byte):
// refused by dlrm ps and dlrm local, naming the flag and asking for a unit.
TEST_F(DlrmCliTest, AMemoryBudgetOfAFractionOfAByteIsRefused) {
  const std::vector<std::string> want = {
      "--memory-budget: byte size '0.5' is not a whole number of bytes", "'0.5GiB'"};
  ExpectRefused({"ps", "--data-dir", dir_.Sub("p"), "--listen", "127.0.0.1:0", "--insecure",
                 "--coordinator", "127.0.0.1:1", "--memory-budget", "0.5"},
                want);
  ExpectRefused({"local", "--config", "job.yaml", "--memory-budget", "0.5"}, want);
}

// A memory tier bigger than the machine (or the container's memory limit) fills with rows until
// the kernel kills the server, maybe hours into a job: refused at start-up, naming the flag's
// value and the limit. dlrm local counts each of its parameter servers' budget.
TEST_F(DlrmCliTest, AMemoryBudgetPastTheMachinesMemoryIsRefusedAtStart) {
  ExpectRefused({"ps", "--data-dir", dir_.Sub("p"), "--listen", "127.0.0.1:0", "--insecure",
                 "--coordinator", "127.0.0.1:1", "--memory-budget", "512TiB"},
                {"--memory-budget 512TiB (562949953421312 bytes) is more memory than this "
                 "process can ever hold (MemAvailable ",
                 "ps.memoryBudget"});
  ExpectRefused({"local", "--config", "job.yaml", "--ps", "4", "--memory-budget", "200TiB"},
                {"--memory-budget 200TiB (219902325555200 bytes for each of 4 parameter "
                 "servers, 800.0 TiB in all) is more memory"});
}

}  // namespace
}  // namespace dlrm
