// Membership, leases, shard slots, persistence and metrics of CoordinatorState. The job API is
// in coordinator_jobs.cc.
#include "server/coordinator_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::server {

using dlrm::v1::Job;
using dlrm::v1::Member;

std::string JobStateName(dlrm::v1::JobState state) {
  std::string name = dlrm::v1::JobState_Name(state);
  if (absl::StartsWith(name, "JOB_STATE_")) name = name.substr(10);
  return name.empty() ? absl::StrCat("JobState(", static_cast<int>(state), ")") : name;
}

std::string RoleName(dlrm::v1::Role role) {
  std::string name = dlrm::v1::Role_Name(role);
  if (absl::StartsWith(name, "ROLE_")) name = name.substr(5);
  return name.empty() ? absl::StrCat("Role(", static_cast<int>(role), ")") : name;
}

bool IsTerminal(dlrm::v1::JobState state) {
  return state == dlrm::v1::JOB_STATE_SUCCEEDED || state == dlrm::v1::JOB_STATE_FAILED ||
         state == dlrm::v1::JOB_STATE_CANCELLED;
}

std::string MemberLabel(const Member& member) {
  if (member.name().empty() || member.name() == member.member_id()) return member.member_id();
  return absl::StrCat(member.member_id(), " (name ", member.name(), ")");
}

absl::Status CheckJobTransition(const std::string& job_id, dlrm::v1::JobState from,
                                dlrm::v1::JobState to) {
  bool legal = false;
  switch (from) {
    case dlrm::v1::JOB_STATE_PENDING:
      legal = to == dlrm::v1::JOB_STATE_RUNNING || to == dlrm::v1::JOB_STATE_CANCELLED;
      break;
    case dlrm::v1::JOB_STATE_RUNNING:
      legal = IsTerminal(to) || to == dlrm::v1::JOB_STATE_RECOVERING;
      break;
    case dlrm::v1::JOB_STATE_RECOVERING:
      legal = to == dlrm::v1::JOB_STATE_RUNNING || to == dlrm::v1::JOB_STATE_FAILED ||
              to == dlrm::v1::JOB_STATE_CANCELLED;
      break;
    default:
      legal = false;
  }
  if (legal) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("job ", job_id, ": illegal transition ",
                                                    JobStateName(from), " -> ", JobStateName(to)));
}

// Gauges and counters of the coordinator (no ids in labels).
class CoordinatorState::Metrics {
 public:
  explicit Metrics(common::MetricsRegistry* registry) {
    for (auto role : {dlrm::v1::ROLE_PS, dlrm::v1::ROLE_WORKER}) {
      std::string label = RoleName(role);
      for (char& c : label) c = static_cast<char>(std::tolower(c));
      members[role] =
          &registry->Gauge("members", "Members holding a lease, by role.", {{"role", label}});
    }
    for (int s = dlrm::v1::JOB_STATE_PENDING; s <= dlrm::v1::JOB_STATE_RECOVERING; ++s) {
      std::string label = JobStateName(static_cast<dlrm::v1::JobState>(s));
      for (char& c : label) c = static_cast<char>(std::tolower(c));
      jobs[s] =
          &registry->Gauge("jobs", "Jobs known to the coordinator, by state.", {{"state", label}});
    }
    epoch = &registry->Gauge("cluster_epoch", "Cluster epoch (bumped on every membership change).");
    expired = &registry->Counter("lease_expirations_total", "Member leases that expired.");
    stalls = &registry->Counter(
        "lease_sweep_stalls_total",
        "Lease sweeps that came later than stall_after after the previous one (the coordinator "
        "was stalled): every live lease was renewed instead of any being expired.");
    recoveries = &registry->Counter("job_recoveries_total",
                                    "Times a running job lost a member and went RECOVERING.");
  }
  std::map<int, prometheus::Gauge*> members;
  std::map<int, prometheus::Gauge*> jobs;
  prometheus::Gauge* epoch;
  prometheus::Counter* expired;
  prometheus::Counter* stalls;
  prometheus::Counter* recoveries;
};

