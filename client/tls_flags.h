// The TLS flags every process and dlrmctl take, and the secure-by-default rule.
//
//   --tls-dir DIR          DIR/tls.crt, DIR/tls.key, DIR/ca.crt (a cert-manager Secret, or a
//                          folder of `dlrm certs`); env DLRM_TLS_DIR when no TLS flag is given
//   --tls-cert/--tls-key/--tls-ca FILE   the same files one by one (all three, or none)
//   --tls-server-name NAME the name the servers' certificates carry, when it is not the host
//                          dialled (e.g. pod IPs; `dlrm certs --host` names)
//   --insecure             plaintext gRPC, accepted on any address (logged as a warning)
//
// Without TLS, a process whose gRPC server listens on an address other than loopback refuses to
// start unless --insecure is given: anyone who can reach such a port could otherwise steer the
// cluster (docs/SECURITY.md).
//
//   static TlsFlags tls;
//   AddTlsFlags(cmd, &tls);
//   DLRM_ASSIGN_OR_RETURN(options.security, ResolveTls(tls, options.listen_address, "dlrm ps"));
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/grpc_util.h"

namespace dlrm::client {

struct TlsFlags {
  std::string dir;
  std::string cert;
  std::string key;
  std::string ca;
  std::string server_name;
  bool insecure = false;
  // A client's bearer token (dlrmctl --token-file or DLRM_TOKEN; not a flag of its own here):
  // sent with every call, and then --tls-ca alone is enough (no certificate of its own).
  std::string token;
};

void AddTlsFlags(CLI::App* cmd, TlsFlags* flags);

// dlrmctl's token: the first line of `path` (whitespace stripped), else $DLRM_TOKEN, else "".
// NOT_FOUND naming the path, INVALID_ARGUMENT for an empty file.
absl::StatusOr<std::string> ReadClientToken(const std::string& path);

// The transport security the flags ask for. `listen_address` is the gRPC address the process
// serves ("" for a process that only dials out). INVALID_ARGUMENT naming the flag for a partial
// set of files or TLS together with --insecure; FAILED_PRECONDITION naming the address for
// plaintext off loopback without --insecure; NOT_FOUND for a --tls-dir (or $DLRM_TLS_DIR) that
// is not a folder; the errors of common::ReadPemFile for files that cannot be read (checked here,
// so a bad path stops the process at once), each naming the flag the file came from ("ca.crt of
// --tls-dir", "--tls-ca"). Every message starts with `who`.
absl::StatusOr<common::TransportSecurity> ResolveTls(const TlsFlags& flags,
                                                     const std::string& listen_address,
                                                     const std::string& who);

// True for 127.0.0.0/8, ::1 and localhost (with or without a port).
bool IsLoopbackAddress(const std::string& address);

}  // namespace dlrm::client
