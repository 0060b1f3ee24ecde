// Byte counting of gRPC messages (common/rpc_bytes.h): the counters, the client interceptor of
// MakeChannel and the server-side counts, checked against each other on a parameter server on
// loopback; the kernel's TCP byte counts; the Prometheus export.
#include "common/rpc_bytes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/lookup_wire.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_server.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::common {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(10);
constexpr char kLoadJob[] = "/dlrm.v1.ParameterServer/LoadJob";
constexpr char kLookup[] = "/dlrm.v1.ParameterServer/Lookup";
constexpr char kPush[] = "/dlrm.v1.ParameterServer/PushGradients";
constexpr char kGetStats[] = "/dlrm.v1.ParameterServer/GetStats";

// ---- OpenTcpSocketBytes (first: no gRPC connection of another test is open or closing) ----

// Writes or reads exactly `n` bytes.
void WriteAll(int fd, const char* data, int64_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, static_cast<size_t>(n));
    ASSERT_GT(w, 0) << "write: " << errno;
    data += w;
    n -= w;
  }
}
void ReadAll(int fd, char* data, int64_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, data, static_cast<size_t>(n));
    ASSERT_GT(r, 0) << "read: " << errno;
    data += r;
    n -= r;
  }
}

TEST(TcpSocketBytesTest, CountsLoopbackTrafficAtBothEnds) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);

  absl::StatusOr<TcpBytes> before = OpenTcpSocketBytes();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GE(before->sockets, 2);  // the listener is left out

  constexpr int64_t kOneWay = 1 << 20, kBack = 3000;
  std::thread peer([server] {
    std::string in(kOneWay, '\0');
    ReadAll(server, in.data(), kOneWay);
    const std::string out(kBack, 'b');
    WriteAll(server, out.data(), kBack);
  });
  const std::string out(kOneWay, 'a');
  WriteAll(client, out.data(), kOneWay);
  std::string in(kBack, '\0');
  ReadAll(client, in.data(), kBack);
  peer.join();

  // Both ends are in this process: each direction counts once as sent and once as received. The
  // last ACK may trail the data a little.
  constexpr int64_t kBoth = kOneWay + kBack, kSlack = 16 << 10;
  TcpBytes after;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  do {
    absl::StatusOr<TcpBytes> now = OpenTcpSocketBytes();
    ASSERT_TRUE(now.ok()) << now.status();
    after = *now;
    if (after.sent - before->sent >= kBoth && after.received - before->received >= kBoth) break;
    absl::SleepFor(absl::Milliseconds(10));
  } while (absl::Now() < give_up);
  EXPECT_GE(after.sent - before->sent, kBoth);
  EXPECT_LE(after.sent - before->sent, kBoth + kSlack);
  EXPECT_GE(after.received - before->received, kBoth);
  EXPECT_LE(after.received - before->received, kBoth + kSlack);
  EXPECT_EQ(after.sockets, before->sockets);
  close(client);
  close(server);
  close(listener);
}

// ---- RpcByteCounters ----

TEST(RpcByteCountersTest, SumsByMethodOrServiceAndTakesDifferences) {
  RpcByteCounters counters;
  counters.AddCall("/a.S/M");
  counters.AddSent("/a.S/M", 10);
  counters.AddReceived("/a.S/M", 7);
  counters.AddSent("/a.S/MM", 1000);  // not part of "/a.S/M"
  counters.AddSent("/a.S/N", 3);
  counters.AddSent("/a.T/M", 100);
  const std::map<std::string, RpcBytes> before = counters.Snapshot();
  ASSERT_EQ(before.size(), 4u);
  EXPECT_EQ(Sum(before, "/a.S/M").sent, 10);
  EXPECT_EQ(Sum(before, "/a.S/M").received, 7);
  EXPECT_EQ(Sum(before, "/a.S/M").calls, 1);
  EXPECT_EQ(Sum(before, "/a.S/").sent, 1013);
  EXPECT_EQ(Sum(before, "").sent, 1113);
  EXPECT_EQ(Sum(before, "/a.U/").sent, 0);

  counters.AddSent("/a.S/M", 5);
  counters.ForMethod("/a.S/M").AddCall();
  counters.AddReceived("/b.S/X", 2);
  std::map<std::string, RpcBytes> delta = Difference(counters.Snapshot(), before);
  EXPECT_EQ(delta["/a.S/M"].sent, 5);
  EXPECT_EQ(delta["/a.S/M"].received, 0);
  EXPECT_EQ(delta["/a.S/M"].calls, 1);
  EXPECT_EQ(delta["/a.S/N"].sent, 0);
  EXPECT_EQ(delta["/b.S/X"].received, 2);
}

