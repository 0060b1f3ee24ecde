#include "client/dlrmctl.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/dlrmctl_command.h"
#include "client/output_format.h"
#include "client/tls_flags.h"

namespace dlrm::client {
namespace {

using dlrmctl_internal::Command;
using dlrmctl_internal::Flags;

constexpr const char* kCommands[] = {"submit",      "status",  "describe", "logs",
                                     "watch",       "cancel",  "list",     "checkpoint",
                                     "checkpoints", "members", "version"};

constexpr char kFooter[] = R"(Output (-o):
  table, wide   for people (wide: more columns)
  json, yaml    one document per call; watch and submit --wait print only the final job, logs
                {"job_id", "history"}
  jsonl         one line per document; watch and submit --wait print one JSON event per line,
                logs one state change per line

Exit codes:
  0  success (watch, submit --wait, logs -f: the job SUCCEEDED)
  1  the job FAILED or was CANCELLED, or an error without a code of its own
  2  usage: unknown command, bad flag or value (also an address without a port, TLS or token
     files that cannot be read)
  3  not found: no such job
  4  coordinator unavailable: unreachable, or no answer within --timeout (watch: its first)
  5  unauthenticated or permission denied (also a TLS handshake the coordinator answered but
     that failed, e.g. an admin certificate of another CA)
)";

// --timeout and --wait-timeout: a finite number of seconds > 0.
CLI::Validator PositiveSeconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double seconds = 0;
        if (absl::SimpleAtod(value, &seconds) && std::isfinite(seconds) && seconds > 0) return "";
        return absl::StrCat("'", value, "' is not a number of seconds > 0");
      },
      "SECONDS");
}

// --workers and --ps: a whole number in [lo, hi] ("2.5" and "abc" are not "out of range").
CLI::Validator WholeNumber(int lo, int hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        int n = 0;
        if (absl::SimpleAtoi(value, &n) && n >= lo && n <= hi) return "";
        return absl::StrCat("'", value, "' is not a whole number from ", lo, " to ", hi);
      },
      absl::StrCat("INT in [", lo, " - ", hi, "]"));
}

// A job id argument: not empty (`status ""`).
CLI::Validator JobId() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        return value.empty() ? "the job id is empty (give one, e.g. job-1)" : "";
      },
      "JOB");
}

// The first argument that is neither an option nor a global option's value: the command the
// user meant to run.
std::optional<std::string> CommandWord(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return i + 1 < argc ? std::optional<std::string>(argv[i + 1]) : std::nullopt;
    if (arg.empty() || arg.front() != '-') return std::string(arg);
    if (arg == "--coordinator" || arg == "--timeout" || arg == "-o" || arg == "--output" ||
        arg == "--tls-dir" || arg == "--tls-cert" || arg == "--tls-key" || arg == "--tls-ca" ||
        arg == "--tls-server-name" || arg == "--token-file") {
      ++i;
    }
  }
  return std::nullopt;
}

// Usage errors exit kExitUsage. A missing or unknown command names the commands that exist
// (CLI11 would only say that a subcommand is required).
int UsageError(const CLI::ParseError& e, int argc, const char* const* argv, std::ostream& err) {
  const std::string commands = absl::StrJoin(kCommands, ", ");
  const std::optional<std::string> word = CommandWord(argc, argv);
  const bool known = word.has_value() && std::find(std::begin(kCommands), std::end(kCommands),
                                                   *word) != std::end(kCommands);
  std::string help = "dlrmctl --help";
  if (!word.has_value()) {
    err << "dlrmctl: a command is required; commands: " << commands << "\n";
  } else if (!known) {
    err << "dlrmctl: unknown command \"" << *word << "\"; commands: " << commands << "\n";
  } else {
    err << "dlrmctl " << *word << ": " << e.what() << "\n";
    help = absl::StrCat("dlrmctl ", *word, " --help");
  }
  err << "Run '" << help << "' for usage.\n";
  return kExitUsage;
}

}  // namespace

int ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
      // A coordinator that answered, but whose TLS handshake failed: not one that is down.
      return dlrmctl_internal::TlsHandshakeFailure(status).empty() ? kExitUnavailable : kExitDenied;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitDenied;
    default:
      return kExitFailed;
  }
}

