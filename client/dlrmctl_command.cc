#include "client/dlrmctl_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/dlrmctl.h"
#include "client/run_speed.h"
#include "common/host_port.h"
#include "common/job_spec.h"
#include "common/paths.h"
#include "embedding/checkpoint_manifest.h"
#include "google/protobuf/struct.pb.h"

namespace dlrm::client::dlrmctl_internal {
namespace {

// A flag's value that cannot work (an address without a port, TLS files or a token that cannot be
// read) is a usage error: its status carries this payload, and dlrmctl exits kExitUsage.
constexpr absl::string_view kUsagePayload = "dlrm.dlrmctl/usage";

absl::Status UsageStatus(absl::Status status) {
  status.SetPayload(kUsagePayload, absl::Cord());
  return status;
}

bool IsUsageStatus(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// Commands that read a job's checkpoint folder read it here: when it does not exist here, why
// they see no checkpoint may be that this machine does not mount the volume the job writes to.
std::string NotHere(const std::string& folder) {
  std::error_code ec;
  if (std::filesystem::exists(folder, ec) || ec) return "";
  return ": the folder does not exist on this machine (the job has committed none yet, or its "
         "checkpoint volume is not mounted here)";
}

// Whether a job could resume from checkpoint `m` of `root`: "ok" when its chain holds together
// (every parent there, written when its child says), "verified" when `verify` also checked every
// file's size and CRC32C, else "broken" with the reason.
struct ChainState {
  std::string state;
  std::string problem;
};
ChainState CheckChain(const std::string& root, const embedding::CheckpointManifest& m,
                      bool verify) {
  absl::StatusOr<std::vector<embedding::CheckpointManifest>> chain =
      embedding::LoadChain((std::filesystem::path(root) / m.name).string(), verify);
  if (!chain.ok()) return {"broken", std::string(chain.status().message())};
  return {verify ? "verified" : "ok", ""};
}

// The checkpoints of a folder as a document's list: one object per manifest, as `checkpoints`
// prints them.
void AddCheckpointEntries(const std::vector<embedding::CheckpointManifest>& list,
                          const std::vector<ChainState>& states,
                          google::protobuf::ListValue* items) {
  for (size_t i = 0; i < list.size(); ++i) {
    const embedding::CheckpointManifest& m = list[i];
    google::protobuf::Struct* c = items->add_values()->mutable_struct_value();
    (*c->mutable_fields())["name"].set_string_value(m.name);
    (*c->mutable_fields())["step"].set_number_value(static_cast<double>(m.step));
    (*c->mutable_fields())["created_unix"].set_number_value(m.created_unix);
    (*c->mutable_fields())["bytes"].set_number_value(static_cast<double>(m.total_bytes()));
    (*c->mutable_fields())["kind"].set_string_value(m.incremental ? "incremental" : "full");
    (*c->mutable_fields())["parent"].set_string_value(m.parent);
    // The folder may hold another job's checkpoints (a job resumed from them, or one given the
    // same checkpoint.dir): the job that wrote each, "" for `dlrm train`.
    (*c->mutable_fields())["job_id"].set_string_value(m.job_id);
    (*c->mutable_fields())["state"].set_string_value(states[i].state);
    (*c->mutable_fields())["problem"].set_string_value(states[i].problem);
  }
}

void AddDamaged(const std::vector<absl::Status>& damaged, google::protobuf::ListValue* items) {
  for (const absl::Status& d : damaged) {
    items->add_values()->set_string_value(std::string(d.message()));
  }
}

}  // namespace

std::string TlsHandshakeFailure(const absl::Status& status) {
  if (!absl::IsUnavailable(status)) return "";
  const std::string message = absl::AsciiStrToLower(status.message());
  if (absl::StrContains(message, "certificate verify failed")) {
    return "the coordinator's certificate is not signed by the CA this client trusts (ca.crt of "
           "--tls-dir, or --tls-ca): give the admin certificate of the coordinator's own CA";
  }
  if (absl::StrContains(message, "is not in peer certificate") ||
      absl::StrContains(message, "does not name the host dialled")) {
    return "the coordinator's certificate does not name the host dialled: give the name it "
           "carries with --tls-server-name";
  }
  if (absl::StrContains(message, "custom verification check failed")) {
    // common::MakeChannel's check of the server's identity: its message above names both.
    return "the server at that address is not the coordinator (its certificate is another "
           "role's): check --coordinator";
  }
  if (absl::StrContains(message, "wrong version number")) {
    return "the coordinator does not speak TLS (it runs with --insecure?): leave out --tls-dir "
           "(and $DLRM_TLS_DIR)";
  }
  if (absl::StrContains(message, "ssl handshake failed")) {
    return "gRPC's message above says why";
  }
  return "";
}

Command::Command(const Flags& flags, std::ostream& out, std::ostream& err)
    : flags_(flags),
      format_(*ParseOutputFormat(flags.output)),
      out_(out),
      err_(err),
      terminal_(&out_ == &std::cout && isatty(STDOUT_FILENO) == 1) {}

int Command::Submit() {
  // Parsed here first: errors name the file, and relative data paths are resolved against
  // the spec's folder (absolute), so workers started elsewhere find the data.
  std::error_code ec;
  const std::string path = std::filesystem::absolute(flags_.file, ec).string();
  auto spec = common::LoadJobSpec(ec ? flags_.file : path);
  if (!spec.ok()) return Fail(spec.status(), kExitFailed);
  if (!flags_.resume_from.empty()) {
    // Every worker reads it: an absolute path on the volume they share.
    const std::string resume_from = std::filesystem::absolute(flags_.resume_from, ec).string();
    // As `dlrm train --resume`: a spec that names another checkpoint is refused, not overridden.
    if (absl::Status agrees = common::CheckResumeAgrees("--resume-from", flags_.resume_from,
                                                        spec->checkpoint.resume_from, flags_.file);
        !agrees.ok()) {
      return Fail(UsageStatus(agrees));
    }
    spec->checkpoint.resume_from = resume_from;
  }
  const std::string yaml = common::JobSpecToYaml(*spec);
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  unanswered_change_ = "queued the job: see 'dlrmctl list' before submitting it again";
  auto job = (*client)->Submit(yaml, {.workers = flags_.workers, .ps = flags_.ps});
  if (!job.ok()) return Fail(job.status());
  unanswered_change_.clear();
  if (job->state() == dlrm::v1::JOB_STATE_PENDING) {
    if (auto view = (*client)->Members(); view.ok()) {
      if (std::string warning = FewerMembersThanAsked(*job, *view); !warning.empty()) {
        err_ << "dlrmctl: warning: " << warning << "\n";
      }
    }
  }
  if (!flags_.wait) {
    if (IsDocumentFormat(format_)) {
      out_ << ToDocument(*job, format_);
    } else if (format_ == OutputFormat::kWide) {
      PrintJob(*job);
    } else {
      out_ << job->job_id() << "\n";  // for JOB=$(dlrmctl submit -f job.yaml)
    }
    return kExitOk;
  }
  if (!IsDocumentFormat(format_)) out_ << "submitted " << job->job_id() << std::endl;
  return WatchUntilDone(**client, job->job_id());
}

int Command::Status() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto job = (*client)->Get(flags_.job_id);
  if (!job.ok()) return Fail(job.status());
  PrintJob(*job);
  return kExitOk;
}

int Command::Watch() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  return WatchUntilDone(**client, flags_.job_id);
}