TEST(RpcByteCountersTest, CountsFromManyThreads) {
  RpcByteCounters counters;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&counters, t] {
      for (int i = 0; i < 10000; ++i) {
        RpcMethodCounters& m = counters.ForMethod(absl::StrCat("/s.S/M", i % 3));
        m.AddCall();
        m.AddSent(t + 1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const RpcBytes total = Sum(counters.Snapshot(), "/s.S/");
  EXPECT_EQ(total.calls, 40000);
  EXPECT_EQ(total.sent, 10000 * (1 + 2 + 3 + 4));
}

// ---- Through gRPC: a parameter server on loopback ----

int64_t Framed(const google::protobuf::MessageLite& message) {
  return GrpcMessageBytes(static_cast<int64_t>(message.ByteSizeLong()));
}

class RpcBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ps = server::ParameterServer::Start(server::testing::TestPsOptions(dir_.path()));
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    auto channel = MakeChannel({.target = ps_->address(), .rpc_bytes = &client_});
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
    stub_ = dlrm::v1::ParameterServer::NewStub(channel_);
  }

  // Loads "job": table 0 of dim 4, table 1 of dim 8.
  void LoadJob() {
    const dlrm::v1::LoadJobRequest request = server::testing::TestJob("job", {{100, 4}, {100, 8}});
    dlrm::v1::LoadJobResponse response;
    ASSERT_TRUE(stub_->LoadJob(MakeClientContext(kTimeout).get(), request, &response).ok());
    Expect(kLoadJob, Framed(request), Framed(response));
  }
  static dlrm::v1::LookupRequest LookupOf(const std::string& job, int table,
                                          const std::vector<int64_t>& ids) {
    dlrm::v1::LookupRequest r;
    r.set_job_id(job);
    r.set_job_epoch(1);
    r.set_step(-1);
    dlrm::v1::TableIds* t = r.add_tables();
    t->set_table(table);
    t->set_ids(server::testing::PackIds(ids));
    return r;
  }
  // Adds one call of `method` to what the client should have counted.
  void Expect(const std::string& method, int64_t sent, int64_t received) {
    RpcBytes& e = expected_[method];
    e.sent += sent;
    e.received += received;
    ++e.calls;
  }
  // The client's counts are what was expected; the server's (a delta of the process-wide
  // counters since `server_before_`) mirror them.
  void CheckCounts() {
    const std::map<std::string, RpcBytes> client = client_.Snapshot();
    const std::map<std::string, RpcBytes> server =
        Difference(RpcByteCounters::ProcessServer().Snapshot(), server_before_);
    for (const auto& [method, e] : expected_) {
      SCOPED_TRACE(method);
      const RpcBytes c = Sum(client, method);
      EXPECT_EQ(c.sent, e.sent);
      EXPECT_EQ(c.received, e.received);
      EXPECT_EQ(c.calls, e.calls);
      EXPECT_EQ(c.received_unsized, 0);
      const RpcBytes s = Sum(server, method);
      EXPECT_EQ(s.received, c.sent);
      EXPECT_EQ(s.sent, c.received);
      EXPECT_EQ(s.calls, c.calls);
    }
    EXPECT_EQ(Sum(client, "").calls, Sum(server, "/dlrm.v1.ParameterServer/").calls);
  }

  const std::map<std::string, RpcBytes> server_before_ =
      RpcByteCounters::ProcessServer().Snapshot();
  server::testing::PsTempDir dir_;
  RpcByteCounters client_;  // outlives the channel
  std::unique_ptr<server::ParameterServer> ps_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<dlrm::v1::ParameterServer::Stub> stub_;
  std::map<std::string, RpcBytes> expected_;
};

TEST_F(RpcBytesTest, ClientAndServerCountEveryMessage) {
  LoadJob();
  for (const std::vector<int64_t>& ids :
       std::vector<std::vector<int64_t>>{{1, 2}, {3, 4, 5, 6, 7}, {99}}) {
    const dlrm::v1::LookupRequest request = LookupOf("job", 1, ids);
    dlrm::v1::LookupResponse response;
    ASSERT_TRUE(stub_->Lookup(MakeClientContext(kTimeout).get(), request, &response).ok());
    ASSERT_EQ(response.tables(0).rows().size(), ids.size() * 8 * sizeof(float));
    Expect(kLookup, Framed(request), Framed(response));
  }
  dlrm::v1::PushGradientsRequest push;
  push.set_job_id("job");
  push.set_job_epoch(1);
  push.set_step(-1);
  dlrm::v1::TableGradients* grads = push.add_tables();
  grads->set_table(1);
  grads->set_ids(server::testing::PackIds({1, 2}));
  grads->set_grads(server::testing::PackFloats(std::vector<float>(16, 0.5f)));
  dlrm::v1::PushGradientsResponse pushed;
  ASSERT_TRUE(stub_->PushGradients(MakeClientContext(kTimeout).get(), push, &pushed).ok());
  Expect(kPush, Framed(push), Framed(pushed));
  dlrm::v1::GetStatsRequest stats_request;
  stats_request.set_job_id("job");
  dlrm::v1::GetStatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(MakeClientContext(kTimeout).get(), stats_request, &stats).ok());
  Expect(kGetStats, Framed(stats_request), Framed(stats));
  CheckCounts();
}