int RunDlrmctl(int argc, const char* const* argv, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err) {
  Flags flags;
  flags.coordinator = default_coordinator;
  CLI::App app{"dlrmctl: submit, watch and inspect DLRM training jobs on a coordinator", "dlrmctl"};
  app.fallthrough();
  app.require_subcommand(1);
  app.footer(kFooter);
  CLI::Option* coordinator = app.add_option(
      "--coordinator", flags.coordinator,
      "coordinator address host:port (default $DLRM_COORDINATOR or 127.0.0.1:50051)");
  app.add_option("--timeout", flags.timeout_s,
                 "deadline of each call, and of the first answer of a watch, seconds")
      ->check(PositiveSeconds())
      ->capture_default_str();
  app.add_option("-o,--output", flags.output, "output format: table, wide, json, yaml, jsonl")
      ->check(CLI::IsMember(OutputFormatNames()));
  AddTlsFlags(&app, &flags.tls);
  app.add_option("--token-file", flags.token_file,
                 "file whose first line is a bearer token of the coordinator's --tokens "
                 "(admin or viewer; env DLRM_TOKEN); with --tls-ca, no certificate is needed");

  CLI::App* submit = app.add_subcommand("submit", "submit a job spec (YAML)");
  submit->add_option("-f,--file", flags.file, "job spec YAML file")->required();
  submit->add_option("--workers", flags.workers, "workers to run on")
      ->check(WholeNumber(1, 1024))
      ->capture_default_str();
  submit->add_option("--ps", flags.ps, "parameter servers (0: every PS alive at start)")
      ->check(WholeNumber(0, 1024))
      ->capture_default_str();
  submit->add_flag("--wait", flags.wait, "watch until the job ends; exit code tells the result");
  submit->add_option("--resume-from", flags.resume_from,
                     "continue from a checkpoint, or the newest in a checkpoint folder "
                     "(docs/CHECKPOINTS.md)");
  CLI::App* status = app.add_subcommand("status", "show one job");
  status->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  CLI::App* describe = app.add_subcommand(
      "describe",
      "show a job in detail: members, state history, checkpoints, spec (-o json|yaml: the job "
      "as 'status' prints it; 'checkpoints -o json' lists the checkpoints)");
  describe->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  CLI::App* logs = app.add_subcommand("logs", "print a job's state changes with their reasons");
  logs->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  logs->add_flag("-f,--follow", flags.follow, "keep printing new ones until the job ends");
  CLI::App* watch = app.add_subcommand("watch", "stream a job's progress until it ends");
  watch->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  CLI::App* cancel = app.add_subcommand("cancel", "cancel a pending or running job");
  cancel->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  cancel->add_option("--reason", flags.reason, "recorded in the job's message");
  CLI::App* list = app.add_subcommand("list", "list jobs, oldest first");
  list->add_option("--state", flags.state,
                   "only jobs in this state: pending, running, recovering, succeeded, failed, "
                   "cancelled")
      ->transform(
          CLI::IsMember({"pending", "running", "recovering", "succeeded", "failed", "cancelled"},
                        CLI::ignore_case));
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "ask a running job for a checkpoint now (taken within 50 steps)");
  checkpoint->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  checkpoint->add_flag("--wait", flags.wait,
                       "wait until it is committed, then print its path (reads the job's "
                       "checkpoint folder)");
  checkpoint->add_option("--wait-timeout", flags.wait_timeout_s, "seconds --wait waits")
      ->check(PositiveSeconds())
      ->capture_default_str();
  CLI::App* checkpoints = app.add_subcommand(
      "checkpoints",
      "list a job's committed checkpoints (reads its checkpoint folder; none for a job without "
      "checkpoint.dir)");
  checkpoints->add_option("job", flags.job_id, "job id")->required()->check(JobId());
  checkpoints->add_flag("--verify", flags.verify,
                        "also check the size and CRC32C of every file of every chain (reads all "
                        "their bytes)");
  CLI::App* members =
      app.add_subcommand("members", "list cluster members (ids and names) and the shard map");
  CLI::App* version = app.add_subcommand("version", "print the client's and server's versions");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    return UsageError(e, argc, argv, err);
  }
  flags.coordinator_given = coordinator->count() > 0;
  Command command(flags, out, err);
  if (submit->parsed()) return command.Submit();
  if (status->parsed()) return command.Status();
  if (describe->parsed()) return command.Describe();
  if (logs->parsed()) return command.Logs();
  if (watch->parsed()) return command.Watch();
  if (cancel->parsed()) return command.Cancel();
  if (list->parsed()) return command.List();
  if (checkpoint->parsed()) return command.Checkpoint();
  if (checkpoints->parsed()) return command.Checkpoints();
  if (members->parsed()) return command.Members();
  if (version->parsed()) return command.Version();
  return kExitUsage;
}

}  // namespace dlrm::client
