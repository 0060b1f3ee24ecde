// Who may call what: the one access policy of every gRPC method of the service, and the check
// each handler makes first.
//
// Callers are identified by their certificate under mutual TLS (common/grpc_util.h): the
// subject's common name names the identity (`dlrm certs` makes coordinator, ps, worker and admin).
//
//   coordinator  Register, Heartbeat, Leave  ps, worker (and only as the role of the certificate)
//                ReportProgress, Kv*         worker
//                GetClusterView              admin, ps, worker
//   jobs         every method                admin (dlrmctl, dlrm local)
//   parameter    every method                worker; GetStats also admin
//   server
//
// A caller whose identity the table does not list is PERMISSION_DENIED, naming the method and the
// identity; a call on a TLS connection without a certificate common name is UNAUTHENTICATED. On a
// plaintext server (--insecure, or loopback without TLS) there is no identity and every call is
// allowed: that mode trusts the network.
//
//   grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context, ...) {
//     if (absl::Status denied = Authorize(*context, "Coordinator.Register"); !denied.ok()) ...
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace dlrm::common {

// The caller's certificate common name; nullopt on a plaintext connection or without one.
std::optional<std::string> PeerIdentity(const grpc::ServerContextBase& context);

// OK when the policy lets the caller call `method` ("Service.Method", e.g. "Jobs.SubmitJob");
// INTERNAL for a method the policy does not know (a bug: every method is listed).
absl::Status Authorize(const grpc::ServerContextBase& context, absl::string_view method);

// For Register: a member may only register in the role of its certificate ("ps" or "worker").
absl::Status AuthorizeRole(const grpc::ServerContextBase& context, absl::string_view role);

}  // namespace dlrm::common
