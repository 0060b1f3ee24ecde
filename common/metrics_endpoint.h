// The HTTP side of a process's metrics: serves GET /metrics (Prometheus text format 0.0.4) from a
// callback, on one libmicrohttpd thread.
//
// Why not prometheus-cpp's Exposer: its civetweb threads are created with a fixed 100 KB stack,
// smaller than the static thread-local storage of a CUDA- and BLAS-linked binary (about 186 KB),
// so pthread_create fails with EINVAL and the process cannot start with metrics on. libmicrohttpd
// lets the stack size be set (here: 1 MiB, more than any TLS the binary carries).
//
//   DLRM_ASSIGN_OR_RETURN(auto endpoint, MetricsEndpoint::Start({.host = "127.0.0.1", .port = 0},
//                                                               [&] { return Render(); }));
//   endpoint->port();  // the bound port
//
// The callback runs on the endpoint's thread, one request at a time; it must be thread-safe
// with respect to the rest of the process. Destruction stops the thread and closes the socket.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dlrm::common {

struct MetricsEndpointOptions {
  // A numeric IPv4 or IPv6 address or a host name resolved once at start ("0.0.0.0", "::",
  // "127.0.0.1", "localhost"). IPv6 addresses may be bracketed ("[::1]").
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
};

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;

  // Binds host:port and starts serving. INVALID_ARGUMENT for a port outside 0..65535 or a host
  // that does not resolve; UNAVAILABLE naming the address when it cannot bind or start.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const MetricsEndpointOptions& options, Render render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace dlrm::common
