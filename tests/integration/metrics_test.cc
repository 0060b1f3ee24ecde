// Every role of the `dlrm` binary this build ships (CUDA-linked where nvcc was found) started the
// way the Helm chart starts it, with --metrics-port: the process must come up, serve /metrics,
// and the body must parse as the Prometheus text format. Then `dlrm local --metrics`: every child
// serves metrics and the printed scrape targets answer.
//
// The exposition check is a parser of the text format 0.0.4 (HELP/TYPE lines, samples with
// labels, numeric values, histogram suffixes), independent of the prometheus-cpp serializer
// that writes it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/common/http_get.h"
#include "tests/integration/process_util.h"

namespace dlrm::testing {
namespace {

namespace fs = std::filesystem;
using ::dlrm::testing::HttpGet;
using ::dlrm::testing::HttpReply;

// Checks `text` against the Prometheus text format 0.0.4; returns the problems found (empty when
// it parses) and fills `families` with name -> type.
std::vector<std::string> ParseExposition(const std::string& text,
                                         std::map<std::string, std::string>* families) {
  static const std::string kLabel = R"([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")";
  static const std::regex kSample(absl::StrCat(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{)", kLabel,
                                               "(?:,", kLabel, R"()*,?\})? (\S+)(?: -?[0-9]+)?$)"));
  static const std::regex kType(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex kHelp(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  std::vector<std::string> problems;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    const std::string l(line);
    std::smatch m;
    if (absl::StartsWith(l, "# TYPE")) {
      if (!std::regex_match(l, m, kType)) {
        problems.push_back(absl::StrCat("line ", line_no, ": bad TYPE: ", l));
      } else if (!families->emplace(m[1], m[2]).second) {
        problems.push_back(absl::StrCat("line ", line_no, ": TYPE repeated for ", m[1].str()));
      }
      continue;
    }
    if (absl::StartsWith(l, "#")) {
      if (absl::StartsWith(l, "# HELP") && !std::regex_match(l, kHelp)) {
        problems.push_back(absl::StrCat("line ", line_no, ": bad HELP: ", l));
      }
      continue;
    }
    if (!std::regex_match(l, m, kSample)) {
      problems.push_back(absl::StrCat("line ", line_no, ": not a sample: ", l));
      continue;
    }
    const std::string value = m[2];
    double v;
    if (!absl::SimpleAtod(value, &v) && value != "+Inf" && value != "-Inf" && value != "NaN") {
      problems.push_back(absl::StrCat("line ", line_no, ": value '", value, "' is not a number"));
    }
    // The sample must belong to a family declared before it (histograms add suffixes).
    std::string name = m[1];
    bool declared = families->contains(name);
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (!declared && absl::EndsWith(name, suffix)) {
        declared = families->contains(name.substr(0, name.size() - std::strlen(suffix)));
      }
    }
    if (!declared) problems.push_back(absl::StrCat("line ", line_no, ": no TYPE for ", name));
  }
  return problems;
}

// The local address a listening TCP socket on `port` is bound to, from /proc/net/tcp and tcp6
// ("127.0.0.1", "0.0.0.0", "::" ...), or "" when none listens there.
std::string ListeningAddress(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 4 || f[3] != "0A") continue;  // 0A: LISTEN
      std::vector<std::string> local = absl::StrSplit(f[1], ':');
      if (local.size() != 2 || std::stoi(local[1], nullptr, 16) != port) continue;
      if (local[0].size() == 8) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::stoul(local[0], nullptr, 16));
        return inet_ntoa(a);
      }
      return local[0] == "00000000000000000000000000000000" ? "::" : local[0];
    }
  }
  return "";
}

