#include "client/job_format.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/coordinator_client.h"
#include "google/protobuf/util/json_util.h"

namespace dlrm::client {
namespace {

std::string Strip(std::string name, const std::string& prefix) {
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  return name;
}

// Formats rows as left-aligned columns separated by two spaces.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string Auc(const dlrm::v1::Job& job) {
  if (job.state() != dlrm::v1::JOB_STATE_SUCCEEDED) return "-";
  return absl::StrFormat("%.4f", job.final_metrics().auc());
}

}  // namespace

std::string StateName(dlrm::v1::JobState state) {
  return Strip(dlrm::v1::JobState_Name(state), "JOB_STATE_");
}
std::string RoleName(dlrm::v1::Role role) { return Strip(dlrm::v1::Role_Name(role), "ROLE_"); }
std::string MemberStateName(dlrm::v1::MemberState state) {
  return Strip(dlrm::v1::MemberState_Name(state), "MEMBER_STATE_");
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string JobDetail(const dlrm::v1::Job& job) {
  std::vector<std::vector<std::string>> rows = {
      {"job:", job.job_id()},
      {"name:", job.name()},
      {"state:", StateName(job.state())},
      {"workers:", absl::StrCat(job.requested_workers())},
      {"ps:", job.ps_addresses().empty()
                  ? (job.requested_ps() == 0 ? std::string("all alive at start")
                                             : absl::StrCat(job.requested_ps()))
                  : absl::StrJoin(job.ps_addresses(), ",")},
  };
  if (!job.worker_ids().empty()) rows.push_back({"ranks:", absl::StrJoin(job.worker_ids(), ",")});
  if (job.state() != dlrm::v1::JOB_STATE_PENDING) {
    rows.push_back({"step:", absl::StrCat(job.progress().step())});
    rows.push_back({"samples:", absl::StrCat(job.total_samples())});
    rows.push_back({"loss:", absl::StrFormat("%.6f", job.progress().loss())});
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    rows.push_back({"auc:", absl::StrFormat("%.6f", m.auc())});
    rows.push_back({"logloss:", absl::StrFormat("%.6f", m.logloss())});
    rows.push_back({"accuracy:", absl::StrFormat("%.6f", m.accuracy())});
    rows.push_back({"samples/s:", absl::StrFormat("%.1f", m.samples_per_sec())});
    rows.push_back({"steps:", absl::StrCat(m.steps())});
  }
  if (!job.message().empty()) rows.push_back({"message:", job.message()});
  return Columns(rows);
}

std::string JobTable(const std::vector<dlrm::v1::Job>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "NAME", "STATE", "WORKERS", "STEP", "SAMPLES", "AUC", "MESSAGE"}};
  for (const auto& job : jobs) {
    rows.push_back({job.job_id(), job.name(), StateName(job.state()),
                    absl::StrCat(job.requested_workers()), absl::StrCat(job.progress().step()),
                    absl::StrCat(job.total_samples()), Auc(job), job.message()});
  }
  return Columns(rows);
}

std::string JobEventLine(const dlrm::v1::Job& job) {
  std::string line = absl::StrCat(job.job_id(), " ", StateName(job.state()));
  if (job.state() == dlrm::v1::JOB_STATE_RUNNING || IsTerminalJobState(job.state())) {
    absl::StrAppend(&line, " step ", job.progress().step(), " samples ", job.total_samples(),
                    absl::StrFormat(" loss %.4f", job.progress().loss()));
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    absl::StrAppend(&line,
                    absl::StrFormat(" auc %.4f logloss %.4f accuracy %.4f samples/s %.1f", m.auc(),
                                    m.logloss(), m.accuracy(), m.samples_per_sec()));
  }
  if (!job.message().empty()) absl::StrAppend(&line, " (", job.message(), ")");
  return line;
}

std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"MEMBER", "ROLE", "STATE", "ADDRESS", "SHARD", "JOB", "RANK", "HEARTBEAT"}};
  for (const auto& m : view.members()) {
    rows.push_back({m.member_id(), RoleName(m.role()), MemberStateName(m.state()),
                    m.address().empty() ? "-" : m.address(),
                    m.shard_index() >= 0 ? absl::StrCat(m.shard_index()) : "-",
                    m.job_id().empty() ? "-" : m.job_id(),
                    m.rank() >= 0 ? absl::StrCat(m.rank()) : "-",
                    absl::StrFormat("%.1fs ago", (now_ms - m.last_heartbeat_ms()) / 1000.0)});
  }
  std::string out = Columns(rows);
  absl::StrAppend(&out, "epoch ", view.epoch(), ", shards: ",
                  view.shard_map().empty() ? "none" : absl::StrJoin(view.shard_map(), ","), "\n");
  return out;
}

}  // namespace dlrm::client
