// dlrmctl's renderings of jobs, cluster members and versions: human tables (`table`, the default,
// and `wide` with more columns) and machine documents (`json`, `yaml`, `jsonl`).
//
// A document is the API message in protobuf's canonical JSON mapping with proto field names
// ("job_id", "final_metrics", ...) and every field present; enums are names
// ("JOB_STATE_PENDING") and 64-bit integers are strings, as that mapping says. `yaml` is the same
// tree in YAML block style (so `-o json` and `-o yaml` hold the same data), `json` is indented
// over several lines, `jsonl` is one line. Every function here is pure: no RPC, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/message.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"

namespace dlrm::client {

enum class OutputFormat { kTable, kWide, kJson, kYaml, kJsonl };

// "table", "wide", "json", "yaml", "jsonl" (the order of `enum OutputFormat`).
const std::vector<std::string>& OutputFormatNames();
// The format of one of OutputFormatNames(); nullopt for any other name.
std::optional<OutputFormat> ParseOutputFormat(std::string_view name);
// True for json, yaml and jsonl.
bool IsDocumentFormat(OutputFormat format);

// "PENDING", "RUNNING", ...; "PS", "WORKER"; "ALIVE", "EXPIRED", "LEFT".
std::string StateName(dlrm::v1::JobState state);
std::string RoleName(dlrm::v1::Role role);
std::string MemberStateName(dlrm::v1::MemberState state);

// One JSON object on one line, no newline.
std::string ToJson(const google::protobuf::Message& message);
// The message in YAML block style, ending in a newline.
std::string ToYaml(const google::protobuf::Message& message);
// One document of `message` in a document format, ending in a newline: kJson indented, kYaml
// block style, kJsonl one line. Precondition: IsDocumentFormat(format).
std::string ToDocument(const google::protobuf::Message& message, OutputFormat format);

// The versions document: {"client_version": ..., "server_version": ...}; the server's is null
// when the coordinator could not be asked. Precondition: IsDocumentFormat(format).
std::string VersionDocument(const std::string& client_version,
                            const std::optional<std::string>& server_version, OutputFormat format);

// What the client read from the coordinator to explain why PENDING jobs wait. Either part may
// be missing when the call that reads it failed; explanations then say less.
struct ClusterSnapshot {
  std::optional<dlrm::v1::GetClusterViewResponse> view;
  // Ids of every PENDING job, oldest first (the coordinator starts them in this order); nullopt
  // when unknown.
  std::optional<std::vector<std::string>> pending_job_ids;
};

// The job's message; when the coordinator recorded none, one that explains the state. PENDING:
// what the job waits for against what `cluster` has, e.g. "waiting for 2 idle workers and 1
// parameter server; the cluster has 1 idle worker (worker-0) and 1 parameter server (ps-0)",
// then "; queued behind job-1" when older pending jobs start first. FAILED and CANCELLED: that no
// reason was recorded. Empty for RUNNING and SUCCEEDED. `cluster` may be null.
std::string JobMessage(const dlrm::v1::Job& job, const ClusterSnapshot* cluster);

// One line per state change: "2026-12-01T17:00:00Z  RUNNING     started on ...".
std::string HistoryLine(const dlrm::v1::JobStateChange& change);
// `dlrmctl describe`: the job in detail (as -o wide), its state history, the newest committed
// checkpoints (`checkpoints`, may be empty) and its spec.
std::string JobDescription(const dlrm::v1::Job& job, const ClusterSnapshot* cluster,
                           const std::vector<std::string>& checkpoints);

// One job in detail, "key: value" lines; `wide` adds member ids, addresses, per-rank samples
// and times.
std::string JobDetail(const dlrm::v1::Job& job, bool wide, const ClusterSnapshot* cluster);
// One line per job under a header; `wide` adds columns (parameter servers, loss, created time).
std::string JobTable(const std::vector<dlrm::v1::Job>& jobs, bool wide,
                     const ClusterSnapshot* cluster);
// One line for a watch event: "job-1 RUNNING step 120 samples 245760 loss 0.4512", with the
// JobMessage in parentheses when there is one.
std::string JobEventLine(const dlrm::v1::Job& job, const ClusterSnapshot* cluster);
// One line per member (id and name) under a header, then the epoch and shard map; `now_ms` ages
// heartbeats; `wide` adds the metrics address, capabilities and registration age.
std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms, bool wide);

// A member as people call it: its name, or its id when it registered without one.
std::string MemberLabel(const dlrm::v1::Member& member);

}  // namespace dlrm::client
