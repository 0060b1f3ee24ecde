// common/grpc_util and common/metrics: status mapping, the server wrapper, channel options and
// the Prometheus endpoint. (Here rather than tests/common because they are the servers' plumbing
// and need gRPC.)
#include "common/grpc_util.h"

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
  (*server)->Shutdown();
  (*server)->Wait();

  EXPECT_EQ(GrpcServer::Start({.listen_address = "nonsense"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ServerOptions tls;
  tls.security.mode = TransportSecurity::Mode::kTls;
  EXPECT_EQ(GrpcServer::Start(tls, {}).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(MakeChannel({}).status().code(), absl::StatusCode::kInvalidArgument);
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
