// dlrmctl's commands (client/dlrmctl.h is its interface): the parsed flags, and a Command whose
// methods run one command each against the coordinator. client/dlrmctl.cc parses the command line
// and calls them; client/dlrmctl_command.cc does the work. Internal to those two files.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/job_format.h"
#include "client/output_format.h"
#include "client/tls_flags.h"
#include "proto/jobs.pb.h"

namespace dlrm::client::dlrmctl_internal {

struct Flags {
  std::string coordinator;
  bool coordinator_given = false;  // by --coordinator (else $DLRM_COORDINATOR or the default)
  TlsFlags tls;            // --tls-dir (or DLRM_TLS_DIR): the admin identity of `dlrm certs`
  std::string token_file;  // --token-file (or DLRM_TOKEN): a bearer token instead
  double timeout_s = 10;
  std::string output = "table";
  // submit
  std::string file;
  int workers = 1;
  int ps = 0;
  bool wait = false;
  bool follow = false;          // logs -f
  double wait_timeout_s = 600;  // checkpoint --wait
  bool verify = false;          // checkpoints --verify
  std::string resume_from;      // submit: checkpoint.resume_from of the submitted spec
  // status, watch, cancel
  std::string job_id;
  std::string reason;
  // list
  std::string state;
};

// gRPC reports a failed TLS handshake as UNAVAILABLE, like a coordinator that is down; only its
// message tells them apart. Empty when `status` is not one; else what failed, for people.
std::string TlsHandshakeFailure(const absl::Status& status);

class Command {
 public:
  Command(const Flags& flags, std::ostream& out, std::ostream& err);

  // One method per command; each returns the exit code (client/dlrmctl.h).
  int Submit();
  int Status();
  int Watch();
  int Cancel();

  // Asks a running job for a checkpoint; with --wait, waits until a checkpoint newer than the
  // newest one before the request is committed in its folder (this client must see the folder).
  int Checkpoint();

  // The committed checkpoints of a job, read from its checkpoint folder (the shared volume: this
  // client must see the path the job's spec names).
  int Checkpoints();

  int List();
  int Members();

  // The client's version, and the coordinator's when it answers (null / "unknown" otherwise:
  // this command works without a cluster).
  int Version();

  // The job in detail: members, state history with reasons and times, checkpoints, spec.
  int Describe();

  // The job's event log: every state change with its reason; with -f, new ones as they come
  // until the job ends, and the exit code as for watch (1 when it FAILED or was CANCELLED, also
  // when it had already). -o json and yaml print one document, {"job_id", "history"} (with -f
  // once the job ended); jsonl a change per line as it comes.
  int Logs();

 private:
  bool wide() const { return format_ == OutputFormat::kWide; }

  // Prints `status` and returns `code`, by default the one its status code maps to (kExitUsage
  // for a flag's value that cannot work).
  int Fail(const absl::Status& status, std::optional<int> code = std::nullopt);

  // The client the flags describe. A flag's value that cannot work is a usage error
  // (UsageStatus), found before anything is dialled.
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect();

  void PrintJob(const dlrm::v1::Job& job);

  // Streams `job_id` until it ends: a line per change for people, a JSON event per line for
  // jsonl, the final job alone for json and yaml. Returns the exit code of its final state.
  int WatchUntilDone(CoordinatorClient& client, const std::string& job_id);

  const Flags& flags_;
  const OutputFormat format_;
  std::ostream& out_;
  std::ostream& err_;
  // Table output to a terminal: watch redraws the running job's line (plain lines otherwise).
  const bool terminal_;
  bool line_open_ = false;
  bool tls_ = false;  // Connect chose TLS
  // Set just before a call that changes something (submit, cancel, a checkpoint request): when
  // its deadline passes, the coordinator may still have made the change, and Fail says so, and
  // how to check, instead of asking whether a coordinator runs there.
  std::string unanswered_change_;
};

}  // namespace dlrm::client::dlrmctl_internal
