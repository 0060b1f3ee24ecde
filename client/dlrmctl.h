// dlrmctl: the command-line client of the coordinator.
//
//   dlrmctl [--coordinator HOST:PORT] [--timeout SECONDS] [-o table|json] COMMAND
//     submit -f job.yaml [--workers N] [--ps N] [--wait]
//     status JOB      watch JOB      cancel JOB [--reason TEXT]
//     list [--state STATE]           members
//
// Exit codes: 0 success (for submit --wait and watch: the job SUCCEEDED); 1 an error (bad
// arguments, bad spec, unknown job, coordinator unreachable); 2 the job FAILED; 3 it was
// CANCELLED. Errors go to `err` with the server's message.
#pragma once

#include <ostream>
#include <string>

namespace dlrm::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitJobFailed = 2;
inline constexpr int kExitJobCancelled = 3;

// Runs dlrmctl on argv. `default_coordinator` is used when --coordinator is not given (main
// passes $DLRM_COORDINATOR or "127.0.0.1:50051").
int RunDlrmctl(int argc, const char* const* argv, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err);

}  // namespace dlrm::client
