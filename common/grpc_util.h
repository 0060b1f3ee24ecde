// gRPC plumbing built in ONE place: every channel and server of the project is made here, with
// the transport security of its process (TransportSecurity: plaintext or mutual TLS).
//
//   DLRM_ASSIGN_OR_RETURN(auto channel, MakeChannel({.target = "127.0.0.1:50051"}));
//   auto stub = dlrm::v1::Coordinator::NewStub(channel);
//   auto ctx = MakeClientContext(absl::Seconds(5));   // every client call has a deadline
//   grpc::Status s = stub->Register(ctx.get(), request, &response);
//   return FromGrpcStatus(s);
//
//   DLRM_ASSIGN_OR_RETURN(auto server, GrpcServer::Start({.listen_address = "127.0.0.1:0"},
//                                                        {&my_service}));
//   server->port();  // the bound port
//
// Message sizes: kMaxGrpcMessageBytes is set on both channels and servers. Payloads (ids, rows,
// gradients) are kept under kMaxRpcPayloadBytes per request; clients split larger batches into
// chunks of MaxRowsPerRequest(dim) rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace dlrm::common {

class RpcByteCounters;

// Hard limit on one gRPC message, sent or received, on every channel and server.
inline constexpr int kMaxGrpcMessageBytes = 64 << 20;
// Budget for the payload bytes (ids + rows/gradients) of one request or response; half the
// message limit leaves room for framing and for a response larger than its request.
inline constexpr int64_t kMaxRpcPayloadBytes = 32 << 20;
// Most ids one Lookup/PushGradients request may carry (all tables together), whatever the dim.
inline constexpr int64_t kMaxIdsPerRequest = 1 << 20;

// Rows of width `dim` that fit one request: each costs 8 bytes of id + 4 * dim bytes of floats.
inline int64_t MaxRowsPerRequest(int dim) {
  const int64_t per_row = 8 + 4 * static_cast<int64_t>(dim > 0 ? dim : 1);
  const int64_t rows = kMaxRpcPayloadBytes / per_row;
  return rows < kMaxIdsPerRequest ? rows : kMaxIdsPerRequest;
}

// How a connection is secured. kTls is mutual TLS: both sides present a certificate signed by
// the CA of `root_certs_path` and check the other's (a server refuses a client without one, or
// with one the CA did not sign, at the handshake). Files are PEM; cert-manager's Secret layout is
// tls.crt / tls.key / ca.crt (TransportSecurity::FromDir). common/certs.h makes a test CA.
struct TransportSecurity {
  enum class Mode { kInsecure, kTls };
  Mode mode = Mode::kInsecure;
  std::string root_certs_path;   // TLS: CA bundle to verify the peer
  std::string cert_chain_path;   // TLS: own certificate
  std::string private_key_path;  // TLS: own key
  // Channels: the name the server's certificate must carry, when it is not the target's host
  // (e.g. every PS certificate names "ps.dlrm" while workers dial pod addresses).
  std::string server_name;
  // Servers: refuse a client without a certificate at the handshake. false (a coordinator with
  // bearer tokens): a client may come with a token instead; a certificate it presents is still
  // verified. Channels: ignored.
  bool require_client_certificate = true;
  // Channels: sent as "authorization: Bearer <token>" with every call (TLS only). A channel with a
  // token needs no certificate of its own (cert_chain_path and private_key_path may be empty).
  std::string bearer_token;

  // kTls with dir/tls.crt, dir/tls.key and dir/ca.crt.
  static TransportSecurity FromDir(const std::string& dir);
  bool tls() const { return mode == Mode::kTls; }
};

// Reads a PEM file of a TransportSecurity; NOT_FOUND naming `what` and the path when it cannot be
// read, INVALID_ARGUMENT when it holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& what);

struct ChannelOptions {
  std::string target;  // "host:port" or any gRPC target URI
  int max_message_bytes = kMaxGrpcMessageBytes;
  absl::Duration keepalive_time = absl::Seconds(20);     // ping an idle connection this often
  absl::Duration keepalive_timeout = absl::Seconds(10);  // and drop it after this without ack
  // Cap on the reconnect backoff, so a peer that comes back is found again quickly.
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  TransportSecurity security = {};
  // Connections of its own instead of the process-wide pool gRPC shares between channels with the
  // same target and arguments: a fresh start after a peer restarted.
  bool private_connections = false;
  // Where the channel counts its gRPC message bytes (common/rpc_bytes.h); not owned, must outlive
  // the channel. Null: RpcByteCounters::ProcessClient().
  RpcByteCounters* rpc_bytes = nullptr;
  // TLS: the identity the server must have, the common name of its certificate (kCoordinatorPeer,
  // kParameterServerPeer): a certificate of the CA made for another role (a worker's, an admin's)
  // fails the handshake, so its holder cannot pose as the server at its address. Empty: any
  // certificate of the CA that names the host dialled (tests, benchmarks).
  std::string peer_identity = {};
};

// The identities servers have (the common names `dlrm certs` gives their certificates).
inline constexpr char kCoordinatorPeer[] = "coordinator";
inline constexpr char kParameterServerPeer[] = "ps";

// Builds a channel, with the interceptor that counts its message bytes into options.rpc_bytes
// (MakeRpcBytesInterceptorFactory). Connection happens lazily; a call to a peer that is gone fails
// with UNAVAILABLE (or DEADLINE_EXCEEDED) within that call's deadline, and so does a call to a
// server whose certificate does not verify or is not of options.peer_identity (the status message
// says which it is and what it should be). INVALID_ARGUMENT for an empty target; for TLS, the
// errors of ReadPemFile.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options);

// A ClientContext whose deadline is `timeout` from now. Every client call must have one.
std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout);
// Sets the deadline of an existing context to `timeout` from now.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout);

// absl and gRPC status codes have the same numbering; these map them one to one and keep the
// message.
absl::Status FromGrpcStatus(const grpc::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

struct ServerOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0: pick a free port (see port())
  int max_message_bytes = kMaxGrpcMessageBytes;
  bool enable_health_service = true;  // grpc.health.v1.Health, reports SERVING while up
  bool enable_reflection = true;      // grpc.reflection.v1alpha.ServerReflection
  // Threads of the callback executor; 0 leaves gRPC's default.
  int max_threads = 0;
  TransportSecurity security = {};
};

// A started gRPC server. Services are not owned and must outlive it.
// Thread-safe: Shutdown may be called from any thread, more than once.
class GrpcServer {
 public:
  // Binds, registers `services` (plus health and reflection per options) and starts serving.
  // UNAVAILABLE naming the address when it cannot bind.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const ServerOptions& options, const std::vector<grpc::Service*>& services);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  // "host:port" with the bound port, e.g. "127.0.0.1:41234".
  const std::string& address() const { return address_; }
  // Marks the health service NOT_SERVING (e.g. while draining) or SERVING.
  void SetServing(bool serving);
  // Stops accepting calls, lets calls in flight finish for up to `grace`, then cancels them.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, int port, std::string address);

  std::unique_ptr<grpc::Server> server_;
  int port_;
  std::string address_;
};

}  // namespace dlrm::common
