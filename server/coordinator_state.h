// The coordinator's state machine, free of gRPC: membership with heartbeat leases and a cluster
// epoch, parameter-server shard slots, worker ranks, and the job state machine
//
//   PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED,   PENDING -> CANCELLED
//   RUNNING -> RECOVERING -> RUNNING | FAILED | CANCELLED
//
// Any other transition is FAILED_PRECONDITION naming both states.
//
// Rules:
//  - Every membership or assignment change bumps the epoch.
//  - A PS takes the lowest free shard slot when it registers and keeps it while it holds its
//    lease. Slots may have holes (a replacement that registered while the PS it replaces still
//    held its lease took a higher slot); the next PS to register fills the lowest one.
//  - A job's shard i is the i-th PS it was given (ps_member_ids), whatever slot that PS holds;
//    a row's shard is common::ShardOf(table, id, the job's PS count).
//  - A PENDING job starts (FIFO) when `requested_workers` idle workers are alive and P PS are
//    alive, P = requested_ps or, when 0, every PS alive (at least one); it takes the P in the
//    lowest slots. Its workers get ranks in registration order and learn the job through
//    Heartbeat.
//  - Rank 0's `done` report ends the job SUCCEEDED with its final metrics; a `failed` report
//    ends it FAILED, unless it says a peer was unreachable (peer_unreachable).
//  - Recovery: a member of a RUNNING job whose lease expires or who leaves, or a peer_unreachable
//    report, moves the job to RECOVERING (recoveries + 1, a JobRecovery entry with the reason)
//    and frees its workers; after max_recoveries the next loss FAILS it with the history. A
//    RECOVERING job starts again before any PENDING one, on the same numbers of workers and PS,
//    choosing only members that registered or heartbeated after the loss (so a dead member whose
//    lease has not run out yet is not picked again); PS are taken lowest slot first. It starts
//    at a new job_epoch with JobAssignment.recovery > 0: members roll back to the last checkpoint.
//    Reports carrying an older job_epoch are refused.
//  - After a restart (state loaded from the store) a member is given to a job only once it has
//    heartbeated or registered: one that died while the coordinator was down is never picked.
//
// Every change is written to the CoordinatorStore (when given) before the call returns.
// Time is passed in (`now`) so tests control it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "common/metrics.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"
#include "server/coordinator_store.h"

namespace dlrm::server {

struct CoordinatorStateOptions {
  // A dead member is noticed within lease_ttl (plus the expiry check's period); members
  // heartbeat every lease_ttl / 8, so a process stalled for 10 s keeps its lease.
  absl::Duration lease_ttl = absl::Seconds(14);
  // Leases count only time the coordinator was serving: when two lease sweeps (ExpireLeases)
  // are further apart than this, the coordinator was stalled (stopped, suspended, starved, its
  // clock jumped), and every live member gets a fresh lease of lease_ttl from the late sweep
  // instead of being expired for heartbeats the coordinator could not hear. 0: lease_ttl / 2.
  absl::Duration stall_after = absl::ZeroDuration();
  // Expired or departed members kept for the cluster view before they are forgotten.
  int max_dead_members = 256;
  // Largest worker or PS count a job may ask for.
  int max_job_members = 1024;
  // Members alive at once; a Register past it is RESOURCE_EXHAUSTED.
  int64_t max_live_members = common::kMaxLiveMembers;
};

// "PENDING", "RUNNING", ...
std::string JobStateName(dlrm::v1::JobState state);
// "PS", "WORKER", ...
std::string RoleName(dlrm::v1::Role role);
bool IsTerminal(dlrm::v1::JobState state);
// "worker-5 (name worker-1)": the member's id, and its registered name when it has another.
std::string MemberLabel(const dlrm::v1::Member& member);
// A Register's role is PS or WORKER, and a PS's address is HOST:PORT; else INVALID_ARGUMENT.
absl::Status CheckRegisterRole(const dlrm::v1::RegisterRequest& request);
// OK when `from -> to` is a legal transition; FAILED_PRECONDITION naming the job and both
// states otherwise.
absl::Status CheckJobTransition(const std::string& job_id, dlrm::v1::JobState from,
                                dlrm::v1::JobState to);

class CoordinatorState {
 public:
  // Called with a snapshot after every change of a job, with no lock held. Must not block.
  using JobListener = std::function<void(const dlrm::v1::Job&)>;