// Scrapes 127.0.0.1:port until it answers with a family named `must_have` (the endpoint starts
// before the process has registered every metric) or `timeout`; the last answer is in `reply`.
bool Scrape(int port, const std::string& must_have, Process& p, absl::Duration timeout,
            HttpReply* reply) {
  const absl::Time deadline = absl::Now() + timeout;
  bool answered = false;
  while (absl::Now() < deadline) {
    if (HttpGet(port, "/metrics", reply)) {
      answered = true;
      if (absl::StrContains(reply->body, absl::StrCat("# TYPE ", must_have, " "))) return true;
    }
    if (!p.Running()) return answered;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return answered;
}

// Checks one scrape: 200, the text format's content type, a body that parses, and at least one
// family named `must_have`.
void ExpectValidExposition(const HttpReply& reply, const std::string& must_have,
                           const std::string& who) {
  EXPECT_EQ(reply.status, 200) << who;
  EXPECT_TRUE(absl::StartsWith(reply.content_type, "text/plain; version=0.0.4"))
      << who << ": " << reply.content_type;
  std::map<std::string, std::string> families;
  const std::vector<std::string> problems = ParseExposition(reply.body, &families);
  EXPECT_TRUE(problems.empty()) << who << ": " << problems.size() << " problem(s), first: "
                                << (problems.empty() ? "" : problems.front());
  EXPECT_TRUE(families.contains(must_have)) << who << ": no " << must_have << " in\n"
                                            << reply.body.substr(0, 2000);
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dlrm-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST(ExpositionParserTest, RejectsWhatPrometheusRejects) {
  std::map<std::string, std::string> f;
  EXPECT_TRUE(ParseExposition("# TYPE a counter\na 1\n", &f).empty());
  f.clear();
  EXPECT_FALSE(ParseExposition("a 1\n", &f).empty()) << "sample without TYPE";
  f.clear();
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na{x=1} 1\n", &f).empty()) << "unquoted label";
  f.clear();
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na one\n", &f).empty()) << "non-numeric value";
  f.clear();
  EXPECT_TRUE(
      ParseExposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_sum 1.5\nh_count 3\n", &f)
          .empty());
}

// The chart starts each role with --metrics-port (and the process must not die at start-up);
// here on loopback, with every flag the chart passes that applies on one machine.
TEST_F(MetricsTest, EveryRoleOfTheShippedBinaryServesParsableMetrics) {
  const std::string port_file = dir_ + "/coordinator.port";
  const int coordinator_metrics = FreePort();
  Process coordinator({BinPath("dlrm"), "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                       dir_ + "/coordinator", "--lease-ttl", "10s", "--metrics-port",
                       absl::StrCat(coordinator_metrics), "--port-file", port_file},
                      dir_, "coordinator");
  HttpReply reply;
  ASSERT_TRUE(Scrape(coordinator_metrics, "dlrm_members", coordinator, absl::Seconds(30), &reply))
      << "coordinator did not serve metrics:\n"
      << coordinator.Stderr();
  ExpectValidExposition(reply, "dlrm_members", "coordinator");
  // The series the DlrmJobRecoveringTooLong alert and the recovery panels read.
  EXPECT_NE(reply.body.find("dlrm_jobs{state=\"recovering\"} 0"), std::string::npos) << reply.body;
  EXPECT_NE(reply.body.find("dlrm_job_recoveries_total 0"), std::string::npos) << reply.body;
  // Default bind address: the host of --listen, not every interface.
  EXPECT_EQ(ListeningAddress(coordinator_metrics), "127.0.0.1");

  std::string port_text;
  for (int i = 0; i < 100 && port_text.empty(); ++i) {
    port_text = std::string(absl::StripAsciiWhitespace(ReadFileOrEmpty(port_file)));
    if (port_text.empty()) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(port_text.empty());
  const std::string coordinator_address = absl::StrCat("127.0.0.1:", port_text);

  const int ps_metrics = FreePort();
  Process ps({BinPath("dlrm"), "ps", "--coordinator", coordinator_address, "--listen",
              "127.0.0.1:0", "--data-dir", dir_ + "/ps", "--memory-budget", "64MiB",
              "--metrics-port", absl::StrCat(ps_metrics), "--name", "ps-0"},
             dir_, "ps");
  ASSERT_TRUE(Scrape(ps_metrics, "dlrm_ps_memory_bytes", ps, absl::Seconds(30), &reply))
      << "parameter server did not serve metrics:\n"
      << ps.Stderr();
  ExpectValidExposition(reply, "dlrm_ps_memory_bytes", "ps");
  EXPECT_EQ(ListeningAddress(ps_metrics), "127.0.0.1");

  const int worker_metrics = FreePort();
  Process worker({BinPath("dlrm"), "worker", "--coordinator", coordinator_address,
                  "--advertise-host", "127.0.0.1", "--metrics-port", absl::StrCat(worker_metrics),
                  "--metrics-listen", "127.0.0.1", "--threads", "1", "--name", "worker-0"},
                 dir_, "worker");
  ASSERT_TRUE(Scrape(worker_metrics, "dlrm_worker_jobs_total", worker, absl::Seconds(30), &reply))
      << "worker did not serve metrics:\n"
      << worker.Stderr();
  ExpectValidExposition(reply, "dlrm_worker_jobs_total", "worker");
  EXPECT_EQ(ListeningAddress(worker_metrics), "127.0.0.1");

  // Anything but /metrics is answered, not crashed on.
  HttpReply other;
  ASSERT_TRUE(HttpGet(worker_metrics, "/nope", &other));
  EXPECT_EQ(other.status, 404);

  for (Process* p : {&worker, &ps, &coordinator}) {
    EXPECT_TRUE(p->Running()) << p->Stderr();
    // A write to a connection its peer closed (a Gloo peer evicted mid-collective) must fail in
    // the writer, not kill the process with SIGPIPE (client/termination_signals.h).
    EXPECT_TRUE(IgnoresSignal(p->pid(), SIGPIPE)) << CommandLine(p->pid());
    p->Signal(SIGTERM);
    ProcessResult r = p->Wait(absl::Seconds(20));
    EXPECT_EQ(r.exit_code, 0) << p->Stderr();
  }
}

// The sum of the samples of metric `name` whose label set holds every one of `labels` (each
// written as in the exposition, e.g. side="server").
double SumSamples(const std::string& body, const std::string& name,
                  const std::vector<std::string>& labels) {
  double total = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, name + "{")) continue;
    const size_t close = line.rfind("} ");
    if (close == absl::string_view::npos) continue;
    const absl::string_view set = line.substr(0, close);
    if (!std::all_of(labels.begin(), labels.end(),
                     [&](const std::string& l) { return absl::StrContains(set, l); })) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line.substr(close + 2), &value)) total += value;
  }
  return total;
}