TEST_F(RpcBytesTest, FailedCallsCountWhatWasSent) {
  // NOT_FOUND from the service: the request counts at both ends, no response.
  const dlrm::v1::LookupRequest lookup = LookupOf("no-such-job", 1, {1, 2, 3});
  dlrm::v1::LookupResponse response;
  EXPECT_EQ(stub_->Lookup(MakeClientContext(kTimeout).get(), lookup, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  Expect(kLookup, Framed(lookup), 0);
  dlrm::v1::PushGradientsRequest push;
  push.set_job_id("no-such-job");
  dlrm::v1::PushGradientsResponse pushed;
  EXPECT_EQ(stub_->PushGradients(MakeClientContext(kTimeout).get(), push, &pushed).error_code(),
            grpc::StatusCode::NOT_FOUND);
  Expect(kPush, Framed(push), 0);
  CheckCounts();

  // Bytes that are no request (common/raw_unary.h answers INVALID_ARGUMENT): still received.
  const std::string junk = "\x0a\xff\xff\xff\x0f";
  grpc::GenericStub generic(channel_);
  grpc::Slice slice(junk.data(), junk.size());
  grpc::ByteBuffer request(&slice, 1), answer;
  grpc::ClientContext context;
  SetDeadline(&context, kTimeout);
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, kLoadJob, grpc::StubOptions(), &request, &answer,
                    [&](grpc::Status s) {
                      status = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  Expect(kLoadJob, GrpcMessageBytes(static_cast<int64_t>(junk.size())), 0);
  CheckCounts();
}

// A generic stub's response is a grpc::ByteBuffer, which the interceptor cannot size: it is
// counted as unsized, never read as a protobuf message.
TEST_F(RpcBytesTest, GenericStubResponsesAreCountedUnsized) {
  LoadJob();
  const dlrm::v1::LookupRequest lookup = LookupOf("job", 1, {5, 6});
  grpc::ByteBuffer request, answer;
  bool own = false;
  ASSERT_TRUE(
      grpc::SerializationTraits<dlrm::v1::LookupRequest>::Serialize(lookup, &request, &own).ok());
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  SetDeadline(&context, kTimeout);
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, kLookup, grpc::StubOptions(), &request, &answer, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  const RpcBytes client = Sum(client_.Snapshot(), kLookup);
  EXPECT_EQ(client.calls, 1);
  EXPECT_EQ(client.sent, Framed(lookup));
  EXPECT_EQ(client.received, 0);
  EXPECT_EQ(client.received_unsized, 1);
  const RpcBytes server =
      Sum(Difference(RpcByteCounters::ProcessServer().Snapshot(), server_before_), kLookup);
  EXPECT_EQ(server.received, client.sent);
  EXPECT_EQ(server.sent, GrpcMessageBytes(static_cast<int64_t>(answer.Length())));
}

// The worker's PS client (worker/ps_client.h) decodes Lookup answers through a
// proto::LookupRowsSink on a generic stub and a completion queue: the call works through the
// interceptor, its request counts, its answer is unsized.
TEST_F(RpcBytesTest, LookupRowsSinkAnswersAreCountedUnsized) {
  LoadJob();
  const dlrm::v1::LookupRequest lookup = LookupOf("job", 1, {5, 6, 7});
  std::vector<float> rows(3 * 8, -1.0f);
  const proto::LookupRowsTarget target = {.table = 1, .dim = 8, .count = 3, .out = rows.data()};
  proto::LookupRowsSink sink;
  sink.targets = absl::MakeConstSpan(&target, 1);
  grpc::TemplatedGenericStub<dlrm::v1::LookupRequest, proto::LookupRowsSink> stub(channel_);
  grpc::CompletionQueue cq;
  auto context = MakeClientContext(kTimeout);
  grpc::Status status;
  auto reader = stub.PrepareUnaryCall(context.get(), proto::kLookupMethod, lookup, &cq);
  reader->StartCall();
  reader->Finish(&sink, &status, nullptr);
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_TRUE(ok);
  ASSERT_TRUE(status.ok()) << status.error_message();
  for (float r : rows) EXPECT_NE(r, -1.0f);  // every row was written
  reader.reset();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  const RpcBytes client = Sum(client_.Snapshot(), kLookup);
  EXPECT_EQ(client.calls, 1);
  EXPECT_EQ(client.sent, Framed(lookup));
  EXPECT_EQ(client.received, 0);
  EXPECT_EQ(client.received_unsized, 1);
  const RpcBytes server =
      Sum(Difference(RpcByteCounters::ProcessServer().Snapshot(), server_before_), kLookup);
  EXPECT_EQ(server.received, client.sent);
  // The answer: per table a header (tag, length, table, dim, rows tag and length) and the rows.
  EXPECT_GT(server.sent, GrpcMessageBytes(3 * 8 * 4));
  EXPECT_LT(server.sent, GrpcMessageBytes(3 * 8 * 4 + 16));
}

// The PS's Lookup answer writes `table = 0`, which the parsed message leaves out: the client
// counts 2 bytes less than the server sent for each table with index 0.
TEST_F(RpcBytesTest, LookupOfTableZeroIsTwoBytesShortOnTheClient) {
  LoadJob();
  const dlrm::v1::LookupRequest request = LookupOf("job", 0, {1, 2});
  dlrm::v1::LookupResponse response;
  ASSERT_TRUE(stub_->Lookup(MakeClientContext(kTimeout).get(), request, &response).ok());
  const RpcBytes client = Sum(client_.Snapshot(), kLookup);
  const RpcBytes server =
      Sum(Difference(RpcByteCounters::ProcessServer().Snapshot(), server_before_), kLookup);
  EXPECT_EQ(client.received, Framed(response));
  EXPECT_EQ(server.sent, client.received + 2);
  EXPECT_EQ(server.received, client.sent);
}

TEST_F(RpcBytesTest, ChannelsCountIntoTheProcessCountersByDefault) {
  const std::map<std::string, RpcBytes> before = RpcByteCounters::ProcessClient().Snapshot();
  auto channel = MakeChannel({.target = ps_->address()});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = dlrm::v1::ParameterServer::NewStub(*channel);
  dlrm::v1::GetStatsRequest request;
  dlrm::v1::GetStatsResponse response;
  ASSERT_TRUE(stub->GetStats(MakeClientContext(kTimeout).get(), request, &response).ok());
  const RpcBytes delta =
      Sum(Difference(RpcByteCounters::ProcessClient().Snapshot(), before), kGetStats);
  EXPECT_EQ(delta.calls, 1);
  EXPECT_EQ(delta.sent, Framed(request));
  EXPECT_EQ(delta.received, Framed(response));
  EXPECT_EQ(Sum(client_.Snapshot(), "").calls, 0);
}

// The value of the sample of `metric` whose labels are `labels` (as the text format writes
// them), or -1.
double SampleValue(const std::string& text, const std::string& metric, const std::string& labels) {
  std::istringstream lines(text);
  const std::string prefix = absl::StrCat(metric, "{", labels, "} ");
  for (std::string line; std::getline(lines, line);) {
    double value = 0;
    if (absl::StartsWith(line, prefix) &&
        absl::SimpleAtod(absl::string_view(line).substr(prefix.size()), &value)) {
      return value;
    }
  }
  return -1;
}

TEST_F(RpcBytesTest, ExportsPrometheusCounters) {
  auto channel = MakeChannel({.target = ps_->address()});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = dlrm::v1::ParameterServer::NewStub(*channel);
  dlrm::v1::GetStatsRequest request;
  dlrm::v1::GetStatsResponse response;
  ASSERT_TRUE(stub->GetStats(MakeClientContext(kTimeout).get(), request, &response).ok());

  auto registry = MetricsRegistry::Create({.port = -1});
  ASSERT_TRUE(registry.ok()) << registry.status();
  const std::string client_labels = absl::StrCat("method=\"", kGetStats, "\",side=\"client\"");
  const std::string server_labels = absl::StrCat("method=\"", kGetStats, "\",side=\"server\"");
  for (int round = 0; round < 2; ++round) {  // exporting again adds nothing
    ExportRpcBytes(registry->get());
    const std::string text = (*registry)->Serialize();
    const RpcBytes client = Sum(RpcByteCounters::ProcessClient().Snapshot(), kGetStats);
    const RpcBytes server = Sum(RpcByteCounters::ProcessServer().Snapshot(), kGetStats);
    ASSERT_GT(client.sent, 0);
    EXPECT_EQ(SampleValue(text, "dlrm_rpc_sent_bytes_total", client_labels), client.sent) << text;
    EXPECT_EQ(SampleValue(text, "dlrm_rpc_received_bytes_total", client_labels), client.received);
    EXPECT_EQ(SampleValue(text, "dlrm_rpc_sent_bytes_total", server_labels), server.sent);
    EXPECT_EQ(SampleValue(text, "dlrm_rpc_received_bytes_total", server_labels), server.received);
  }
}

}  // namespace
}  // namespace dlrm::common
