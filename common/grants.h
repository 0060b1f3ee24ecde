// Grants: keys the coordinator hands out so that processes sharing one certificate identity are
// still told apart (common/authz.h decides what an identity may call; a grant narrows it to one
// member or one job).
//
// Every worker of a deployment holds the same "worker" certificate, so a certificate alone
// cannot say which rank a caller was given. The coordinator keeps one random secret (in its
// store, so it outlives a restart) and derives from it, with HMAC-SHA256:
//
//   member key    MemberKey(id): answered by Register to the member that registered as `id`.
//                 Heartbeat, Leave and ReportProgress carry it; the coordinator refuses a call
//                 for a member whose key it lacks, so a worker cannot heartbeat, leave or report
//                 progress for another member's rank.
//   PS grant key  PsGrantKey(id): answered by Register to the parameter server that registered
//                 as `id`, and to no one else. Each server has its own: whoever holds the ps
//                 certificate and registers a server learns that server's key only, and can make
//                 grants for no other server.
//   job grant     JobAdminGrant(PsGrantKey(id), job): given in the heartbeat answer to rank 0 of
//                 the job only, one for each of the job's servers (in shard order). A parameter
//                 server accepts its admin methods (WriteRows, Checkpoint, UnloadJob) for a job
//                 only with that job's grant in the call's metadata (kJobGrantMetadata), which it
//                 checks against the key it got at registration: the coordinator's authority,
//                 delegated to the one worker it chose for the job.
//   member grant  JobMemberGrant(PsGrantKey(id), job, job epoch): given in the heartbeat answer to
//                 every rank of the job, for the epoch it trains at, one for each of the job's
//                 servers. A parameter server accepts
//                 LoadJob, Lookup, PushGradients and ReadRows of a job at an epoch only with that
//                 grant in metadata kMemberGrantMetadata: a worker certificate alone can neither
//                 load a job the coordinator does not run, nor move a job to an epoch it has not
//                 reached, nor read or train another job's tables.
//   load grant    JobLoadGrant(PsGrantKey(id), request): given in the heartbeat answer to every
//                 rank of the job, one for each of its servers, over the LoadJob request that
//                 server is to get (its job, epoch, shard, tables, optimizer, seed, staleness
//                 and workers: server/ps_load_request.h LoadJobRequestBytes, built from the job
//                 spec the coordinator holds). A parameter server loads a job only with the
//                 grant of the very request it got, in metadata kLoadGrantMetadata: a rank
//                 cannot load the job with tables or parameters of its own choosing.
//
// All comparisons take constant time. Keys are lowercase hex.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlrm::common {

// gRPC metadata that carries a job grant to a parameter server.
inline constexpr char kJobGrantMetadata[] = "x-dlrm-job-grant";
// gRPC metadata that carries a member grant to a parameter server.
inline constexpr char kMemberGrantMetadata[] = "x-dlrm-member-grant";
// gRPC metadata that carries a load grant to a parameter server (LoadJob only).
inline constexpr char kLoadGrantMetadata[] = "x-dlrm-load-grant";

// 32 random bytes from the operating system's generator; INTERNAL when it has none.
absl::StatusOr<std::string> NewGrantSecret();

class GrantKeys {
 public:
  // `secret`: bytes from NewGrantSecret (at least 16).
  explicit GrantKeys(std::string secret);

  std::string MemberKey(absl::string_view member_id) const;
  bool IsMemberKey(absl::string_view member_id, absl::string_view key) const;
  // The key of the parameter server that registered as `ps_member_id`.
  std::string PsGrantKey(absl::string_view ps_member_id) const;

 private:
  std::string secret_;
};

// The grant for the admin methods of `job_id` on parameter servers holding `ps_grant_key`.
std::string JobAdminGrant(absl::string_view ps_grant_key, absl::string_view job_id);
bool IsJobAdminGrant(absl::string_view ps_grant_key, absl::string_view job_id,
                     absl::string_view grant);
// The grant of every rank of `job_id` at `job_epoch` for its data calls to parameter servers
// holding `ps_grant_key`.
std::string JobMemberGrant(absl::string_view ps_grant_key, absl::string_view job_id,
                           int64_t job_epoch);
bool IsJobMemberGrant(absl::string_view ps_grant_key, absl::string_view job_id, int64_t job_epoch,
                      absl::string_view grant);

// The grant of a LoadJob whose request, as server/ps_load_request.h's LoadJobRequestBytes
// serializes it, is `load_request`, to the server holding `ps_grant_key`.
std::string JobLoadGrant(absl::string_view ps_grant_key, absl::string_view load_request);
bool IsJobLoadGrant(absl::string_view ps_grant_key, absl::string_view load_request,
                    absl::string_view grant);

}  // namespace dlrm::common