TEST_F(MetricsTest, DlrmLocalMetricsGivesEveryChildAnEndpointAndPrintsTheTargets) {
  ProcessResult gen = RunProcess({BinPath("dlrm"), "gen-data", "--out", dir_ + "/train.tsv",
                                  "--rows", "4000", "--max-rows", "1000", "--seed", "3"},
                                 dir_, "gen-data", absl::Seconds(60));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  {
    std::ofstream job(dir_ + "/job.yaml");
    job << R"(name: metrics-job
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
)" << kCappedKaggleTablesYaml
        << R"(training: {batch_size: 256, epochs: 1, seed: 5}
data: {train: [train.tsv], eval_fraction: 0.1}
)";
  }
  Process local({BinPath("dlrm"), "local", "--config", dir_ + "/job.yaml", "--ps", "2", "--workers",
                 "2", "--worker-threads", "1", "--no-progress", "--keep-running", "--metrics",
                 "--metrics-base-port", "0"},
                dir_, "local");
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline && local.Running() &&
         !absl::StrContains(local.Stdout(), "coordinator: ")) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(absl::StrContains(local.Stdout(), "coordinator: ")) << local.Stderr();
  const std::string err = local.Stderr();
  ASSERT_TRUE(absl::StrContains(err, "scrape targets")) << err;
  // "  - targets: ["127.0.0.1:P", ...]\n    labels: {component: C}"
  static const std::regex kBlock(R"re(targets: \[([^\]]*)\]\n\s+labels: \{component: (\w+)\})re");
  std::map<std::string, std::vector<int>> ports;
  for (std::sregex_iterator it(err.begin(), err.end(), kBlock), end; it != end; ++it) {
    for (absl::string_view t : absl::StrSplit((*it)[1].str(), ", ", absl::SkipEmpty())) {
      int port = 0;
      ASSERT_TRUE(
          absl::SimpleAtoi(absl::StripSuffix(absl::StripPrefix(t, "\"127.0.0.1:"), "\""), &port))
          << t;
      ports[(*it)[2]].push_back(port);
    }
  }
  ASSERT_EQ(ports["coordinator"].size(), 1u) << err;
  ASSERT_EQ(ports["ps"].size(), 2u) << err;
  ASSERT_EQ(ports["worker"].size(), 2u) << err;
  const std::map<std::string, std::string> must_have = {{"coordinator", "dlrm_members"},
                                                        {"ps", "dlrm_ps_memory_bytes"},
                                                        {"worker", "dlrm_worker_jobs_total"}};
  for (const auto& [component, list] : ports) {
    for (int port : list) {
      HttpReply reply;
      ASSERT_TRUE(HttpGet(port, "/metrics", &reply)) << component << " :" << port;
      ExpectValidExposition(reply, must_have.at(component), absl::StrCat(component, ":", port));
      EXPECT_EQ(ListeningAddress(port), "127.0.0.1");
    }
  }
  // After the job (rank 0's final evaluation and report, the unload), the workers' byte counters
  // catch up with the parameter servers': every byte a PS sent to a worker, the worker received.
  // They stopped at the job's last progress report before, missing what came after it.
  auto ps_bytes = [&](const std::string& component, const std::string& side,
                      const std::string& direction) {
    double total = 0;
    for (int port : ports[component]) {
      HttpReply reply;
      if (!HttpGet(port, "/metrics", &reply)) return -1.0;
      total +=
          SumSamples(reply.body, absl::StrCat("dlrm_rpc_", direction, "_bytes_total"),
                     {"method=\"/dlrm.v1.ParameterServer/", absl::StrCat("side=\"", side, "\"")});
    }
    return total;
  };
  double served = 0, received = 0;
  for (absl::Time until = absl::Now() + absl::Seconds(20); absl::Now() < until;) {
    served = ps_bytes("ps", "server", "sent");
    received = ps_bytes("worker", "client", "received");
    if (served > 0 && served == received) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_GT(served, 0);
  EXPECT_EQ(received, served) << "bytes the workers received from the PSs against those sent";
  EXPECT_EQ(ps_bytes("worker", "client", "sent"), ps_bytes("ps", "server", "received"));
  // Every child of `dlrm local`, each role as it starts there, ignores SIGPIPE as well.
  const std::vector<pid_t> children = ChildrenOf(local.pid());
  EXPECT_EQ(children.size(), 5u);
  for (pid_t child : children) {
    EXPECT_TRUE(IgnoresSignal(child, SIGPIPE)) << CommandLine(child);
  }
  local.Signal(SIGINT);
  ProcessResult r = local.Wait(absl::Seconds(30));
  EXPECT_FALSE(r.timed_out);
}

}  // namespace
}  // namespace dlrm::testing