CoordinatorState::CoordinatorState(const CoordinatorStateOptions& options, CoordinatorStore* store,
                                   common::MetricsRegistry* metrics)
    : options_(options),
      store_(store),
      metrics_(metrics != nullptr ? std::make_unique<Metrics>(metrics) : nullptr) {}

CoordinatorState::~CoordinatorState() = default;

absl::StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Create(
    const CoordinatorStateOptions& options, CoordinatorStore* store,
    common::MetricsRegistry* metrics, absl::Time now) {
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl ", absl::FormatDuration(options.lease_ttl), " must be > 0"));
  }
  if (options.stall_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stall_after ", absl::FormatDuration(options.stall_after), " must be >= 0"));
  }
  CoordinatorStateOptions resolved = options;
  if (resolved.stall_after == absl::ZeroDuration()) resolved.stall_after = options.lease_ttl / 2;
  std::unique_ptr<CoordinatorState> state(new CoordinatorState(resolved, store, metrics));
  if (store != nullptr) {
    DLRM_ASSIGN_OR_RETURN(CoordinatorSnapshot snapshot, store->Load());
    absl::MutexLock lock(&state->mu_);
    state->Restore(snapshot, now);
  }
  absl::MutexLock lock(&state->mu_);
  state->UpdateGauges();
  return state;
}

void CoordinatorState::Restore(const CoordinatorSnapshot& snapshot, absl::Time now) {
  auto counter = [&](const char* name, int64_t fallback) {
    auto it = snapshot.counters.find(name);
    return it == snapshot.counters.end() ? fallback : it->second;
  };
  epoch_ = counter("epoch", 0);
  next_member_seq_ = counter("next_member_seq", 1);
  next_job_seq_ = counter("next_job_seq", 1);
  for (const Job& job : snapshot.jobs) jobs_[job.job_id()] = job;
  for (const Member& m : snapshot.members) {
    MemberEntry entry{m, now + options_.lease_ttl};
    if (m.state() == dlrm::v1::MEMBER_STATE_ALIVE) unheard_since_restore_.insert(m.member_id());
    if (m.state() == dlrm::v1::MEMBER_STATE_ALIVE && m.role() == dlrm::v1::ROLE_PS &&
        m.shard_index() >= 0) {
      if (ps_slots_.size() <= static_cast<size_t>(m.shard_index())) {
        ps_slots_.resize(m.shard_index() + 1);
      }
      ps_slots_[m.shard_index()] = m.member_id();
    }
    // A worker pointing at a job that is no longer running is idle.
    if (!m.job_id().empty()) {
      auto job = jobs_.find(m.job_id());
      if (job == jobs_.end() || job->second.state() != dlrm::v1::JOB_STATE_RUNNING) {
        entry.info.clear_job_id();
        entry.info.set_rank(-1);
      }
    }
    members_[m.member_id()] = std::move(entry);
  }
  DLRM_LOG(INFO) << "coordinator state restored: " << jobs_.size() << " jobs, " << members_.size()
                 << " members, epoch " << epoch_;
}

void CoordinatorState::SetJobListener(JobListener listener) { listener_ = std::move(listener); }

int64_t CoordinatorState::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void CoordinatorState::BumpEpoch(Changes* changes) {
  ++epoch_;
  changes->counters = true;
}

void CoordinatorState::TouchJob(Job* job, Changes* changes) {
  job->set_version(job->version() + 1);
  changes->jobs[job->job_id()] = *job;
}

void CoordinatorState::TouchMember(const Member& member, Changes* changes) {
  changes->members[member.member_id()] = member;
}

absl::Status CoordinatorState::Finalize(const Changes& changes) {
  UpdateGauges();
  return Persist(changes);
}

absl::Status CoordinatorState::Persist(const Changes& changes) {
  if (store_ == nullptr) return absl::OkStatus();
  CoordinatorWrite write;
  for (const auto& [id, job] : changes.jobs) write.jobs.push_back(job);
  for (const auto& [id, member] : changes.members) write.members.push_back(member);
  write.deleted_member_ids = changes.deleted_member_ids;
  if (changes.counters || !changes.jobs.empty() || !changes.members.empty()) {
    write.counters = {
        {"epoch", epoch_}, {"next_member_seq", next_member_seq_}, {"next_job_seq", next_job_seq_}};
  }
  absl::Status status = store_->Write(write);
  if (!status.ok()) DLRM_LOG(ERROR) << status;
  return status;
}

