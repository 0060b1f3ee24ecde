#include "common/authz.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace dlrm::common {
namespace {

struct Rule {
  absl::string_view method;
  std::initializer_list<absl::string_view> identities;
};

// The policy (see authz.h). Every RPC of proto/ is listed; the bench service is not served by
// the service's processes.
constexpr absl::string_view kMembers[] = {"ps", "worker"};
const Rule kPolicy[] = {
    {"Coordinator.Register", {"ps", "worker"}},
    {"Coordinator.Heartbeat", {"ps", "worker"}},
    {"Coordinator.Leave", {"ps", "worker"}},
    {"Coordinator.GetClusterView", {"admin", "ps", "worker"}},
    {"Coordinator.KvSet", {"worker"}},
    {"Coordinator.KvGet", {"worker"}},
    {"Coordinator.KvDelete", {"worker"}},
    {"Coordinator.KvAdd", {"worker"}},
    {"Coordinator.ReportProgress", {"worker"}},
    {"Jobs.SubmitJob", {"admin"}},
    {"Jobs.GetJob", {"admin"}},
    {"Jobs.ListJobs", {"admin"}},
    {"Jobs.CancelJob", {"admin"}},
    {"Jobs.CheckpointJob", {"admin"}},
    {"Jobs.WatchJob", {"admin"}},
    {"ParameterServer.LoadJob", {"worker"}},
    {"ParameterServer.UnloadJob", {"worker"}},
    {"ParameterServer.Lookup", {"worker"}},
    {"ParameterServer.PushGradients", {"worker"}},
    {"ParameterServer.GetStats", {"worker", "admin"}},
    {"ParameterServer.ReadRows", {"worker"}},
    {"ParameterServer.WriteRows", {"worker"}},
    {"ParameterServer.Checkpoint", {"worker"}},
};

bool OverTls(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return false;
  for (const grpc::string_ref& type : auth->FindPropertyValues("transport_security_type")) {
    if (type == "ssl") return true;
  }
  return false;
}

// Checks `identity` against the caller; OK on a plaintext connection.
absl::Status Check(const grpc::ServerContextBase& context, absl::string_view what,
                   std::initializer_list<absl::string_view> allowed) {
  if (!OverTls(context)) return absl::OkStatus();
  std::optional<std::string> identity = PeerIdentity(context);
  if (!identity.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, ": the caller's certificate names no identity (no common name)"));
  }
  if (std::find(allowed.begin(), allowed.end(), *identity) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(what, " is not allowed for identity '", *identity,
                                                  "' (allowed: ", absl::StrJoin(allowed, ", "),
                                                  ")"));
}

}  // namespace

std::optional<std::string> PeerIdentity(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return std::nullopt;
  std::vector<grpc::string_ref> names = auth->FindPropertyValues("x509_common_name");
  if (names.empty()) return std::nullopt;
  return std::string(names.front().data(), names.front().size());
}

absl::Status Authorize(const grpc::ServerContextBase& context, absl::string_view method) {
  for (const Rule& rule : kPolicy) {
    if (rule.method == method) return Check(context, method, rule.identities);
  }
  return absl::InternalError(absl::StrCat("no access rule for ", method));
}

absl::Status AuthorizeRole(const grpc::ServerContextBase& context, absl::string_view role) {
  for (absl::string_view member : kMembers) {
    if (member == role) {
      return Check(context, absl::StrCat("registering as ", role), {member});
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("no member role '", role, "'"));
}

}  // namespace dlrm::common
