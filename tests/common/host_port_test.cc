#include "common/host_port.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;

std::string Why(const std::string& address, const HostPortRules& rules) {
  const absl::Status s = CheckHostPort("--flag", address, rules);
  return s.ok() ? "" : std::string(s.message());
}

TEST(HostPortTest, AddressesToListenOnTakePortZeroButNoTargetOrServiceName) {
  for (const char* ok : {"127.0.0.1:0", "0.0.0.0:50051", "[::]:0", "[::1]:65535", "host:1"}) {
    EXPECT_EQ(Why(ok, kListenAddress), "") << ok;
  }
  EXPECT_EQ(Why("127.0.0.1:99999", kListenAddress),
            "--flag '127.0.0.1:99999': port 99999 is not in [0, 65535]; give HOST:PORT, e.g. "
            "127.0.0.1:50051");
  EXPECT_THAT(Why("127.0.0.1:-1", kListenAddress), HasSubstr("port -1 is not in [0, 65535]"));
  EXPECT_THAT(Why("127.0.0.1:https", kListenAddress), HasSubstr("port https is not in"));
  EXPECT_THAT(Why("dns:///127.0.0.1:1", kListenAddress), HasSubstr("an IPv6 address goes in"));
  EXPECT_THAT(Why("unix:/tmp/s", kListenAddress), HasSubstr("port /tmp/s is not in"));
}

TEST(HostPortTest, AddressesToDialNeedAPortOrAreLeftToGrpc) {
  for (const char* ok : {"127.0.0.1:1", "[::1]:1", "localhost:65535", "dns:///127.0.0.1:1",
                         "unix:/tmp/s", "ipv4:127.0.0.1:5", "host:https", "xds://svc"}) {
    EXPECT_EQ(Why(ok, kDialAddress), "") << ok;
  }
  EXPECT_THAT(Why("127.0.0.1:0", kDialAddress), HasSubstr("port 0 is not in [1, 65535]"));
  EXPECT_THAT(Why("127.0.0.1:70000", kDialAddress), HasSubstr("port 70000 is not in [1, 65535]"));
  EXPECT_THAT(Why("127.0.0.1:5 0", kDialAddress), HasSubstr("port 5 0 is not in"));
  EXPECT_THAT(Why("", kDialAddress), HasSubstr("'': empty"));
  EXPECT_THAT(Why("127.0.0.1", kDialAddress), HasSubstr("'127.0.0.1': no port;"));
  EXPECT_THAT(Why("127.0.0.1:", kDialAddress), HasSubstr("no port after the colon"));
  EXPECT_THAT(Why(":50051", kDialAddress), HasSubstr("no host"));
  EXPECT_THAT(Why("::1:50051", kDialAddress), HasSubstr("an IPv6 address goes in brackets"));
  EXPECT_THAT(Why("[::1]", kDialAddress), HasSubstr("no port after the bracketed address"));
  EXPECT_THAT(Why("[::1]50051", kDialAddress), HasSubstr("no port after the bracketed address"));
}

}  // namespace
}  // namespace dlrm::common
