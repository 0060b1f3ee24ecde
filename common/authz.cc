#include "common/authz.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

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
    {"Coordinator.GetClusterView", {"admin", "viewer", "ps", "worker"}},
    {"Coordinator.KvSet", {"worker"}},
    {"Coordinator.KvGet", {"worker"}},
    {"Coordinator.KvDelete", {"worker"}},
    {"Coordinator.KvAdd", {"worker"}},
    {"Coordinator.ReportProgress", {"worker"}},
    {"Jobs.SubmitJob", {"admin"}},
    {"Jobs.GetJob", {"admin", "viewer"}},
    {"Jobs.ListJobs", {"admin", "viewer"}},
    {"Jobs.CancelJob", {"admin"}},
    {"Jobs.CheckpointJob", {"admin"}},
    {"Jobs.WatchJob", {"admin", "viewer"}},
    {"ParameterServer.LoadJob", {"worker"}},
    {"ParameterServer.UnloadJob", {"worker"}},
    {"ParameterServer.Lookup", {"worker"}},
    {"ParameterServer.PushGradients", {"worker"}},
    {"ParameterServer.GetStats", {"worker", "admin"}},
    {"ParameterServer.ReadRows", {"worker"}},
    {"ParameterServer.WriteRows", {"worker"}},
    {"ParameterServer.Checkpoint", {"worker"}},
};

absl::Mutex tokens_mu(absl::kConstInit);
std::vector<BearerToken>* tokens ABSL_GUARDED_BY(tokens_mu) = nullptr;

// The identity of the bearer token the call carries, if it is one of the process's tokens.
std::optional<std::string> TokenIdentity(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) return std::nullopt;
  absl::MutexLock lock(&tokens_mu);
  if (tokens == nullptr) return std::nullopt;
  std::optional<std::string> found;
  for (const BearerToken& t : *tokens) {
    // Every token is compared, each in time independent of where it differs.
    if (t.token.size() == value.size() &&
        CRYPTO_memcmp(t.token.data(), value.data(), value.size()) == 0) {
      found = t.identity;
    }
  }
  return found;
}

// Checks `identity` against the caller; OK on a plaintext connection.
absl::Status Check(const grpc::ServerContextBase& context, absl::string_view what,
                   std::initializer_list<absl::string_view> allowed) {
  if (!OverTls(context)) return absl::OkStatus();
  std::optional<std::string> identity = PeerIdentity(context);
  if (!identity.has_value()) identity = TokenIdentity(context);
  if (!identity.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat(
        what, ": the caller has neither a certificate naming its identity nor a valid token"));
  }
  if (std::find(allowed.begin(), allowed.end(), *identity) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(what, " is not allowed for identity '", *identity,
                                                  "' (allowed: ", absl::StrJoin(allowed, ", "),
                                                  ")"));
}

}  // namespace

absl::StatusOr<std::vector<BearerToken>> LoadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("token file: cannot read '", path, "'"));
  std::vector<BearerToken> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    std::vector<absl::string_view> words = absl::StrSplit(text, ' ', absl::SkipWhitespace());
    const std::string where = absl::StrCat("token file ", path, " line ", number);
    if (words.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected IDENTITY TOKEN, got ", words.size(), " words"));
    }
    if (words[0] != "admin" && words[0] != "viewer") {
      // Not quoted: with the words swapped, it is the token.
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the first word is not admin or viewer (expected IDENTITY TOKEN)"));
    }
    if (words[1].size() < 16 || words[1].size() > 512) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a token of ", words[1].size(),
                                                     " characters; 16 to 512 are accepted"));
    }
    for (char c : words[1]) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the token has a character that is not printable ASCII"));
      }
    }
    out.push_back({std::string(words[0]), std::string(words[1])});
  }
  if (out.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": no tokens"));
  return out;
}

void SetBearerTokens(std::vector<BearerToken> new_tokens) {
  absl::MutexLock lock(&tokens_mu);
  delete tokens;
  tokens = new std::vector<BearerToken>(std::move(new_tokens));
}

bool OverTls(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return false;
  for (const grpc::string_ref& type : auth->FindPropertyValues("transport_security_type")) {
    if (type == "ssl") return true;
  }
  return false;
}

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