void CoordinatorState::Notify(const Changes& changes) {
  if (!listener_) return;
  for (const auto& [id, job] : changes.jobs) listener_(job);
}

void CoordinatorState::UpdateGauges() {
  if (metrics_ == nullptr) return;
  std::map<int, int> members;
  for (const auto& [id, e] : members_) {
    if (e.info.state() == dlrm::v1::MEMBER_STATE_ALIVE) ++members[e.info.role()];
  }
  for (auto& [role, gauge] : metrics_->members) gauge->Set(members[role]);
  std::map<int, int> jobs;
  for (const auto& [id, job] : jobs_) ++jobs[job.state()];
  for (auto& [state, gauge] : metrics_->jobs) gauge->Set(jobs[state]);
  metrics_->epoch->Set(static_cast<double>(epoch_));
}

void CoordinatorState::CountRecovery() {
  if (metrics_ != nullptr) metrics_->recoveries->Increment();
}

int CoordinatorState::AlivePsCount() const {
  int n = 0;
  for (const std::string& id : ps_slots_) n += id.empty() ? 0 : 1;
  return n;
}

std::string CoordinatorState::MemberLabel(const std::string& member_id) const {
  auto it = members_.find(member_id);
  return it == members_.end() ? member_id : server::MemberLabel(it->second.info);
}

std::string CoordinatorState::MemberLabelInParens(const std::string& member_id) const {
  auto it = members_.find(member_id);
  if (it == members_.end()) return member_id;
  const Member& m = it->second.info;
  if (m.name().empty() || m.name() == member_id) return member_id;
  return absl::StrCat(member_id, ", name ", m.name());
}

std::string CoordinatorState::MemberLabels(
    const google::protobuf::RepeatedPtrField<std::string>& member_ids) const {
  std::string labels;
  for (const std::string& id : member_ids) {
    absl::StrAppend(&labels, labels.empty() ? "" : ", ", MemberLabel(id));
  }
  return labels;
}

absl::StatusOr<CoordinatorState::MemberEntry*> CoordinatorState::FindLiveMember(
    const std::string& member_id) {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id is empty");
  auto it = members_.find(member_id);
  if (it == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("member '", member_id, "' is not registered; register again"));
  }
  const Member& m = it->second.info;
  if (m.state() != dlrm::v1::MEMBER_STATE_ALIVE && !m.replaced_by().empty()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "member '", member_id, "' (name ", m.name(), ") was replaced by ", m.replaced_by(),
        ", which registered with the same name: this process is taken for dead and must stop"));
  }
  if (m.state() != dlrm::v1::MEMBER_STATE_ALIVE) {
    const bool named = !m.name().empty() && m.name() != member_id;
    return absl::FailedPreconditionError(absl::StrCat(
        "member '", member_id, "'", named ? absl::StrCat(" (name ", m.name(), ")") : "", " is ",
        m.state() == dlrm::v1::MEMBER_STATE_LEFT ? "gone (left)" : "expired", "; register again"));
  }
  return &it->second;
}

absl::Status CheckRegisterRole(const dlrm::v1::RegisterRequest& request) {
  if (request.role() != dlrm::v1::ROLE_PS && request.role() != dlrm::v1::ROLE_WORKER) {
    return absl::InvalidArgumentError(
        absl::StrCat("role ", RoleName(request.role()), " cannot register; expected PS or WORKER"));
  }
  if (request.role() != dlrm::v1::ROLE_PS) return absl::OkStatus();
  if (request.address().empty()) {
    return absl::InvalidArgumentError("a PS must register with the address it serves on");
  }
  // Every job's workers dial it: one that is no HOST:PORT would fail each job that it joins.
  return common::CheckHostPort("a PS's address", request.address(),
                               {.port_zero = false, .dial = false});
}

