// Who may call what: the one access policy of every gRPC method of the service, and the check
// each handler makes first.
//
// Callers are identified by their certificate under mutual TLS (common/grpc_util.h): the
// subject's common name names the identity (`dlrm certs` makes coordinator, ps, worker and admin).
// People and scripts may instead send a bearer token ("authorization: Bearer T") that the
// process's token file (SetBearerTokens) gives the identity admin or viewer.
//
//   coordinator  Register, Heartbeat, Leave  ps, worker (and only as the role of the certificate)
//                ReportProgress, Kv*         worker
//                GetClusterView              admin, viewer, ps, worker
//   jobs         GetJob, ListJobs, WatchJob  admin, viewer
//                SubmitJob, CancelJob,       admin
//                CheckpointJob
//   parameter    every method                worker; GetStats also admin; UnloadJob, WriteRows
//   server                                   and Checkpoint also need the job's grant; LoadJob,
//                                            Lookup, PushGradients and ReadRows the member grant
//                                            of the job's epoch, LoadJob also the load grant of
//                                            its very request (common/grants.h)
//
// A caller whose identity the table does not list is PERMISSION_DENIED, naming the method and the
// identity; a call on a TLS connection with neither a certificate common name nor a valid token
// is UNAUTHENTICATED. Tokens are compared in constant time. On a plaintext server (--insecure, or
// loopback without TLS) there is no identity and every call is allowed: that mode trusts the
// network.
//
//   grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context, ...) {
//     if (absl::Status denied = Authorize(*context, "Coordinator.Register"); !denied.ok()) ...
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace dlrm::common {

struct BearerToken {
  std::string identity;  // admin | viewer
  std::string token;
};

// Reads a token file: one "IDENTITY TOKEN" per line (identity admin or viewer, a token of 16 to
// 512 printable characters), blank lines and # comments ignored. NOT_FOUND naming the path;
// INVALID_ARGUMENT naming the line. The tokens themselves are never put in a message.
absl::StatusOr<std::vector<BearerToken>> LoadTokenFile(const std::string& path);
// The tokens Authorize accepts in this process (the coordinator's --tokens); replaces any.
void SetBearerTokens(std::vector<BearerToken> tokens);

// Whether the call came over TLS (otherwise the server trusts the network: see above).
bool OverTls(const grpc::ServerContextBase& context);

// The caller's certificate common name; nullopt on a plaintext connection or without one.
std::optional<std::string> PeerIdentity(const grpc::ServerContextBase& context);

// OK when the policy lets the caller call `method` ("Service.Method", e.g. "Jobs.SubmitJob");
// INTERNAL for a method the policy does not know (a bug: every method is listed).
absl::Status Authorize(const grpc::ServerContextBase& context, absl::string_view method);

// For Register: a member may only register in the role of its certificate ("ps" or "worker").
absl::Status AuthorizeRole(const grpc::ServerContextBase& context, absl::string_view role);

}  // namespace dlrm::common
