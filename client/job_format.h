// dlrmctl's renderings of jobs and cluster members for people: tables (`table`, the default, and
// `wide` with more columns), job details and watch lines. The machine documents (`json`, `yaml`,
// `jsonl`) are in client/output_format.h. Every function here is pure: no RPC, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/run_speed.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"

namespace dlrm::client {

// "PENDING", "RUNNING", ...; "PS", "WORKER"; "ALIVE", "EXPIRED", "LEFT".
std::string StateName(dlrm::v1::JobState state);
std::string RoleName(dlrm::v1::Role role);
std::string MemberStateName(dlrm::v1::MemberState state);

// The job's message (the coordinator's: why it failed, was cancelled or recovers, or what a
// PENDING job waits for, e.g. "waiting for 2 idle workers and 1 parameter server; the cluster has
// 1 idle worker (worker-0), 1 parameter server (ps-0)"), as it is safe to print; for a FAILED or
// CANCELLED job without one, that no reason was recorded.
std::string JobMessage(const dlrm::v1::Job& job);

// For a job just submitted: "" when the cluster in `view` has as many alive workers and
// parameter servers as the job asks for, else a warning that it has fewer, e.g. "job-3 asks for 4
// workers and 2 are registered: it stays PENDING until 2 more register, and jobs submitted after
// it wait behind it (jobs start in submission order)". Busy workers count as registered: they
// come free when their job ends.
std::string FewerMembersThanAsked(const dlrm::v1::Job& job,
                                  const dlrm::v1::GetClusterViewResponse& view);

// "2026-12-01T17:00:00Z" (UTC) for unix milliseconds; "-" for 0 or less (never set).
std::string UtcTime(int64_t unix_ms);

// One line per state change: "2026-12-01T17:00:00Z  RUNNING     started on ...".
std::string HistoryLine(const dlrm::v1::JobStateChange& change);
// `dlrmctl describe`: the job in detail (as -o wide), its state history, the newest committed
// checkpoints (`checkpoints`, may be empty) and its spec, whose floats are written shortest
// (0.9, not the stored 0.90000000000000002: ShortestFloats of client/output_format.h).
std::string JobDescription(const dlrm::v1::Job& job, const std::vector<std::string>& checkpoints);

// One job in detail, "key: value" lines; `wide` adds member ids, addresses, per-rank samples
// and times.
std::string JobDetail(const dlrm::v1::Job& job, bool wide);
// One line per job under a header; `wide` adds columns (parameter servers, loss, created time).
// The MESSAGE column is one line; a job that failed with no recovery left starts it with that
// ("no recovery left (3 of max_recoveries 3 used): <the last loss>"), leaving out the list of the
// earlier recoveries (in `describe` and -o wide's detail).
std::string JobTable(const std::vector<dlrm::v1::Job>& jobs, bool wide);
// One line for a watch event: "job-1 RUNNING step 120/352 (34%) ETA 41s samples 245760 loss
// 0.4512 5120 samples/s", with the JobMessage in parentheses when there is one. The ETA and the
// rate come from `speed` (the watcher's, fed this job already), and are left out without it.
std::string JobEventLine(const dlrm::v1::Job& job, const RunSpeed* speed = nullptr);
// One line per member (id and name) under a header, then the epoch and shard map; `now_ms` ages
// heartbeats; `wide` adds the metrics address, capabilities and registration age.
std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms, bool wide);

// A member as people call it: its name, or its id when it registered without one.
std::string MemberLabel(const dlrm::v1::Member& member);

}  // namespace dlrm::client
