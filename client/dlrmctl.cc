#include "client/dlrmctl.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/job_format.h"
#include "common/job_spec.h"

namespace dlrm::client {
namespace {

struct Flags {
  std::string coordinator;
  double timeout_s = 10;
  std::string output = "table";
  // submit
  std::string file;
  int workers = 1;
  int ps = 0;
  bool wait = false;
  // status, watch, cancel
  std::string job_id;
  std::string reason;
  // list
  std::string state;
};

int ExitCodeOf(dlrm::v1::JobState state) {
  switch (state) {
    case dlrm::v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case dlrm::v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitJobFailed;
  }
}

class Command {
 public:
  Command(const Flags& flags, std::ostream& out, std::ostream& err)
      : flags_(flags), out_(out), err_(err) {}

  int Fail(const absl::Status& status) {
    err_ << "dlrmctl: " << status.message() << " [" << absl::StatusCodeToString(status.code())
         << "]\n";
    return kExitError;
  }

  absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect() {
    CoordinatorClientOptions options;
    options.address = flags_.coordinator;
    options.timeout = absl::Seconds(flags_.timeout_s);
    return CoordinatorClient::Create(options);
  }

  void PrintJob(const dlrm::v1::Job& job) {
    out_ << (json() ? ToJson(job) + "\n" : JobDetail(job));
  }

  // Streams `job_id` until terminal; returns the exit code of its final state.
  int WatchUntilDone(CoordinatorClient& client, const std::string& job_id) {
    auto last = client.Watch(job_id, [this](const dlrm::v1::JobEvent& event) {
      out_ << (json() ? ToJson(event) : JobEventLine(event.job())) << std::endl;
      return true;
    });
    if (!last.ok()) return Fail(last.status());
    return ExitCodeOf(last->state());
  }

  int Submit() {
    // Parsed here first: errors name the file, and relative data paths are resolved against
    // the spec's folder (absolute), so workers started elsewhere find the data.
    std::error_code ec;
    const std::string path = std::filesystem::absolute(flags_.file, ec).string();
    auto spec = common::LoadJobSpec(ec ? flags_.file : path);
    if (!spec.ok()) return Fail(spec.status());
    const std::string yaml = common::JobSpecToYaml(*spec);
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    auto job = (*client)->Submit(yaml, {.workers = flags_.workers, .ps = flags_.ps});
    if (!job.ok()) return Fail(job.status());
    if (!flags_.wait) {
      if (json()) {
        out_ << ToJson(*job) << "\n";
      } else {
        out_ << job->job_id() << "\n";
      }
      return kExitOk;
    }
    if (!json()) out_ << "submitted " << job->job_id() << std::endl;
    return WatchUntilDone(**client, job->job_id());
  }

  int Status() {
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    auto job = (*client)->Get(flags_.job_id);
    if (!job.ok()) return Fail(job.status());
    PrintJob(*job);
    return kExitOk;
  }

  int Watch() {
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    return WatchUntilDone(**client, flags_.job_id);
  }

  int Cancel() {
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    auto job = (*client)->Cancel(flags_.job_id, flags_.reason);
    if (!job.ok()) return Fail(job.status());
    PrintJob(*job);
    return kExitOk;
  }

  int List() {
    dlrm::v1::JobState filter = dlrm::v1::JOB_STATE_UNSPECIFIED;
    if (!flags_.state.empty()) {
      const std::string name = absl::StrCat("JOB_STATE_", absl::AsciiStrToUpper(flags_.state));
      if (!dlrm::v1::JobState_Parse(name, &filter)) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--state '", flags_.state,
                         "' is not one of pending, running, succeeded, failed, cancelled")));
      }
    }
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    auto jobs = (*client)->List(filter);
    if (!jobs.ok()) return Fail(jobs.status());
    if (json()) {
      dlrm::v1::ListJobsResponse response;
      for (auto& job : *jobs) *response.add_jobs() = job;
      out_ << ToJson(response) << "\n";
    } else {
      out_ << JobTable(*jobs);
    }
    return kExitOk;
  }

  int Members() {
    auto client = Connect();
    if (!client.ok()) return Fail(client.status());
    auto view = (*client)->Members();
    if (!view.ok()) return Fail(view.status());
    out_ << (json() ? ToJson(*view) + "\n" : MemberTable(*view, absl::ToUnixMillis(absl::Now())));
    return kExitOk;
  }

 private:
  bool json() const { return flags_.output == "json"; }

  const Flags& flags_;
  std::ostream& out_;
  std::ostream& err_;
};

}  // namespace

int RunDlrmctl(int argc, const char* const* argv, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err) {
  Flags flags;
  flags.coordinator = default_coordinator;
  CLI::App app{"dlrmctl: submit, watch and inspect DLRM training jobs on a coordinator"};
  app.fallthrough();
  app.require_subcommand(1);
  app.add_option("--coordinator", flags.coordinator,
                 "coordinator address host:port (default $DLRM_COORDINATOR or 127.0.0.1:50051)");
  app.add_option("--timeout", flags.timeout_s, "deadline of each call, seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("-o,--output", flags.output, "output format")
      ->check(CLI::IsMember({"table", "json"}));

  CLI::App* submit = app.add_subcommand("submit", "submit a job spec (YAML)");
  submit->add_option("-f,--file", flags.file, "job spec YAML file")->required();
  submit->add_option("--workers", flags.workers, "workers to run on")->check(CLI::Range(1, 1024));
  submit->add_option("--ps", flags.ps, "parameter servers (0: every PS alive at start)")
      ->check(CLI::Range(0, 1024));
  submit->add_flag("--wait", flags.wait, "watch until the job ends; exit code tells the result");
  CLI::App* status = app.add_subcommand("status", "show one job");
  status->add_option("job", flags.job_id, "job id")->required();
  CLI::App* watch = app.add_subcommand("watch", "stream a job's progress until it ends");
  watch->add_option("job", flags.job_id, "job id")->required();
  CLI::App* cancel = app.add_subcommand("cancel", "cancel a pending or running job");
  cancel->add_option("job", flags.job_id, "job id")->required();
  cancel->add_option("--reason", flags.reason, "recorded in the job's message");
  CLI::App* list = app.add_subcommand("list", "list jobs, oldest first");
  list->add_option("--state", flags.state, "only jobs in this state");
  CLI::App* members = app.add_subcommand("members", "list cluster members and the shard map");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitError;
  }
  Command command(flags, out, err);
  if (submit->parsed()) return command.Submit();
  if (status->parsed()) return command.Status();
  if (watch->parsed()) return command.Watch();
  if (cancel->parsed()) return command.Cancel();
  if (list->parsed()) return command.List();
  if (members->parsed()) return command.Members();
  return kExitError;
}

}  // namespace dlrm::client
