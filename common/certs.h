// Certificates for a cluster's mutual TLS (common/grpc_util.h TransportSecurity), made with
// OpenSSL: a CA and one certificate per identity, each in the layout of a cert-manager Secret.
//
//   out/ca.crt, out/ca.key                      the CA (keep ca.key away from the cluster)
//   out/<identity>/tls.crt, tls.key, ca.crt     for identity in coordinator, ps, worker, admin
//
// Keys are ECDSA P-256, certificates SHA-256, valid `valid_days` from an hour ago. Every
// certificate is for both server and client use, names its identity as the subject's common name
// (CN=ps, O=dlrm: who a peer is, for authorization) and carries `hosts` as subject alternative
// names (IP addresses as IP entries, anything else as DNS names), which is what a client checks
// against the address it dialled (or TransportSecurity::server_name). Key files are written
// with mode 0600.
//
//   DLRM_RETURN_IF_ERROR(WriteClusterCertificates({.out_dir = "certs"}));
//   auto security = TransportSecurity::FromDir("certs/ps");
//
// `dlrm certs --out DIR --host NAME...` is the command line; `dlrm local` uses it for its own
// loopback cluster.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dlrm::common {

// The identities WriteClusterCertificates makes, in order.
inline constexpr const char* kCertIdentities[] = {"coordinator", "ps", "worker", "admin"};

struct ClusterCertOptions {
  std::string out_dir;
  std::vector<std::string> hosts = {"localhost", "127.0.0.1"};
  int valid_days = 365;
  // false: refuse a folder that already holds a CA (ca.key or ca.crt), before anything is written:
  // a new CA breaks every certificate the old one issued. `dlrm certs` refuses unless given
  // --overwrite; `dlrm local` makes a new CA in DATA_DIR/tls for each cluster it launches and
  // replaces the last one's (true).
  bool overwrite = true;
};

// INVALID_ARGUMENT for an empty out_dir, no hosts or valid_days outside [1, 3650]; ALREADY_EXISTS
// naming the file when out_dir holds a CA and !overwrite; INTERNAL with OpenSSL's message when a
// step fails; the path when a file cannot be written. With overwrite, existing files are replaced.
absl::Status WriteClusterCertificates(const ClusterCertOptions& options);

}  // namespace dlrm::common