int Command::Cancel() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  unanswered_change_ =
      absl::StrCat("cancelled job ", flags_.job_id, ": see 'dlrmctl status ", flags_.job_id, "'");
  auto job = (*client)->Cancel(flags_.job_id, flags_.reason);
  if (!job.ok()) return Fail(job.status());
  unanswered_change_.clear();
  PrintJob(*job);
  return kExitOk;
}

int Command::Checkpoint() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto before = (*client)->Get(flags_.job_id);
  if (!before.ok()) return Fail(before.status());
  auto spec = common::ParseJobSpec(before->spec_yaml(), absl::StrCat("job ", flags_.job_id));
  if (!spec.ok()) return Fail(spec.status());
  int64_t newest_step = -1;
  if (flags_.wait && !spec->checkpoint.dir.empty()) {
    auto list = embedding::ListCheckpoints(spec->checkpoint.dir);
    if (!list.ok()) return Fail(list.status());
    if (!list->empty()) newest_step = list->back().step;
  }
  unanswered_change_ = absl::StrCat("recorded the checkpoint request of job ", flags_.job_id);
  auto job = (*client)->RequestCheckpoint(flags_.job_id);
  if (!job.ok()) return Fail(job.status());
  unanswered_change_.clear();
  err_ << "job " << flags_.job_id << ": checkpoint requested (request "
       << job->checkpoint_requests() << "); its workers take it within "
       << "50 steps" << std::endl;
  if (!flags_.wait) return kExitOk;
  const absl::Time give_up = absl::Now() + absl::Seconds(flags_.wait_timeout_s);
  // Prints the newest checkpoint when it is newer than the newest before the request.
  auto print_new = [&] {
    auto list = embedding::ListCheckpoints(spec->checkpoint.dir);
    if (!list.ok() || list->empty() || list->back().step <= newest_step) return false;
    out_ << absl::StrCat(spec->checkpoint.dir, "/", list->back().name) << "\n";
    return true;
  };
  while (absl::Now() < give_up) {
    if (print_new()) return kExitOk;
    auto now = (*client)->Get(flags_.job_id);
    if (!now.ok()) return Fail(now.status());  // e.g. 4: the coordinator cannot be reached
    if (IsTerminalJobState(now->state())) {
      // Its final checkpoint may have been committed after the folder was read, just before the
      // job ended.
      if (print_new()) return kExitOk;
      err_ << "job " << flags_.job_id << " ended (" << StateName(now->state())
           << ") before a new checkpoint was committed" << std::endl;
      return kExitFailed;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  err_ << "no new checkpoint of job " << flags_.job_id << " within " << flags_.wait_timeout_s
       << " s in " << spec->checkpoint.dir << NotHere(spec->checkpoint.dir) << std::endl;
  return kExitFailed;
}

int Command::Checkpoints() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto job = (*client)->Get(flags_.job_id);
  if (!job.ok()) return Fail(job.status());
  auto spec = common::ParseJobSpec(job->spec_yaml(), absl::StrCat("job ", flags_.job_id));
  if (!spec.ok()) return Fail(spec.status());
  const std::string& root = spec->checkpoint.dir;
  if (root.empty()) {
    // None to list, as for a folder without checkpoints; a document says so with empty lists.
    err_ << "job " << flags_.job_id << " takes no checkpoints (its spec has no checkpoint.dir)"
         << std::endl;
    if (IsDocumentFormat(format_)) {
      google::protobuf::Struct doc;
      (*doc.mutable_fields())["dir"].set_string_value("");
      (*doc.mutable_fields())["checkpoints"].mutable_list_value();
      (*doc.mutable_fields())["damaged"].mutable_list_value();
      out_ << ToDocument(doc, format_);
    }
    return kExitOk;
  }
  std::vector<absl::Status> damaged;
  auto list = embedding::ListCheckpoints(root, &damaged);
  if (!list.ok()) return Fail(list.status());
  std::vector<ChainState> states;
  for (const embedding::CheckpointManifest& m : *list) {
    states.push_back(CheckChain(root, m, flags_.verify));
  }
  if (IsDocumentFormat(format_)) {
    google::protobuf::Struct doc;
    (*doc.mutable_fields())["dir"].set_string_value(root);
    AddCheckpointEntries(*list, states,
                         (*doc.mutable_fields())["checkpoints"].mutable_list_value());
    AddDamaged(damaged, (*doc.mutable_fields())["damaged"].mutable_list_value());
    out_ << ToDocument(doc, format_);
    return kExitOk;
  }
  out_ << absl::StrFormat("%-20s %10s  %-20s %14s  %-11s  %-8s  %s\n", "NAME", "STEP", "CREATED",
                          "BYTES", "KIND", "STATE", "JOB");
  for (size_t i = 0; i < list->size(); ++i) {
    const embedding::CheckpointManifest& m = (*list)[i];
    out_ << absl::StrFormat("%-20s %10d  %-20s %14d  %-11s  %-8s  %s\n", m.name, m.step,
                            UtcTime(static_cast<int64_t>(std::llround(m.created_unix * 1000))),
                            m.total_bytes(), m.incremental ? "incremental" : "full",
                            states[i].state, m.job_id.empty() ? "-" : m.job_id);
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (!states[i].problem.empty()) {
      err_ << (*list)[i].name << " cannot be resumed from: " << states[i].problem << std::endl;
    }
  }
  for (const absl::Status& d : damaged) err_ << "damaged: " << d.message() << std::endl;
  if (list->empty()) err_ << "no committed checkpoint in " << root << NotHere(root) << std::endl;
  return kExitOk;
}