  // `store` (may be null: nothing persisted) and `metrics` (may be null) are not owned and must
  // outlive the state. With a store, the state it holds is loaded back; members that were alive
  // get a fresh lease from `now`, but are given to no job before their first heartbeat.
  static absl::StatusOr<std::unique_ptr<CoordinatorState>> Create(
      const CoordinatorStateOptions& options, CoordinatorStore* store,
      common::MetricsRegistry* metrics, absl::Time now);

  ~CoordinatorState();
  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  // Set once before serving.
  void SetJobListener(JobListener listener);

  // --- membership ---
  absl::StatusOr<dlrm::v1::RegisterResponse> Register(const dlrm::v1::RegisterRequest& request,
                                                      absl::Time now);
  // NOT_FOUND for an unknown member, FAILED_PRECONDITION for one whose lease expired or who
  // left; either way the member must register again.
  absl::StatusOr<dlrm::v1::HeartbeatResponse> Heartbeat(const std::string& member_id,
                                                        absl::Time now);
  absl::StatusOr<int64_t> Leave(const std::string& member_id, absl::Time now);
  dlrm::v1::GetClusterViewResponse ClusterView() const;
  // The lease sweep, called periodically: expires every lease that ran out at `now` and
  // returns how many. A sweep more than stall_after after the previous one expires none and
  // renews every live lease to `now` + lease_ttl (see CoordinatorStateOptions::stall_after).
  int ExpireLeases(absl::Time now);
  int64_t epoch() const;

  // --- jobs ---
  absl::StatusOr<dlrm::v1::Job> Submit(const dlrm::v1::SubmitJobRequest& request, absl::Time now);
  absl::StatusOr<dlrm::v1::Job> GetJob(const std::string& job_id) const;
  // Oldest first; UNSPECIFIED lists all (one page of ListJobsPage without limits).
  std::vector<dlrm::v1::Job> ListJobs(dlrm::v1::JobState filter) const;
  // One page of that list (ListJobsRequest): the jobs after `page_token` ("" from the first;
  // else a next_page_token this gave, INVALID_ARGUMENT otherwise), at most `max_jobs` of them
  // and no more than `max_bytes` in all unless a single job is larger; *next_page_token is ""
  // when no job is left after the page.
  absl::StatusOr<std::vector<dlrm::v1::Job>> ListJobsPage(dlrm::v1::JobState filter,
                                                          const std::string& page_token,
                                                          int64_t max_jobs, int64_t max_bytes,
                                                          std::string* next_page_token) const;
  absl::StatusOr<dlrm::v1::Job> Cancel(const std::string& job_id, const std::string& reason,
                                       absl::Time now);
  // Counts a request for a checkpoint of a RUNNING job (FAILED_PRECONDITION naming the state
  // otherwise, or when its spec has no checkpoint.dir); its workers learn it by heartbeat.
  absl::StatusOr<dlrm::v1::Job> RequestCheckpoint(const std::string& job_id, absl::Time now);
  // Returns the job's state after the report.
  absl::StatusOr<dlrm::v1::JobState> ReportProgress(const dlrm::v1::ReportProgressRequest& request,
                                                    absl::Time now);

 private:
  struct MemberEntry {
    dlrm::v1::Member info;
    absl::Time lease_deadline;
  };
  // Changes made under one lock hold: persisted together, then announced.
  struct Changes {
    std::map<std::string, dlrm::v1::Job> jobs;
    std::map<std::string, dlrm::v1::Member> members;
    std::vector<std::string> deleted_member_ids;
    bool counters = false;
  };
  class Metrics;

  CoordinatorState(const CoordinatorStateOptions& options, CoordinatorStore* store,
                   common::MetricsRegistry* metrics);