absl::StatusOr<dlrm::v1::RegisterResponse> CoordinatorState::Register(
    const dlrm::v1::RegisterRequest& request, absl::Time now) {
  DLRM_RETURN_IF_ERROR(CheckRegisterRole(request));
  Changes changes;
  dlrm::v1::RegisterResponse response;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    // A process that replaces a live member of its name and role takes that member's place.
    int64_t alive = 0;
    for (const auto& [id, m] : members_) {
      const bool replaced = !request.name().empty() && m.info.role() == request.role() &&
                            m.info.name() == request.name();
      if (m.info.state() == dlrm::v1::MEMBER_STATE_ALIVE && !replaced) ++alive;
    }
    if (alive >= options_.max_live_members) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Register: ", alive,
          " members are alive, the most this coordinator holds "
          "(kMaxLiveMembers in common/limits.h); stop one, or let a dead one's lease run out"));
    }
    const int64_t seq = next_member_seq_++;
    Member info;
    info.set_member_id(absl::StrCat(request.role() == dlrm::v1::ROLE_PS ? "ps-" : "worker-", seq));
    // A live member of this name and role is an earlier process of the same member (restarted in
    // place: a pod, a child of `dlrm local`): it is dead, and its jobs recover now rather than
    // when its lease runs out.
    if (!request.name().empty()) {
      for (auto& [id, old] : members_) {
        if (old.info.state() == dlrm::v1::MEMBER_STATE_ALIVE && old.info.role() == request.role() &&
            old.info.name() == request.name()) {
          old.info.set_replaced_by(info.member_id());
          DropMember(&old, dlrm::v1::MEMBER_STATE_EXPIRED,
                     absl::StrCat("was replaced by ", info.member_id(),
                                  ", a new process registered with its name"),
                     now, &changes);
        }
      }
    }
    info.set_role(request.role());
    info.set_address(request.address());
    info.set_metrics_address(request.metrics_address());
    *info.mutable_capabilities() = request.capabilities();
    info.set_name(request.name());
    info.set_state(dlrm::v1::MEMBER_STATE_ALIVE);
    info.set_registered_ms(absl::ToUnixMillis(now));
    info.set_last_heartbeat_ms(absl::ToUnixMillis(now));
    info.set_sequence(seq);
    info.set_rank(-1);
    info.set_shard_index(-1);
    if (request.role() == dlrm::v1::ROLE_PS) {
      size_t slot = 0;
      while (slot < ps_slots_.size() && !ps_slots_[slot].empty()) ++slot;
      if (slot == ps_slots_.size()) ps_slots_.emplace_back();
      ps_slots_[slot] = info.member_id();
      info.set_shard_index(static_cast<int>(slot));
    }
    members_[info.member_id()] = MemberEntry{info, now + options_.lease_ttl};
    TouchMember(info, &changes);
    BumpEpoch(&changes);
    TryStartJobs(now, &changes);
    response.set_member_id(info.member_id());
    response.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(HeartbeatInterval()));
    response.set_epoch(epoch_);
    DLRM_LOG(INFO) << "registered " << server::MemberLabel(info) << " at '" << info.address()
                   << "', epoch " << epoch_;
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return response;
}

dlrm::v1::JobAssignment CoordinatorState::AssignmentOf(const Job& job) const {
  dlrm::v1::JobAssignment a;
  a.set_job_id(job.job_id());
  a.set_job_spec_yaml(job.spec_yaml());
  a.set_world_size(job.worker_ids_size());
  *a.mutable_ps_addresses() = job.ps_addresses();
  *a.mutable_ps_member_ids() = job.ps_member_ids();
  a.set_job_epoch(job.job_epoch());
  a.set_recovery(job.recoveries());
  a.set_checkpoint_requests(job.checkpoint_requests());
  return a;
}

absl::StatusOr<dlrm::v1::HeartbeatResponse> CoordinatorState::Heartbeat(
    const std::string& member_id, absl::Time now) {
  Changes changes;
  absl::StatusOr<dlrm::v1::HeartbeatResponse> response =
      HeartbeatAndRestart(member_id, now, &changes);
  Notify(changes);
  return response;
}