int Command::List() {
  dlrm::v1::JobState filter = dlrm::v1::JOB_STATE_UNSPECIFIED;
  if (!flags_.state.empty()) {
    // The flag's values are checked by the parser.
    (void)dlrm::v1::JobState_Parse(absl::StrCat("JOB_STATE_", absl::AsciiStrToUpper(flags_.state)),
                                   &filter);
  }
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto jobs = (*client)->List(filter);
  if (!jobs.ok()) return Fail(jobs.status());
  if (IsDocumentFormat(format_)) {
    dlrm::v1::ListJobsResponse response;
    for (auto& job : *jobs) *response.add_jobs() = job;
    out_ << ToDocument(response, format_);
    return kExitOk;
  }
  out_ << JobTable(*jobs, wide());
  return kExitOk;
}

int Command::Members() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto view = (*client)->Members();
  if (!view.ok()) return Fail(view.status());
  if (IsDocumentFormat(format_)) {
    out_ << ToDocument(*view, format_);
  } else {
    out_ << MemberTable(*view, absl::ToUnixMillis(absl::Now()), wide());
  }
  return kExitOk;
}

int Command::Version() {
  std::optional<std::string> server;
  std::string why;
  auto client = Connect();
  if (client.ok()) {
    auto view = (*client)->Members();
    if (view.ok()) {
      server = view->server_version().empty() ? std::string("unknown (older than 0.1.0)")
                                              : view->server_version();
    } else {
      why = std::string(view.status().message());
    }
  } else {
    why = std::string(client.status().message());
  }
  if (IsDocumentFormat(format_)) {
    out_ << VersionDocument(kDlrmctlVersion, server, format_);
  } else {
    out_ << "client: " << kDlrmctlVersion << "\n"
         << "server: " << (server ? *server : absl::StrCat("unknown (", why, ")")) << "\n";
  }
  return kExitOk;
}

