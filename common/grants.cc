#include "common/grants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dlrm::common {
namespace {

// Hex of HMAC-SHA256(key, purpose "\n" subject).
std::string Mac(absl::string_view key, absl::string_view purpose, absl::string_view subject) {
  const std::string message = absl::StrCat(purpose, "\n", subject);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(length)));
}

bool SameKey(absl::string_view expected, absl::string_view given) {
  return expected.size() == given.size() &&
         CRYPTO_memcmp(expected.data(), given.data(), given.size()) == 0;
}

}  // namespace

absl::StatusOr<std::string> NewGrantSecret() {
  std::string secret(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                 static_cast<int>(secret.size())) != 1) {
    return absl::InternalError("no random bytes for the coordinator's grant secret");
  }
  return secret;
}

GrantKeys::GrantKeys(std::string secret) : secret_(std::move(secret)) {}

std::string GrantKeys::MemberKey(absl::string_view member_id) const {
  return Mac(secret_, "member", member_id);
}

bool GrantKeys::IsMemberKey(absl::string_view member_id, absl::string_view key) const {
  return SameKey(MemberKey(member_id), key);
}

std::string GrantKeys::PsGrantKey(absl::string_view ps_member_id) const {
  return Mac(secret_, "ps-grant-key", ps_member_id);
}

std::string JobAdminGrant(absl::string_view ps_grant_key, absl::string_view job_id) {
  return Mac(ps_grant_key, "job-admin", job_id);
}

bool IsJobAdminGrant(absl::string_view ps_grant_key, absl::string_view job_id,
                     absl::string_view grant) {
  return !ps_grant_key.empty() && SameKey(JobAdminGrant(ps_grant_key, job_id), grant);
}

std::string JobMemberGrant(absl::string_view ps_grant_key, absl::string_view job_id,
                           int64_t job_epoch) {
  return Mac(ps_grant_key, "job-member", absl::StrCat(job_id, "\n", job_epoch));
}

bool IsJobMemberGrant(absl::string_view ps_grant_key, absl::string_view job_id, int64_t job_epoch,
                      absl::string_view grant) {
  return !ps_grant_key.empty() && SameKey(JobMemberGrant(ps_grant_key, job_id, job_epoch), grant);
}

std::string JobLoadGrant(absl::string_view ps_grant_key, absl::string_view load_request) {
  return Mac(ps_grant_key, "job-load", load_request);
}

bool IsJobLoadGrant(absl::string_view ps_grant_key, absl::string_view load_request,
                    absl::string_view grant) {
  return !ps_grant_key.empty() && SameKey(JobLoadGrant(ps_grant_key, load_request), grant);
}

}  // namespace dlrm::common
