// common/grpc_util and common/metrics: status mapping, the server wrapper, channel options and
// the Prometheus endpoint. (Here rather than tests/common because they are the servers' plumbing
// and need gRPC.)
#include "common/grpc_util.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/certs.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/http_get.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;

TEST(GrpcUtilTest, StatusCodesMapOneToOne) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "table 3: id 7");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")).code(),
            absl::StatusCode::kUnavailable);
}

TEST(GrpcUtilTest, ServerReportsBoundPortAndRejectsBadOptions) {
  auto server = GrpcServer::Start({.listen_address = "127.0.0.1:0"}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), absl::StrCat("127.0.0.1:", (*server)->port()));
  // The same port cannot be bound twice.
  auto clash = GrpcServer::Start({.listen_address = (*server)->address()}, {});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(clash.status().message(), HasSubstr((*server)->address()));
  // It says why, as bind() does ("(address in use?)" for every reason before).
  EXPECT_THAT(clash.status().message(), HasSubstr(std::strerror(EADDRINUSE)));
  auto unresolved = GrpcServer::Start({.listen_address = "nosuchhost.invalid:0"}, {});
  EXPECT_EQ(unresolved.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(unresolved.status().message(),
              HasSubstr("cannot listen on 'nosuchhost.invalid:0': host 'nosuchhost.invalid' does "
                        "not resolve: "));
  // 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine.
  auto elsewhere = GrpcServer::Start({.listen_address = "192.0.2.1:0"}, {});
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(elsewhere.status().message(), HasSubstr(std::strerror(EADDRNOTAVAIL)));
  (*server)->Shutdown();
  (*server)->Wait();

  EXPECT_EQ(GrpcServer::Start({.listen_address = "nonsense"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ServerOptions tls;
  tls.security = TransportSecurity::FromDir("/nonexistent/tls");
  auto no_files = GrpcServer::Start(tls, {});
  EXPECT_EQ(no_files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_files.status().message(), HasSubstr("/nonexistent/tls/ca.crt"));
  EXPECT_EQ(MakeChannel({}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Whether a channel completes its (TLS) handshake with the server.
bool Connects(const std::string& target, const TransportSecurity& security,
              const std::string& peer_identity = "") {
  auto channel =
      MakeChannel({.target = target, .security = security, .peer_identity = peer_identity});
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return false;
  return (*channel)->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

// Mutual TLS with certificates of common/certs.h: the cluster's own identities connect; a client
// with a certificate of another CA, a plaintext client and a client expecting another server
// name do not.
TEST(GrpcUtilTest, MutualTlsAcceptsTheClusterCaOnly) {
  char tmpl[] = "/tmp/dlrm-tls-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(WriteClusterCertificates({.out_dir = dir + "/ours"}).ok());
  ASSERT_TRUE(WriteClusterCertificates({.out_dir = dir + "/theirs"}).ok());
  struct stat key_stat {};
  ASSERT_EQ(stat((dir + "/ours/ps/tls.key").c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u) << "keys are readable by their owner only";

  auto server = GrpcServer::Start(
      {.listen_address = "127.0.0.1:0", .security = TransportSecurity::FromDir(dir + "/ours/ps")},
      {});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->address();
  EXPECT_TRUE(Connects(target, TransportSecurity::FromDir(dir + "/ours/worker")));
  EXPECT_TRUE(Connects(absl::StrCat("localhost:", (*server)->port()),
                       TransportSecurity::FromDir(dir + "/ours/admin")));
  EXPECT_FALSE(Connects(target, TransportSecurity::FromDir(dir + "/theirs/worker")))
      << "a certificate another CA signed";
  EXPECT_FALSE(Connects(target, TransportSecurity{})) << "plaintext";
  TransportSecurity other_name = TransportSecurity::FromDir(dir + "/ours/worker");
  other_name.server_name = "ps.example.com";
  EXPECT_FALSE(Connects(target, other_name)) << "a name the server's certificate does not carry";
  // A channel that names the server's identity takes the ps certificate for a ps only: a server
  // with the certificate of another role of the same CA is refused at the handshake.
  EXPECT_TRUE(
      Connects(target, TransportSecurity::FromDir(dir + "/ours/worker"), kParameterServerPeer));
  EXPECT_FALSE(
      Connects(target, TransportSecurity::FromDir(dir + "/ours/worker"), kCoordinatorPeer));
  // A client that trusts another CA refuses our server too.
  TransportSecurity mixed = TransportSecurity::FromDir(dir + "/ours/worker");
  mixed.root_certs_path = dir + "/theirs/ca.crt";
  EXPECT_FALSE(Connects(target, mixed));
  (*server)->Shutdown();

  EXPECT_EQ(WriteClusterCertificates({.out_dir = ""}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteClusterCertificates({.out_dir = dir + "/x", .hosts = {}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteClusterCertificates({.out_dir = dir + "/x", .valid_days = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(GrpcUtilTest, RowsPerRequestStayUnderThePayloadBudget) {
  for (int dim : {1, 16, 64, 128, 1024}) {
    const int64_t rows = MaxRowsPerRequest(dim);
    EXPECT_GT(rows, 0);
    EXPECT_LE(rows * (8 + 4 * dim), kMaxRpcPayloadBytes) << "dim " << dim;
    EXPECT_LE(rows, kMaxIdsPerRequest);
  }
  // 2048 x 26 kaggle-shape ids at dim 16 fit one request.
  EXPECT_GE(MaxRowsPerRequest(16), 2048 * 26);
}

TEST(MetricsTest, ServesPrefixedMetricsOnAnEphemeralPort) {
  auto metrics = MetricsRegistry::Create({.port = 0, .bind_address = "127.0.0.1"});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_GT((*metrics)->port(), 0);
  (*metrics)->Counter("samples_trained_total", "Samples.").Increment(5);
  (*metrics)->Gauge("members", "Members.", {{"role", "ps"}}).Set(2);
  auto& h = (*metrics)->Histogram("step_seconds", "Step time.", MetricsRegistry::LatencyBuckets());
  h.Observe(0.01);
  // Asking again returns the same metric.
  (*metrics)->Counter("dlrm_samples_trained_total", "Samples.").Increment(1);
  ::dlrm::testing::HttpReply reply;
  ASSERT_TRUE(::dlrm::testing::HttpGet((*metrics)->port(), "/metrics", &reply));
  EXPECT_EQ(reply.status, 200);
  const std::string& body = reply.body;
  EXPECT_THAT(body, HasSubstr("dlrm_samples_trained_total 6"));
  EXPECT_THAT(body, HasSubstr("dlrm_members{role=\"ps\"} 2"));
  EXPECT_THAT(body, HasSubstr("dlrm_step_seconds_count 1"));

  auto disabled = MetricsRegistry::Create({});
  ASSERT_TRUE(disabled.ok());
  EXPECT_EQ((*disabled)->port(), 0);
  auto clash = MetricsRegistry::Create({.port = (*metrics)->port(), .bind_address = "127.0.0.1"});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlrm::common