int Command::Describe() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto job = (*client)->Get(flags_.job_id);
  if (!job.ok()) return Fail(job.status());
  if (IsDocumentFormat(format_)) {
    out_ << ToDocument(*job, format_);
    return kExitOk;
  }
  std::vector<std::string> checkpoints;
  auto spec = common::ParseJobSpec(job->spec_yaml(), absl::StrCat("job ", flags_.job_id));
  if (spec.ok() && !spec->checkpoint.dir.empty()) {
    auto list = embedding::ListCheckpoints(spec->checkpoint.dir);
    if (list.ok()) {
      for (const embedding::CheckpointManifest& m : *list) {
        const ChainState chain = CheckChain(spec->checkpoint.dir, m, /*verify=*/false);
        checkpoints.push_back(absl::StrFormat(
            "%s  step %d  %d bytes  %s%s%s", m.name, m.step, m.total_bytes(),
            m.incremental ? "incremental" : "full",
            m.job_id == job->job_id()
                ? ""
                : absl::StrCat("  (written by ", m.job_id.empty() ? "dlrm train" : m.job_id, ")"),
            chain.problem.empty() ? "" : absl::StrCat("  (broken: ", chain.problem, ")")));
      }
    } else {
      checkpoints.push_back(absl::StrCat("(", spec->checkpoint.dir,
                                         " cannot be read here: ", list.status().message(), ")"));
    }
  }
  out_ << JobDescription(*job, checkpoints);
  return kExitOk;
}

int Command::Logs() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto job = (*client)->Get(flags_.job_id);
  if (!job.ok()) return Fail(job.status());
  std::set<std::string> printed;
  std::vector<dlrm::v1::JobStateChange> history;
  auto print_new = [&](const dlrm::v1::Job& j) {
    for (const dlrm::v1::JobStateChange& change : j.history()) {
      if (!printed.insert(change.SerializeAsString()).second) continue;
      history.push_back(change);
      if (format_ == OutputFormat::kJsonl) {
        out_ << ToDocument(change, OutputFormat::kJsonl);
      } else if (!IsDocumentFormat(format_)) {
        out_ << HistoryLine(change) << "\n";
      }
    }
    out_ << std::flush;
  };
  print_new(*job);
  dlrm::v1::JobState state = job->state();
  if (flags_.follow && !IsTerminalJobState(state)) {
    auto last = (*client)->Watch(flags_.job_id, [&](const dlrm::v1::JobEvent& event) {
      print_new(event.job());
      return true;
    });
    if (!last.ok()) return Fail(last.status());
    state = last->state();
  }
  if (format_ == OutputFormat::kJson || format_ == OutputFormat::kYaml) {
    out_ << HistoryDocument(flags_.job_id, history, format_);
  }
  if (!flags_.follow) return kExitOk;
  return state == dlrm::v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitFailed;
}

