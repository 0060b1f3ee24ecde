// Bytes of gRPC messages, per full method name ("/dlrm.v1.ParameterServer/Lookup"), counted on
// every channel MakeChannel builds (client side) and by the servers' unary handlers (server side),
// plus the kernel's byte counts of the process's open TCP sockets.
//
//   const auto before = RpcByteCounters::ProcessClient().Snapshot();
//   ... train some steps ...
//   const auto delta = Difference(RpcByteCounters::ProcessClient().Snapshot(), before);
//   RpcBytes lookups = Sum(delta, "/dlrm.v1.ParameterServer/Lookup");  // one method
//   RpcBytes ps = Sum(delta, "/dlrm.v1.ParameterServer/");             // a whole service
//
// What is counted ("gRPC message bytes"): for each message, its serialized bytes plus the 5-byte
// gRPC message prefix (compressed flag and length). Not counted: HTTP/2 frame headers, headers and
// trailers (metadata, status), pings and window updates, TLS records, TCP/IP headers. Messages are
// counted uncompressed (the project does not compress).
//
// Client side (the interceptor of MakeRpcBytesInterceptorFactory, installed by MakeChannel):
//   - calls: one per RPC started (initial metadata sent), whatever its outcome;
//   - sent: every request message, from its serialized form (exact, also for generic stubs);
//     a call that fails still counts what it sent;
//   - received: every response message gRPC parsed, when it is a protobuf message of the method's
//     response type (the generated stubs): its ByteSizeLong() + 5. That equals the wire bytes when
//     the sender encodes canonically; the PS's Lookup answer (proto/lookup_wire.h) also writes
//     table = 0, 2 bytes per table with index 0 that the parsed message does not count. Other
//     response types (grpc::ByteBuffer of generic stubs, proto::LookupRowsSink of the worker's PS
//     client) cannot be sized from what gRPC hands an interceptor: they are counted in
//     `received_unsized` only, and whoever decodes them may AddReceived their size itself.
// Server side (common/raw_unary.h, and PsService's Lookup and PushGradients), into
// ProcessServer(): calls, the request's bytes as received (also when it does not parse or the
// call is refused) and the response's serialized bytes when one is sent (an OK status). Streaming
// methods (Jobs.WatchJob), health and reflection are not counted on the server side.
//
// Thread-safe. Counting a message costs a few relaxed atomic adds; a channel looks a method up
// once per call (under a reader lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/client_interceptor.h"

namespace dlrm::common {

class MetricsRegistry;

// The gRPC message prefix: 1 byte compressed flag, 4 bytes length.
inline constexpr int64_t kGrpcMessagePrefixBytes = 5;

// Bytes counted for one message of `serialized_bytes`.
inline int64_t GrpcMessageBytes(int64_t serialized_bytes) {
  return serialized_bytes + kGrpcMessagePrefixBytes;
}

struct RpcBytes {
  int64_t sent = 0, received = 0, calls = 0;
  // Client side: messages received that are not in `received` (see the header comment).
  int64_t received_unsized = 0;
};

// The counts of one method.
class RpcMethodCounters {
 public:
  void AddSent(int64_t bytes) { sent_.fetch_add(bytes, std::memory_order_relaxed); }
  void AddReceived(int64_t bytes) { received_.fetch_add(bytes, std::memory_order_relaxed); }
  void AddCall() { calls_.fetch_add(1, std::memory_order_relaxed); }
  void AddReceivedUnsized() { received_unsized_.fetch_add(1, std::memory_order_relaxed); }
  RpcBytes Get() const;

 private:
  std::atomic<int64_t> sent_{0}, received_{0}, calls_{0}, received_unsized_{0};
};

class RpcByteCounters {
 public:
  RpcByteCounters() = default;
  RpcByteCounters(const RpcByteCounters&) = delete;
  RpcByteCounters& operator=(const RpcByteCounters&) = delete;

  // The counters of `method` (a full method name), created on first use; they live as long as
  // this object.
  RpcMethodCounters& ForMethod(absl::string_view method);

  void AddSent(absl::string_view method, int64_t bytes) { ForMethod(method).AddSent(bytes); }
  void AddReceived(absl::string_view method, int64_t bytes) {
    ForMethod(method).AddReceived(bytes);
  }
  void AddCall(absl::string_view method) { ForMethod(method).AddCall(); }

  // Every method counted so far.
  std::map<std::string, RpcBytes> Snapshot() const;

  // Process-wide defaults: ProcessClient for channels made without ChannelOptions::rpc_bytes,
  // ProcessServer for every server of the process. Never destroyed.
  static RpcByteCounters& ProcessClient();
  static RpcByteCounters& ProcessServer();

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<RpcMethodCounters>> methods_
      ABSL_GUARDED_BY(mu_);
};

// The total of `snapshot` over `selector`: "" for every method, a service prefix ending in '/'
// ("/dlrm.v1.ParameterServer/") for its methods, else exactly that method.
RpcBytes Sum(const std::map<std::string, RpcBytes>& snapshot, absl::string_view selector);

// `after` - `before`, method by method (a method missing from `before` counts from zero).
std::map<std::string, RpcBytes> Difference(const std::map<std::string, RpcBytes>& after,
                                           const std::map<std::string, RpcBytes>& before);

// The client interceptor that counts into `counters` (not owned; must outlive every channel and
// call made with the factory). MakeChannel installs one on every channel.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeRpcBytesInterceptorFactory(RpcByteCounters* counters);

// Sets dlrm_rpc_sent_bytes_total and dlrm_rpc_received_bytes_total{side="client"|"server",
// method="/dlrm.v1.X/Y"} of `registry` to the process-wide counters (ProcessClient,
// ProcessServer): each counter is raised by what it lacks. Call it periodically; thread-safe.
void ExportRpcBytes(MetricsRegistry* registry);

// The kernel's byte counts over the process's open TCP sockets (listening ones left out).
struct TcpBytes {
  int64_t sent = 0;      // tcpi_bytes_acked: payload bytes the peers acknowledged
  int64_t received = 0;  // tcpi_bytes_received: payload bytes received
  int sockets = 0;
};

// Walks /proc/self/fd and adds up TCP_INFO of every TCP socket: TCP payload, so TLS records and
// HTTP/2 framing are in, TCP/IP headers and retransmissions are not. Every TCP socket of the
// process counts (gRPC, the metrics endpoint, Gloo's allreduce...); sockets closed before the call
// are not included, so take differences over sockets that stay open. A loopback connection within
// the process counts at both ends. UNAVAILABLE when /proc/self/fd cannot be read,
// FAILED_PRECONDITION when the kernel's tcp_info lacks the byte counts (Linux older than 4.1).
absl::StatusOr<TcpBytes> OpenTcpSocketBytes();

}  // namespace dlrm::common
