#include "common/metrics_endpoint.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dlrm::common {
namespace {

// Every thread libmicrohttpd starts gets this stack: far above the static TLS of the binary.
constexpr size_t kThreadStackBytes = size_t{1} << 20;
// Scrapers are few; more connections than this wait in the listen backlog.
constexpr unsigned kMaxConnections = 32;
constexpr unsigned kConnectionTimeoutSeconds = 30;

MHD_Result Reply(MHD_Connection* connection, unsigned status, const std::string& body,
                 const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

struct MetricsEndpoint::Impl {
  Render render;
  MHD_Daemon* daemon = nullptr;

  ~Impl() {
    if (daemon != nullptr) MHD_stop_daemon(daemon);
  }

  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* /*version*/, const char* /*upload_data*/,
                           size_t* upload_data_size, void** /*con_cls*/) {
    auto* self = static_cast<Impl*>(cls);
    const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                     std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (!get) {
      // A body (if any) is not read: answer at once and let the connection close.
      *upload_data_size = 0;
      return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n", "text/plain");
    }
    if (std::strcmp(url, "/metrics") == 0) {
      return Reply(connection, MHD_HTTP_OK, self->render(),
                   "text/plain; version=0.0.4; charset=utf-8");
    }
    if (std::strcmp(url, "/") == 0) {
      return Reply(connection, MHD_HTTP_OK,
                   "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n", "text/html");
    }
    return Reply(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", "text/plain");
  }
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

MetricsEndpoint::~MetricsEndpoint() = default;

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const MetricsEndpointOptions& options, Render render) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside 0..65535"));
  }
  std::string host = options.host.empty() ? "0.0.0.0" : options.host;
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  const std::string address = absl::StrCat(host, ":", options.port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port_text = absl::StrCat(options.port);
  if (const int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &resolved); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, ": ", gai_strerror(rc)));
  }
  sockaddr_storage bind_to{};
  std::memcpy(&bind_to, resolved->ai_addr, resolved->ai_addrlen);
  const bool ipv6 = resolved->ai_family == AF_INET6;
  freeaddrinfo(resolved);

  auto impl = std::make_unique<Impl>();
  impl->render = std::move(render);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (ipv6) flags |= MHD_USE_IPv6;
  impl->daemon = MHD_start_daemon(
      flags, static_cast<uint16_t>(options.port), /*apc=*/nullptr, /*apc_cls=*/nullptr,
      &Impl::Handle, impl.get(), MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&bind_to),
      MHD_OPTION_THREAD_STACK_SIZE, kThreadStackBytes, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds, MHD_OPTION_END);
  if (impl->daemon == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "metrics endpoint cannot listen on ", address,
        " (address in use, not an address of this host, or no thread could be started)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl->daemon, MHD_DAEMON_INFO_BIND_PORT);
  const int port = info != nullptr ? info->port : options.port;
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl), port));
}

}  // namespace dlrm::common