int Command::Fail(const absl::Status& status, std::optional<int> code) {
  if (IsUsageStatus(status)) {
    err_ << "dlrmctl: " << absl::StripPrefix(status.message(), "dlrmctl: ")
         << "\nRun 'dlrmctl --help' for usage.\n";
    return kExitUsage;
  }
  err_ << "dlrmctl: " << status.message() << " [" << absl::StatusCodeToString(status.code())
       << "]\n";
  const int exit_code = code.value_or(ExitCodeForStatus(status));
  if (const std::string tls = TlsHandshakeFailure(status); !tls.empty()) {
    err_ << "dlrmctl: the coordinator at " << flags_.coordinator
         << " answered, but the TLS handshake failed: " << tls << ".\n";
  } else if (absl::IsDeadlineExceeded(status) && !unanswered_change_.empty()) {
    // The request may have reached a coordinator that answered too late: it is not gone.
    err_ << "dlrmctl: the coordinator at " << flags_.coordinator << " did not answer within "
         << "--timeout " << flags_.timeout_s << " s, but it may have " << unanswered_change_
         << ".\n";
  } else if (exit_code == kExitUnavailable && tls_ &&
             absl::StrContains(status.message(), "Socket closed")) {
    err_ << "dlrmctl: the coordinator at " << flags_.coordinator
         << " closed the connection during the TLS handshake. It does so when its CA did not "
            "sign this client's certificate (--tls-dir of another cluster?), and gRPC does not "
            "tell that apart from a coordinator going away, hence exit code 4: check that "
            "--tls-dir holds the admin certificate of the coordinator's CA.\n";
  } else if (exit_code == kExitUnavailable) {
    err_ << "dlrmctl: is a coordinator running at " << flags_.coordinator
         << "? Pass --coordinator HOST:PORT or set $DLRM_COORDINATOR. A coordinator with mutual "
            "TLS also needs --tls-dir (the admin certificate of its CA) and, when its "
            "certificate does not name that host, --tls-server-name.\n";
  }
  return exit_code;
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> Command::Connect() {
  CoordinatorClientOptions options;
  options.address = flags_.coordinator;
  options.timeout = absl::Seconds(flags_.timeout_s);
  if (absl::Status address =
          common::CheckHostPort(flags_.coordinator_given ? "--coordinator" : "$DLRM_COORDINATOR",
                                flags_.coordinator, common::kDialAddress);
      !address.ok()) {
    return UsageStatus(address);
  }
  TlsFlags tls = flags_.tls;
  absl::StatusOr<std::string> token = ReadClientToken(flags_.token_file);
  if (!token.ok()) return UsageStatus(token.status());
  tls.token = *std::move(token);
  absl::StatusOr<common::TransportSecurity> security = ResolveTls(tls, "", "dlrmctl");
  if (!security.ok()) return UsageStatus(security.status());
  options.security = *std::move(security);
  tls_ = options.security.tls();
  return CoordinatorClient::Create(options);
}

void Command::PrintJob(const dlrm::v1::Job& job) {
  if (IsDocumentFormat(format_)) {
    out_ << ToDocument(job, format_);
    return;
  }
  out_ << JobDetail(job, wide());
}

int Command::WatchUntilDone(CoordinatorClient& client, const std::string& job_id) {
  RunSpeed speed;
  auto last = client.Watch(job_id, [&](const dlrm::v1::JobEvent& event) {
    speed.Observe(event.job());
    if (format_ == OutputFormat::kJsonl) {
      out_ << ToDocument(event, format_) << std::flush;
    } else if (!IsDocumentFormat(format_)) {
      const std::string line = JobEventLine(event.job(), &speed);
      if (terminal_) {
        // On a terminal the running job's line is redrawn in place; other states stay.
        const bool running = event.job().state() == dlrm::v1::JOB_STATE_RUNNING;
        out_ << "\r\033[K" << line << (running ? "" : "\n") << std::flush;
        line_open_ = running;
      } else {
        out_ << line << std::endl;
      }
    }
    return true;
  });
  if (line_open_) out_ << "\n";
  line_open_ = false;
  if (!last.ok()) return Fail(last.status());
  if (format_ == OutputFormat::kJson || format_ == OutputFormat::kYaml) {
    out_ << ToDocument(*last, format_);
  }
  return last->state() == dlrm::v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitFailed;
}

}  // namespace dlrm::client::dlrmctl_internal
