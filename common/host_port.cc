#include "common/host_port.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dlrm::common {

absl::Status CheckHostPort(absl::string_view what, const std::string& address,
                           const HostPortRules& rules) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", address, "': ", why, "; give HOST:PORT, e.g. 127.0.0.1:50051"));
  };
  if (address.empty()) return bad("empty");
  if (rules.dial) {
    for (const absl::string_view scheme :
         {"dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:", "xds:"}) {
      if (absl::StartsWith(address, scheme)) return absl::OkStatus();
    }
    if (absl::StrContains(address, "://")) return absl::OkStatus();
  }
  absl::string_view host;
  absl::string_view port;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad("no port after the bracketed address");
    }
    host = absl::string_view(address).substr(1, close - 1);
    port = absl::string_view(address).substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    if (address.find(':') != colon) return bad("an IPv6 address goes in brackets, [::1]:PORT");
    host = absl::string_view(address).substr(0, colon);
    port = absl::string_view(address).substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  if (port.empty()) return bad("no port after the colon");
  if (rules.dial && absl::ascii_isalpha(static_cast<unsigned char>(port.front())) &&
      std::all_of(port.begin(), port.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
      })) {
    return absl::OkStatus();
  }
  int value = -1;
  if (!std::all_of(port.begin(), port.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(port, &value) || value > 65535 || (value == 0 && !rules.port_zero)) {
    return bad(absl::StrCat("port ", port, " is not in [", rules.port_zero ? 0 : 1, ", 65535]"));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::common