  // All REQUIRE mu_ held.
  void Restore(const CoordinatorSnapshot& snapshot, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BumpEpoch(Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchJob(dlrm::v1::Job* job, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchMember(const dlrm::v1::Member& member, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist(const Changes& changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's latest progress and per-rank samples from a (non-failure) report.
  void UpdateProgress(const dlrm::v1::ReportProgressRequest& request, absl::Time now,
                      dlrm::v1::Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountRecovery() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank's samples from a report, and the job's total over its ranks.
  void CountRankSamples(const dlrm::v1::ReportProgressRequest& request, dlrm::v1::Job* job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AlivePsCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How messages name a member: its id, and the name it registered with (its process's --name)
  // when that differs, e.g. "worker-5 (name worker-1)". Ids unknown here are given as they are.
  std::string MemberLabel(const std::string& member_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same inside parentheses: "worker-5, name worker-1".
  std::string MemberLabelInParens(const std::string& member_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MemberLabels(const google::protobuf::RepeatedPtrField<std::string>& member_ids) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the RECOVERING jobs, then the PENDING ones, in submission order while they can; the
  // first that cannot holds back the rest, and each of those says why in its message.
  void TryStartJobs(absl::Time now, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TryStart(dlrm::v1::Job* job, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `m` may take a job: alive, heard from after `alive_since_ms` (a RECOVERING job takes
  // only members that showed they are alive since its loss) and, when loaded from the store, since
  // the restart (one that died while the coordinator was down still holds the lease the restart
  // gave it). A member that a process of the same role and name replaced is no longer alive.
  bool Usable(const dlrm::v1::Member& m, int64_t alive_since_ms) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // -1, or for a RECOVERING job the time of its loss.
  int64_t AliveSinceMs(const dlrm::v1::Job& job) const;
  // The parameter servers the job starts with: a recovering job as many as it had, a new one
  // requested_ps, or every PS alive.
  int PsCountFor(const dlrm::v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a job that cannot start waits for, "waiting for 2 idle workers and 1 parameter server",
  // and what the cluster has for it, "1 idle worker (worker-3), 1 busy worker, 1 parameter server
  // (ps-0)" (the same for every job with the same AliveSinceMs).
  std::string Needs(const dlrm::v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ClusterHas(const dlrm::v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the message of a job that waits (a RECOVERING one keeps its recovery's words first), and
  // touches the job only when the message changed.
  void SetWaiting(dlrm::v1::Job* job, const std::string& why, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FinishJob(dlrm::v1::Job* job, dlrm::v1::JobState to, const std::string& message,
                         absl::Time now, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Heartbeat's work under mu_: renews the lease, restarts RECOVERING jobs that can run.
  absl::StatusOr<dlrm::v1::HeartbeatResponse> HeartbeatAndRestart(const std::string& member_id,
                                                                  absl::Time now, Changes* changes)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration HeartbeatInterval() const { return options_.lease_ttl / 8; }
  // RUNNING -> RECOVERING (or FAILED when no recovery is left), freeing the job's workers.
  void BeginRecovery(dlrm::v1::Job* job, const std::string& reason, absl::Time now,
                     Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropMember(MemberEntry* entry, dlrm::v1::MemberState state, const std::string& why,
                  absl::Time now, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneDeadMembers(Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  dlrm::v1::JobAssignment AssignmentOf(const dlrm::v1::Job& job) const;
  absl::StatusOr<MemberEntry*> FindLiveMember(const std::string& member_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists `changes` and refreshes the gauges.
  absl::Status Finalize(const Changes& changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Announces changed jobs to the listener. REQUIRES: mu_ not held.
  void Notify(const Changes& changes) ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoint folder of job `id` (its spec's checkpoint.dir, see CheckpointFolder; "" for
  // none), parsed from its spec once.
  const std::string& CheckpointFolderLocked(const std::string& id, const dlrm::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorStateOptions options_;
  CoordinatorStore* const store_;
  std::unique_ptr<Metrics> metrics_;
  JobListener listener_;

  mutable absl::Mutex mu_;
  std::map<std::string, MemberEntry> members_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ps_slots_ ABSL_GUARDED_BY(mu_);  // member id per shard, "" = free
  std::map<std::string, dlrm::v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  // CheckpointFolderLocked's answers by job id (a job's spec never changes, nor is a job removed).
  std::map<std::string, std::string> checkpoint_folders_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_member_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_job_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // The last ExpireLeases; InfinitePast before the first (a state loaded from the store gave
  // every member a fresh lease already).
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Members loaded from the store as alive that have not heartbeated since: one may have died
  // while the coordinator was down (its fresh lease says nothing), so none is given to a job
  // until it is heard from.
  std::set<std::string> unheard_since_restore_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlrm::server
