// dlrmctl: the command-line client of the coordinator.
//
//   dlrmctl [--coordinator HOST:PORT] [--timeout SECONDS] [-o FORMAT] COMMAND
//     submit -f job.yaml [--workers N] [--ps N] [--wait] [--resume-from CHECKPOINT]
//     status JOB      describe JOB   logs JOB [-f]   watch JOB      cancel JOB [--reason TEXT]
//     list [--state STATE]   checkpoint JOB [--wait]   checkpoints JOB   members   version
//
// Output (-o): `table` (default) and `wide` for people; `json`, `yaml` and `jsonl` print ONE
// document per call (client/job_format.h): the job (status, cancel, submit), the job list
// ({"jobs": [...]}), the cluster view (members), the versions, the job's state changes (logs:
// {"job_id": ..., "history": [...]}). Event streams (watch, submit --wait) print a line per change
// for people, one JSON event per line under `jsonl`, and only the final job under `json` and
// `yaml`; `logs` prints a state change per line under `jsonl`.
//
// Exit codes (kExit*): 0 success; 1 the job FAILED or was CANCELLED (watch, submit --wait, logs
// -f), or any error without a code of its own; 2 usage (bad flag or value, unknown command: also
// a --coordinator without a port, TLS files or a token file that cannot be read); 3 not found
// (unknown job); 4 coordinator unavailable (unreachable, or no answer within --timeout: watch too,
// for its first answer); 5 unauthenticated or permission denied (also a TLS handshake that the
// coordinator answered but that failed: its certificate not signed by the client's CA). Errors go
// to `err` with the server's message.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "common/version.h"

namespace dlrm::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the job failed or was cancelled; any other error
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitUnavailable = 4;
inline constexpr int kExitDenied = 5;

// The client's version: the build's (common/version.h).
inline constexpr const char* kDlrmctlVersion = common::kVersion;

// The exit code of a failed call: NOT_FOUND 3; UNAVAILABLE and DEADLINE_EXCEEDED 4;
// UNAUTHENTICATED and PERMISSION_DENIED 5, and so is an UNAVAILABLE whose message is gRPC's for a
// failed TLS handshake (a peer that answered: "Ssl handshake failed", a certificate that does not
// verify or name the host); any other error 1; OK 0.
int ExitCodeForStatus(const absl::Status& status);

// Runs dlrmctl on argv. `default_coordinator` is used when --coordinator is not given (main
// passes $DLRM_COORDINATOR or "127.0.0.1:50051").
int RunDlrmctl(int argc, const char* const* argv, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err);

}  // namespace dlrm::client
