#include "client/job_format.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/output_format.h"
#include "common/status.h"

namespace dlrm::client {
namespace {

std::string Strip(std::string name, const std::string& prefix) {
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  return name;
}

// Text from the coordinator (a cancel's --reason, a worker's error, which may quote a file name)
// as it is safe to print on a terminal: control characters other than newline and tab become
// \xNN, so none can move the cursor, recolour or clear the screen of whoever reads it.
std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", byte));
    } else {
      out.push_back(c);
    }
  }
  return out;
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
  if (!job.final_metrics().has_auc()) return "n/a";  // no eval data
  return absl::StrFormat("%.4f", job.final_metrics().auc());
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// The MESSAGE column of the job tables: one line. The coordinator's message of a job that lost a
// member with no recovery left is "<the loss>; no recovery left (N of max_recoveries N used);
// recovery 1: <loss>; ...": the verdict goes first, then the loss that ended the job.
std::string TableMessage(const dlrm::v1::Job& job) {
  std::string message = JobMessage(job);
  constexpr char kNoRecoveryLeft[] = "; no recovery left (";
  const size_t verdict = message.find(kNoRecoveryLeft);
  if (job.state() == dlrm::v1::JOB_STATE_FAILED && verdict != std::string::npos) {
    const size_t start = verdict + 2;  // past "; "
    const size_t close = message.find(')', start);
    if (close != std::string::npos) {
      message =
          absl::StrCat(message.substr(start, close + 1 - start), ": ", message.substr(0, verdict));
    }
  }
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::replace(message.begin(), message.end(), '\r', ' ');
  return OrDash(message);
}

// The loss of the job's latest progress report, in `format`; "-" when no worker has reported one
// yet (a job that never trained a step has no loss, and 0 would read as a perfect model).
std::string Loss(const dlrm::v1::Job& job, const absl::FormatSpec<double>& format) {
  if (!job.has_progress()) return "-";
  return absl::StrFormat(format, job.progress().loss());
}

std::string PsColumn(const dlrm::v1::Job& job) {
  if (!job.ps_addresses().empty()) return absl::StrCat(job.ps_addresses_size());
  return job.requested_ps() == 0 ? "all" : absl::StrCat(job.requested_ps());
}

}  // namespace

std::string StateName(dlrm::v1::JobState state) {
  return Strip(dlrm::v1::JobState_Name(state), "JOB_STATE_");
}
std::string RoleName(dlrm::v1::Role role) { return Strip(dlrm::v1::Role_Name(role), "ROLE_"); }
std::string MemberStateName(dlrm::v1::MemberState state) {
  return Strip(dlrm::v1::MemberState_Name(state), "MEMBER_STATE_");
}

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string HistoryLine(const dlrm::v1::JobStateChange& change) {
  return absl::StrFormat("%-20s  %-10s  %s", UtcTime(change.time_ms()), StateName(change.state()),
                         Printable(change.message()));
}

std::string JobDescription(const dlrm::v1::Job& job, const std::vector<std::string>& checkpoints) {
  std::string out = JobDetail(job, /*wide=*/true);
  absl::StrAppend(&out, "\nhistory:\n");
  for (const dlrm::v1::JobStateChange& change : job.history()) {
    absl::StrAppend(&out, "  ", HistoryLine(change), "\n");
  }
  if (!checkpoints.empty()) {
    absl::StrAppend(&out, "\ncheckpoints (newest last):\n");
    for (const std::string& c : checkpoints) absl::StrAppend(&out, "  ", c, "\n");
  }
  absl::StrAppend(&out, "\nspec:\n");
  for (absl::string_view line : absl::StrSplit(ShortestFloats(job.spec_yaml()), '\n')) {
    if (!line.empty()) absl::StrAppend(&out, "  ", line, "\n");
  }
  return out;
}

std::string MemberLabel(const dlrm::v1::Member& member) {
  return member.name().empty() ? member.member_id() : member.name();
}