absl::StatusOr<dlrm::v1::HeartbeatResponse> CoordinatorState::HeartbeatAndRestart(
    const std::string& member_id, absl::Time now, Changes* changes) {
  absl::MutexLock lock(&mu_);
  DLRM_ASSIGN_OR_RETURN(MemberEntry * entry, FindLiveMember(member_id));
  entry->lease_deadline = now + options_.lease_ttl;
  entry->info.set_last_heartbeat_ms(absl::ToUnixMillis(now));
  // A member loaded from the store may now take a job: a pending one may have waited for it.
  const bool first_since_restore = unheard_since_restore_.erase(member_id) > 0;
  // A recovering job runs again once enough members have shown they are alive since the loss.
  const bool recovering = std::any_of(jobs_.begin(), jobs_.end(), [](const auto& j) {
    return j.second.state() == dlrm::v1::JOB_STATE_RECOVERING;
  });
  if (recovering || first_since_restore) {
    TryStartJobs(now, changes);
    if (!changes->jobs.empty()) DLRM_RETURN_IF_ERROR(Finalize(*changes));
  }
  dlrm::v1::HeartbeatResponse response;
  response.set_epoch(epoch_);
  response.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  const Member& info = entry->info;
  if (info.role() == dlrm::v1::ROLE_PS) {
    dlrm::v1::PsAssignment* ps = response.mutable_ps();
    ps->set_shard_index(info.shard_index());
    ps->set_shard_count(static_cast<int>(ps_slots_.size()));
    for (const auto& [id, job] : jobs_) {
      if (job.state() != dlrm::v1::JOB_STATE_RUNNING) continue;
      if (std::find(job.ps_member_ids().begin(), job.ps_member_ids().end(), member_id) !=
          job.ps_member_ids().end()) {
        *ps->add_jobs() = AssignmentOf(job);
      }
    }
  } else if (!info.job_id().empty()) {
    auto job = jobs_.find(info.job_id());
    if (job != jobs_.end() && job->second.state() == dlrm::v1::JOB_STATE_RUNNING) {
      response.mutable_worker()->set_rank(info.rank());
      *response.mutable_worker()->mutable_job() = AssignmentOf(job->second);
    }
  }
  return response;
}

void CoordinatorState::DropMember(MemberEntry* entry, dlrm::v1::MemberState state,
                                  const std::string& why, absl::Time now, Changes* changes) {
  Member& info = entry->info;
  info.set_state(state);
  if (info.role() == dlrm::v1::ROLE_PS && info.shard_index() >= 0 &&
      static_cast<size_t>(info.shard_index()) < ps_slots_.size() &&
      ps_slots_[info.shard_index()] == info.member_id()) {
    ps_slots_[info.shard_index()].clear();
    while (!ps_slots_.empty() && ps_slots_.back().empty()) ps_slots_.pop_back();
  }
  BumpEpoch(changes);
  // A job that loses a member recovers (or fails when it has no recoveries left).
  for (auto& [id, job] : jobs_) {
    if (job.state() != dlrm::v1::JOB_STATE_RUNNING) continue;
    const auto& workers = job.worker_ids();
    const auto& ps = job.ps_member_ids();
    const auto w = std::find(workers.begin(), workers.end(), info.member_id());
    const bool in_ps = std::find(ps.begin(), ps.end(), info.member_id()) != ps.end();
    if (w == workers.end() && !in_ps) continue;
    std::string what = absl::StrCat("member ", info.member_id(), " (");
    if (!info.name().empty() && info.name() != info.member_id()) {
      absl::StrAppend(&what, "name ", info.name(), "; ");
    }
    absl::StrAppend(&what, RoleName(info.role()));
    if (w != workers.end()) absl::StrAppend(&what, " rank ", w - workers.begin());
    if (in_ps) absl::StrAppend(&what, " shard ", info.shard_index());
    if (!info.address().empty()) absl::StrAppend(&what, " at ", info.address());
    absl::StrAppend(&what, ") ", why);
    BeginRecovery(&job, what, now, changes);
  }
  info.clear_job_id();
  info.set_rank(-1);
  TouchMember(info, changes);
  DLRM_LOG(WARNING) << "member " << server::MemberLabel(info) << " " << why << "; epoch " << epoch_;
}

