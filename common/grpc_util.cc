#include "common/grpc_util.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/rpc_bytes.h"
#include "common/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace dlrm::common {
namespace {

int ToMillis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

// Splits "host:port" at the last colon; the port part may be empty.
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// Why a server could not listen on `address` (HOST:PORT or [IPV6]:PORT), found by trying what
// gRPC tried: the host does not resolve, or bind() says why (in use, not an address of this
// machine, a port below 1024 without the right to it). The message said "(address in use?)" for
// every one of these.
std::string WhyCannotListen(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "no port";
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::StrCat("host '", host, "' does not resolve: ", gai_strerror(rc));
  }
  std::string why;
  for (const addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as gRPC binds
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return why.empty() ? "address in use?" : why;
}

struct PemSet {
  std::string ca, cert, key;
};

// The CA, and the own certificate and key unless `optional_identity` and neither is given.
absl::StatusOr<PemSet> ReadPems(const TransportSecurity& security, bool optional_identity) {
  PemSet pems;
  DLRM_ASSIGN_OR_RETURN(pems.ca, ReadPemFile(security.root_certs_path, "TLS CA (--tls-ca)"));
  if (optional_identity && security.cert_chain_path.empty() && security.private_key_path.empty()) {
    return pems;
  }
  DLRM_ASSIGN_OR_RETURN(pems.cert,
                        ReadPemFile(security.cert_chain_path, "TLS certificate (--tls-cert)"));
  DLRM_ASSIGN_OR_RETURN(pems.key, ReadPemFile(security.private_key_path, "TLS key (--tls-key)"));
  return pems;
}

// Checks a server's certificate after gRPC has verified its chain to the CA: that it names the
// host dialled (or the --tls-server-name), as SslCredentials would, and that its common name is
// the identity the channel expects. Every certificate of a cluster comes from one CA, so the chain
// alone lets the holder of a worker's or an admin's certificate pose as the coordinator.
class PeerIdentityVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit PeerIdentityVerifier(std::string want) : want_(std::move(want)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> callback, grpc::Status* sync_status) override {
    // gRPC's host name check is synchronous; should it ever not be, its answer still comes here.
    grpc::Status host_status;
    if (!host_names_.Verify(
            request,
            [this, request, callback](grpc::Status status) {
              callback(status.ok() ? CheckIdentity(*request) : HostNotNamed(*request));
            },
            &host_status)) {
      return false;
    }
    *sync_status = host_status.ok() ? CheckIdentity(*request) : HostNotNamed(*request);
    return true;
  }

  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest* request) override {
    host_names_.Cancel(request);
  }

 private:
  // gRPC's own words are "Hostname Verification Check failed.": say which names would do.
  static grpc::Status HostNotNamed(
      const grpc::experimental::TlsCustomVerificationCheckRequest& request) {
    std::vector<std::string> names;
    for (const auto& names_of_kind : {request.dns_names(), request.ip_names()}) {
      for (const grpc::string_ref& name : names_of_kind) {
        if (names.size() < 8) names.push_back(Shown(std::string(name.data(), name.size())));
      }
    }
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("the certificate of the server does not name the host dialled, '",
                     Shown(std::string(request.target_name().data(), request.target_name().size())),
                     "' (it names ", names.empty() ? "none" : absl::StrJoin(names, ", "),
                     "): dial one of those or give it with --tls-server-name"));
  }

  grpc::Status CheckIdentity(const grpc::experimental::TlsCustomVerificationCheckRequest& request) {
    if (want_.empty()) return grpc::Status::OK;
    const grpc::string_ref got = request.common_name();
    if (std::string(got.data(), got.size()) == want_) return grpc::Status::OK;
    const std::string target(request.target_name().data(), request.target_name().size());
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("the server at ", target, " has a certificate of the identity '",
                     Shown(std::string(got.data(), got.size())), "', not '", want_,
                     "' (is another role's certificate serving at this address?)"));
  }

  const std::string want_;
  grpc::experimental::HostNameCertificateVerifier host_names_;
};

}  // namespace

