// HOST:PORT addresses as the binaries' flags take them (dlrm's --listen, --advertise and
// --coordinator; dlrmctl's --coordinator), checked before anything listens or dials: gRPC reads a
// listening port past 65535 modulo 65536 (`--listen 127.0.0.1:99999` served on 34463), dials
// "127.0.0.1:" as port 0, and a process given an address without a port retried for a minute.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlrm::common {

struct HostPortRules {
  // Port 0 (any free port) is allowed: an address to listen on.
  bool port_zero = false;
  // An address to dial: a gRPC target URI ("dns:///host:port", "unix:/path", "ipv4:...") is left
  // to gRPC, and the port may be a service name ("https"), looked up as gRPC would.
  bool dial = false;
};
inline constexpr HostPortRules kListenAddress = {.port_zero = true, .dial = false};
inline constexpr HostPortRules kDialAddress = {.port_zero = false, .dial = true};

// OK for HOST:PORT or [IPV6]:PORT with a port the rules allow (1 to 65535, or 0 with
// `port_zero`); else INVALID_ARGUMENT naming `what` (the flag, or where the address came from),
// the address and what is wrong, e.g. "--listen '127.0.0.1:99999': port 99999 is not in [0,
// 65535]; give HOST:PORT, e.g. 127.0.0.1:50051".
absl::Status CheckHostPort(absl::string_view what, const std::string& address,
                           const HostPortRules& rules);

}  // namespace dlrm::common
