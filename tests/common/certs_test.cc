// WriteClusterCertificates onto a folder that already holds a CA: refused without `overwrite`
// (a new CA would break every certificate the old one issued), replaced with it.
#include "common/certs.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace dlrm::common {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ClusterCertificates, AFolderWithACaIsRefusedUnlessOverwriteIsSet) {
  dlrm::testing::ScopedTempDir dir("certs");
  const std::string out = dir.Sub("tls");
  ASSERT_TRUE(WriteClusterCertificates({.out_dir = out, .overwrite = false}).ok());
  const std::string ca = Read(out + "/ca.crt"), ca_key = Read(out + "/ca.key");
  const std::string worker = Read(out + "/worker/tls.crt");
  ASSERT_FALSE(ca.empty());

  absl::Status again = WriteClusterCertificates({.out_dir = out, .overwrite = false});
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(
      std::string(again.message()),
      AllOf(HasSubstr(out + "/ca.key"), HasSubstr("already holds a CA"), HasSubstr("--overwrite")));
  // Nothing was written.
  EXPECT_EQ(Read(out + "/ca.crt"), ca);
  EXPECT_EQ(Read(out + "/ca.key"), ca_key);
  EXPECT_EQ(Read(out + "/worker/tls.crt"), worker);

  // Either file of the CA is enough to refuse.
  std::filesystem::remove(out + "/ca.key");
  again = WriteClusterCertificates({.out_dir = out, .overwrite = false});
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr(out + "/ca.crt"));

  // overwrite (the default, which `dlrm local` relies on for its own folder) makes a new CA.
  ASSERT_TRUE(WriteClusterCertificates({.out_dir = out}).ok());
  EXPECT_NE(Read(out + "/ca.crt"), ca);
  EXPECT_NE(Read(out + "/worker/tls.crt"), worker);
}

// A replacement that failed partway (a read-only or full folder) had already put a new CA in place
// of the old, whose certificates then verified against nothing, and left empty files that the next
// run took for a CA (audit). Every file is now written whole beside its name before any replaces
// the old one: a failure leaves the old certificates as they were, and no temporary file.
TEST(ClusterCertificates, AFailedOverwriteKeepsTheOldCertificates) {
  dlrm::testing::ScopedTempDir dir("certs");
  const std::string out = dir.Sub("tls");
  ASSERT_TRUE(WriteClusterCertificates({.out_dir = out}).ok());
  const std::string ca = Read(out + "/ca.crt"), ca_key = Read(out + "/ca.key");
  const std::string coordinator = Read(out + "/coordinator/tls.crt");
  std::filesystem::remove_all(out + "/worker");
  std::ofstream(out + "/worker") << "a file where a folder goes\n";
  absl::Status failed = WriteClusterCertificates({.out_dir = out});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr(out + "/worker"));
  EXPECT_EQ(Read(out + "/ca.crt"), ca);
  EXPECT_EQ(Read(out + "/ca.key"), ca_key);
  EXPECT_EQ(Read(out + "/coordinator/tls.crt"), coordinator);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(out)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
}

// A --host that no client could match (a port, a scheme, a zone, a bad label) was written into
// the certificates as a DNS name, and the mistake showed later as a TLS failure.
TEST(ClusterCertificates, HostsAreIpAddressesOrDnsNames) {
  dlrm::testing::ScopedTempDir dir("certs-hosts");
  for (const char* bad : {"localhost:50051", "http://x", "10.0.0.256", "-foo", "a..b",
                          "fe80::1%eth0", "a b", "", "x.", "foo_bar.example", "a.*.example", "*"}) {
    absl::Status st = WriteClusterCertificates({.out_dir = dir.Sub("bad"), .hosts = {bad}});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(st.message()),
                HasSubstr(absl::StrCat("--host '", bad, "' is neither an IP address nor a DNS")))
        << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("bad") + "/ca.crt"));
  EXPECT_TRUE(WriteClusterCertificates({.out_dir = dir.Sub("good"),
                                        .hosts = {"localhost", "127.0.0.1", "::1", "dlrm-ps-0",
                                                  "*.dlrm-ps.ns.svc.cluster.local", "10.0.0.25"}})
                  .ok());
}

}  // namespace
}  // namespace dlrm::common