void CoordinatorState::PruneDeadMembers(Changes* changes) {
  std::vector<std::pair<int64_t, std::string>> dead;
  for (const auto& [id, e] : members_) {
    if (e.info.state() != dlrm::v1::MEMBER_STATE_ALIVE) dead.emplace_back(e.info.sequence(), id);
  }
  if (static_cast<int>(dead.size()) <= options_.max_dead_members) return;
  std::sort(dead.begin(), dead.end());
  const size_t drop = dead.size() - options_.max_dead_members;
  for (size_t i = 0; i < drop; ++i) {
    members_.erase(dead[i].second);
    changes->members.erase(dead[i].second);
    changes->deleted_member_ids.push_back(dead[i].second);
  }
}

absl::StatusOr<int64_t> CoordinatorState::Leave(const std::string& member_id, absl::Time now) {
  Changes changes;
  absl::Status status;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    DLRM_ASSIGN_OR_RETURN(MemberEntry * entry, FindLiveMember(member_id));
    DropMember(entry, dlrm::v1::MEMBER_STATE_LEFT, "left the cluster", now, &changes);
    PruneDeadMembers(&changes);
    TryStartJobs(now, &changes);
    epoch = epoch_;
    status = Finalize(changes);
  }
  Notify(changes);
  if (!status.ok()) return status;
  return epoch;
}

int CoordinatorState::ExpireLeases(absl::Time now) {
  Changes changes;
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time previous = last_sweep_;
    last_sweep_ = now;
    if (previous != absl::InfinitePast() && now - previous > options_.stall_after) {
      // Heartbeats that came while the coordinator was not serving were not heard: judge the
      // leases from now on, as if the coordinator had just started.
      int renewed = 0;
      for (auto& [id, entry] : members_) {
        if (entry.info.state() != dlrm::v1::MEMBER_STATE_ALIVE) continue;
        entry.lease_deadline = std::max(entry.lease_deadline, now + options_.lease_ttl);
        ++renewed;
      }
      DLRM_LOG(WARNING) << "leases were last checked " << absl::FormatDuration(now - previous)
                        << " ago, more than " << absl::FormatDuration(options_.stall_after)
                        << ": the coordinator was stalled (stopped, suspended, starved, or its "
                           "clock jumped); "
                        << renewed << " live member(s) get a fresh lease of "
                        << absl::FormatDuration(options_.lease_ttl) << " instead of expiring";
      if (metrics_ != nullptr) metrics_->stalls->Increment();
      return 0;
    }
    for (auto& [id, entry] : members_) {
      if (entry.info.state() != dlrm::v1::MEMBER_STATE_ALIVE || entry.lease_deadline > now) {
        continue;
      }
      DropMember(&entry, dlrm::v1::MEMBER_STATE_EXPIRED,
                 absl::StrCat("lease expired (no heartbeat for ",
                              absl::FormatDuration(options_.lease_ttl), ")"),
                 now, &changes);
      ++expired;
    }
    if (expired == 0) return 0;
    if (metrics_ != nullptr) metrics_->expired->Increment(expired);
    PruneDeadMembers(&changes);
    TryStartJobs(now, &changes);
    (void)Finalize(changes);
  }
  Notify(changes);
  return expired;
}

dlrm::v1::GetClusterViewResponse CoordinatorState::ClusterView() const {
  absl::MutexLock lock(&mu_);
  dlrm::v1::GetClusterViewResponse view;
  view.set_epoch(epoch_);
  view.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  std::vector<const Member*> sorted;
  for (const auto& [id, e] : members_) sorted.push_back(&e.info);
  std::sort(sorted.begin(), sorted.end(), [](const Member* a, const Member* b) {
    const bool a_alive = a->state() == dlrm::v1::MEMBER_STATE_ALIVE;
    const bool b_alive = b->state() == dlrm::v1::MEMBER_STATE_ALIVE;
    if (a_alive != b_alive) return a_alive;
    return a->sequence() < b->sequence();
  });
  for (const Member* m : sorted) *view.add_members() = *m;
  for (const std::string& id : ps_slots_) {
    auto it = members_.find(id);
    view.add_shard_map(it == members_.end() ? "" : it->second.info.address());
  }
  return view;
}

}  // namespace dlrm::server