std::string FewerMembersThanAsked(const dlrm::v1::Job& job,
                                  const dlrm::v1::GetClusterViewResponse& view) {
  int64_t workers = 0;
  int64_t ps = 0;
  for (const auto& m : view.members()) {
    if (m.state() != dlrm::v1::MEMBER_STATE_ALIVE) continue;
    if (m.role() == dlrm::v1::ROLE_WORKER) ++workers;
    if (m.role() == dlrm::v1::ROLE_PS) ++ps;
  }
  std::vector<std::string> short_of;
  if (job.requested_workers() > workers) {
    short_of.push_back(absl::StrCat(Count(job.requested_workers(), "worker", "workers"), " and ",
                                    workers, workers == 1 ? " is" : " are", " registered"));
  }
  if (job.requested_ps() > ps) {
    short_of.push_back(
        absl::StrCat(Count(job.requested_ps(), "parameter server", "parameter servers"), " and ",
                     ps, ps == 1 ? " is" : " are", " registered"));
  }
  if (short_of.empty()) return "";
  return absl::StrCat(job.job_id(), " asks for ", absl::StrJoin(short_of, "; "),
                      ": it stays PENDING until more register, and jobs submitted after it wait "
                      "behind it (jobs start in submission order)");
}

std::string JobMessage(const dlrm::v1::Job& job) {
  if (!job.message().empty()) return Printable(job.message());
  switch (job.state()) {
    case dlrm::v1::JOB_STATE_FAILED:
    case dlrm::v1::JOB_STATE_CANCELLED:
      return "no reason recorded";
    default:
      return "";
  }
}

std::string JobDetail(const dlrm::v1::Job& job, bool wide) {
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
  if (wide && !job.ps_member_ids().empty()) {
    rows.push_back({"ps members:", absl::StrJoin(job.ps_member_ids(), ",")});
  }
  if (job.started_ms() > 0) {  // else it never ran: no progress to show
    rows.push_back({"step:", absl::StrCat(job.progress().step())});
    rows.push_back({"samples:", absl::StrCat(job.total_samples())});
    if (wide && !job.rank_samples().empty()) {
      rows.push_back({"rank samples:", absl::StrJoin(job.rank_samples(), ",")});
    }
    rows.push_back({"loss:", Loss(job, "%.6f")});
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    auto metric = [&](bool has, double value) {
      return has ? absl::StrFormat("%.6f", value) : std::string("n/a (no eval data)");
    };
    rows.push_back({"auc:", metric(m.has_auc(), m.auc())});
    rows.push_back({"logloss:", metric(m.has_logloss(), m.logloss())});
    rows.push_back({"accuracy:", metric(m.has_accuracy(), m.accuracy())});
    rows.push_back({"samples/s:", absl::StrFormat("%.1f", m.samples_per_sec())});
    rows.push_back({"steps:", absl::StrCat(m.steps())});
  }
  if (job.recoveries() > 0 || job.state() == dlrm::v1::JOB_STATE_RECOVERING) {
    rows.push_back({"recoveries:", absl::StrCat(job.recoveries(), " of ", job.max_recoveries())});
    for (int i = 0; wide && i < job.recovery_history_size(); ++i) {
      const dlrm::v1::JobRecovery& r = job.recovery_history(i);
      rows.push_back(
          {absl::StrCat("recovery ", i + 1, ":"),
           absl::StrCat(
               UtcTime(r.started_ms()), " at step ", r.step_at_loss(), ", ",
               r.resumed_ms() > 0
                   ? absl::StrCat(
                         "running again after ",
                         absl::StrFormat("%.1f s", (r.resumed_ms() - r.started_ms()) / 1000.0))
                   : std::string("not running again"),
               !r.has_restored_step()      ? std::string()
               : r.restored_from().empty() ? std::string(" from the start")
                                           : absl::StrCat(" from ", Printable(r.restored_from()),
                                                          " (step ", r.restored_step(), ")"),
               ": ", Printable(r.reason()))});
    }
  }
  if (wide) {
    rows.push_back({"created:", UtcTime(job.created_ms())});
    rows.push_back({"started:", UtcTime(job.started_ms())});
    rows.push_back({"finished:", UtcTime(job.finished_ms())});
  }
  const std::string message = JobMessage(job);
  if (!message.empty()) rows.push_back({"message:", message});
  return Columns(rows);
}

std::string JobTable(const std::vector<dlrm::v1::Job>& jobs, bool wide) {
  std::vector<std::vector<std::string>> rows;
  if (wide) {
    rows.push_back({"JOB", "NAME", "STATE", "WORKERS", "PS", "STEP", "SAMPLES", "LOSS", "AUC",
                    "CREATED", "MESSAGE"});
  } else {
    rows.push_back({"JOB", "NAME", "STATE", "WORKERS", "STEP", "SAMPLES", "AUC", "MESSAGE"});
  }
  for (const auto& job : jobs) {
    const std::string message = TableMessage(job);
    if (wide) {
      rows.push_back({job.job_id(), job.name(), StateName(job.state()),
                      absl::StrCat(job.requested_workers()), PsColumn(job),
                      absl::StrCat(job.progress().step()), absl::StrCat(job.total_samples()),
                      Loss(job, "%.4f"), Auc(job), UtcTime(job.created_ms()), message});
    } else {
      rows.push_back({job.job_id(), job.name(), StateName(job.state()),
                      absl::StrCat(job.requested_workers()), absl::StrCat(job.progress().step()),
                      absl::StrCat(job.total_samples()), Auc(job), message});
    }
  }
  return Columns(rows);
}

