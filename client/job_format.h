// Human (table) and machine (JSON) renderings of jobs and cluster members, shared by dlrmctl
// and `dlrm local`. JSON is protobuf's canonical JSON mapping with proto field names
// ("job_id", "final_metrics", ...), with every field present.
#pragma once

#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"

namespace dlrm::client {

// "PENDING", "RUNNING", ...; "PS", "WORKER"; "ALIVE", "EXPIRED", "LEFT".
std::string StateName(dlrm::v1::JobState state);
std::string RoleName(dlrm::v1::Role role);
std::string MemberStateName(dlrm::v1::MemberState state);

// One JSON object on one line.
std::string ToJson(const google::protobuf::Message& message);

// One job in detail, "key: value" lines.
std::string JobDetail(const dlrm::v1::Job& job);
// One line per job under a header.
std::string JobTable(const std::vector<dlrm::v1::Job>& jobs);
// One line for a watch event: "job-1 RUNNING step 120 samples 245760 loss 0.4512".
std::string JobEventLine(const dlrm::v1::Job& job);
// One line per member under a header, then the shard map; `now_ms` ages heartbeats.
std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms);

}  // namespace dlrm::client