TransportSecurity TransportSecurity::FromDir(const std::string& dir) {
  TransportSecurity s;
  s.mode = Mode::kTls;
  s.root_certs_path = dir + "/ca.crt";
  s.cert_chain_path = dir + "/tls.crt";
  s.private_key_path = dir + "/tls.key";
  return s;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no file given"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is over 1 MiB"));
  }
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' holds no PEM block"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("channel target is empty");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (options.security.tls()) {
    const bool token = !options.security.bearer_token.empty();
    DLRM_ASSIGN_OR_RETURN(PemSet pems, ReadPems(options.security, /*optional_identity=*/token));
    std::vector<grpc::experimental::IdentityKeyCertPair> identity;
    if (!pems.cert.empty()) identity.push_back({pems.key, pems.cert});
    grpc::experimental::TlsChannelCredentialsOptions tls;
    tls.set_certificate_provider(
        identity.empty()
            ? std::make_shared<grpc::experimental::StaticDataCertificateProvider>(pems.ca)
            : std::make_shared<grpc::experimental::StaticDataCertificateProvider>(pems.ca,
                                                                                  identity));
    tls.watch_root_certs();
    if (!identity.empty()) tls.watch_identity_key_cert_pairs();
    tls.set_verify_server_certs(true);
    tls.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<PeerIdentityVerifier>(
            options.peer_identity));
    credentials = grpc::experimental::TlsCredentials(tls);
    if (token) {
      credentials = grpc::CompositeChannelCredentials(
          credentials, grpc::AccessTokenCredentials(options.security.bearer_token));
    }
    if (!options.security.server_name.empty()) {
      args.SetSslTargetNameOverride(options.security.server_name);
    }
  }
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.private_connections) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ToMillis(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ToMillis(options.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, ToMillis(options.max_reconnect_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              std::min(1000, ToMillis(options.max_reconnect_backoff)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              std::min(1000, ToMillis(options.max_reconnect_backoff)));
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeRpcBytesInterceptorFactory(
      options.rpc_bytes != nullptr ? options.rpc_bytes : &RpcByteCounters::ProcessClient()));
  return grpc::experimental::CreateCustomChannelWithInterceptors(options.target, credentials, args,
                                                                 std::move(interceptors));
}

std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  SetDeadline(context.get(), timeout);
  return context;
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

GrpcServer::GrpcServer(std::unique_ptr<grpc::Server> server, int port, std::string address)
    : server_(std::move(server)), port_(port), address_(std::move(address)) {}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  if (options.listen_address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", options.listen_address, "' is not host:port"));
  }
  // Both are process-wide switches read when a server is built; setting them again is harmless.
  grpc::EnableDefaultHealthCheckService(options.enable_health_service);
  if (options.enable_reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.security.tls()) {
    DLRM_ASSIGN_OR_RETURN(PemSet pems, ReadPems(options.security, /*optional_identity=*/false));
    // Mutual TLS: a client without a certificate the CA signed fails the handshake (or, when
    // certificates are optional, one it presents must verify).
    grpc::SslServerCredentialsOptions ssl(
        options.security.require_client_certificate
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = pems.ca;
    ssl.pem_key_cert_pairs.push_back({pems.key, pems.cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address, credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // A second server on a port in use must fail, not silently share it (gRPC's default).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Let clients keep idle connections alive with pings (matches MakeChannel's keepalive).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  if (options.max_threads > 0) {
    grpc::ResourceQuota quota("dlrm-server");
    quota.SetMaxThreads(options.max_threads);
    builder.SetResourceQuota(quota);
  }
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", options.listen_address,
                                               "': ", WhyCannotListen(options.listen_address)));
  }
  std::string address = absl::StrCat(HostOf(options.listen_address), ":", port);
  if (options.enable_health_service && server->GetHealthCheckService() != nullptr) {
    server->GetHealthCheckService()->SetServingStatus(true);
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(server), port, std::move(address)));
}

void GrpcServer::SetServing(bool serving) {
  if (server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(serving);
  }
}

void GrpcServer::Shutdown(absl::Duration grace) {
  SetServing(false);
  // grpc::Server::Shutdown is idempotent and thread-safe.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void GrpcServer::Wait() { server_->Wait(); }

}  // namespace dlrm::common