std::string JobEventLine(const dlrm::v1::Job& job, const RunSpeed* speed) {
  const bool running = job.state() == dlrm::v1::JOB_STATE_RUNNING;
  std::string line = absl::StrCat(job.job_id(), " ", StateName(job.state()));
  if (running || job.state() == dlrm::v1::JOB_STATE_RECOVERING ||
      (IsTerminalJobState(job.state()) && job.started_ms() > 0)) {
    absl::StrAppend(&line, " step ", job.progress().step());
    const auto& metrics = job.progress().metrics();
    const auto total = metrics.find("total_steps");
    if (total != metrics.end() && total->second > 0) {
      const double t = total->second;
      const double step = static_cast<double>(job.progress().step());
      absl::StrAppend(&line, absl::StrFormat("/%.0f (%.0f%%)", t, 100 * std::min(1.0, step / t)));
      const std::optional<double> steps_per_sec =
          speed != nullptr ? speed->steps_per_sec() : std::nullopt;
      if (running && steps_per_sec.has_value() && *steps_per_sec > 0) {
        absl::StrAppend(&line,
                        absl::StrFormat(" ETA %.0fs", std::max(0.0, t - step) / *steps_per_sec));
      }
    }
    absl::StrAppend(&line, " samples ", job.total_samples(), " loss ", Loss(job, "%.4f"));
    const std::optional<double> samples_per_sec =
        speed != nullptr ? speed->samples_per_sec() : std::nullopt;
    if (running && samples_per_sec.has_value()) {
      absl::StrAppend(&line, absl::StrFormat(" %.0f samples/s", *samples_per_sec));
    }
  }
  if (job.state() == dlrm::v1::JOB_STATE_SUCCEEDED) {
    const auto& m = job.final_metrics();
    if (m.has_auc()) {
      absl::StrAppend(&line, absl::StrFormat(" auc %.4f logloss %.4f accuracy %.4f", m.auc(),
                                             m.logloss(), m.accuracy()));
    } else {
      absl::StrAppend(&line, " auc n/a (no eval data)");
    }
    absl::StrAppend(&line, absl::StrFormat(" samples/s %.1f", m.samples_per_sec()));
  }
  std::string message = JobMessage(job);
  std::replace(message.begin(), message.end(), '\n', ' ');  // one line: watch redraws it
  if (!message.empty()) absl::StrAppend(&line, " (", message, ")");
  return line;
}

std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms, bool wide) {
  std::vector<std::vector<std::string>> rows = {
      {"MEMBER", "NAME", "ROLE", "STATE", "ADDRESS", "SHARD", "JOB", "RANK", "HEARTBEAT"}};
  if (wide) {
    for (const char* column : {"METRICS", "GPUS", "CORES", "MEMORY", "REGISTERED"}) {
      rows[0].push_back(column);
    }
  }
  for (const auto& m : view.members()) {
    rows.push_back({m.member_id(), OrDash(m.name()), RoleName(m.role()), MemberStateName(m.state()),
                    OrDash(m.address()), m.shard_index() >= 0 ? absl::StrCat(m.shard_index()) : "-",
                    OrDash(m.job_id()), m.rank() >= 0 ? absl::StrCat(m.rank()) : "-",
                    absl::StrFormat("%.1fs ago", (now_ms - m.last_heartbeat_ms()) / 1000.0)});
    if (wide) {
      const auto& c = m.capabilities();
      rows.back().insert(
          rows.back().end(),
          {OrDash(m.metrics_address()), absl::StrCat(c.gpu_count()), absl::StrCat(c.cpu_cores()),
           c.memory_bytes() > 0 ? absl::StrFormat("%.1fGi", c.memory_bytes() / 1073741824.0) : "-",
           UtcTime(m.registered_ms())});
    }
  }
  std::string out = Columns(rows);
  absl::StrAppend(&out, "epoch ", view.epoch(), ", shards: ",
                  view.shard_map().empty() ? "none" : absl::StrJoin(view.shard_map(), ","), "\n");
  return out;
}

}  // namespace dlrm::client
