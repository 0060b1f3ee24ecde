// Fuzz target: the request handling of every RPC of the three services (proto/coordinator.proto
// Coordinator, proto/jobs.proto Jobs, proto/ps.proto ParameterServer), served as `dlrm
// coordinator` and `dlrm ps` serve them: a Coordinator (server/coordinator.h) and a PsProcess
// (server/ps_process.h, registered with that coordinator) on loopback ports, plaintext, their data
// in a temporary folder. Any bytes get a status; a crash, a sanitizer report or a call that does
// not end is a finding.
//
// Input: byte 0 selects the method, i = byte0 % M over the M methods of the three services in
// proto order (WatchJob included: it is read once, then cancelled), and "with credentials" when
// (byte0 / M) is odd; the rest is the request, sent as it is (malformed bytes included) with a
// deadline of kDeadline. With credentials, a request that parses has the keys a real member would
// put in it filled in from the answers seen so far (Register answers a member key, a rank 0
// heartbeat a job grant, every rank's heartbeat its member grant): member_key for its member_id,
// the job grant of its job_id and the member grant of its job_id and job_epoch in the call's
// metadata, and a checkpoint directory starting with "@root" moved under the PS's checkpoint root.
// So the handlers behind the member and grant checks are reached too.
//
// State persists from input to input (found paths build on each other): a fixture of one PS, three
// workers and a RUNNING job "job-1" (2 workers, the PS holding its tables) is made at start and
// made again every kInputsPerCluster inputs, or sooner once the fixture is broken (job-1 ended, its
// tables unloaded); jobs loaded by inputs are unloaded past kMaxLoadedJobs.
//
// DLRM_FUZZ_RPC_STATS=1: prints the status codes per method at exit (how deep inputs get).
// DLRM_FUZZ_WRITE_SEEDS=DIR: writes the seed corpus (corpus/rpc: valid requests of every method,
// made against a fresh fixture) to DIR and exits.
//
// This file holds the entry points; the method table and the Cluster are in fuzz_rpc_cluster.h
// and .cc, the seed corpus in fuzz_rpc_seeds.cc.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_rpc_cluster.h"

namespace {

using dlrm::fuzz_rpc::Cluster;
using dlrm::fuzz_rpc::Methods;
using dlrm::fuzz_rpc::Quiet;
using dlrm::fuzz_rpc::WriteSeeds;

constexpr int64_t kInputsPerCluster = 5000;
constexpr int64_t kMinInputsBeforeRepair = 500;

// Status codes by method (DLRM_FUZZ_RPC_STATS).
std::vector<std::map<int, int64_t>>* g_stats = nullptr;
Cluster* g_cluster = nullptr;
int64_t g_inputs = 0;  // since the cluster was made

void AtExit() {
  if (g_stats != nullptr) {
    std::fprintf(stderr, "fuzz_rpc: status codes by method\n");
    for (size_t i = 0; i < Methods().size(); ++i) {
      std::string line;
      for (const auto& [code, n] : (*g_stats)[i]) {
        absl::StrAppend(&line, " ", absl::StatusCodeToString(static_cast<absl::StatusCode>(code)),
                        "=", n);
      }
      std::fprintf(stderr, "  %-40s%s\n", Methods()[i].path.c_str(), line.c_str());
    }
  }
  delete g_cluster;  // stops the servers and removes the temporary folder
  g_cluster = nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* dir = std::getenv("DLRM_FUZZ_WRITE_SEEDS"); dir != nullptr) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool started = [] {
    Quiet();
    if (std::getenv("DLRM_FUZZ_RPC_STATS") != nullptr) {
      g_stats = new std::vector<std::map<int, int64_t>>(Methods().size());
    }
    g_cluster = Cluster::Create().release();
    std::atexit(AtExit);
    return true;
  }();
  (void)started;
  if (size < 1) return 0;
  const size_t m = Methods().size();
  const size_t index = data[0] % m;
  const bool credentials = (data[0] / m) % 2 == 1;
  const grpc::StatusCode code =
      g_cluster
          ->Call(index, credentials, std::string(reinterpret_cast<const char*>(data + 1), size - 1))
          .error_code();
  if (g_stats != nullptr) ++(*g_stats)[index][static_cast<int>(code)];
  ++g_inputs;
  const bool healthy = g_cluster->Tend();
  if (g_inputs >= kInputsPerCluster || (!healthy && g_inputs >= kMinInputsBeforeRepair)) {
    delete g_cluster;
    g_cluster = Cluster::Create().release();
    g_inputs = 0;
  }
  return 0;
}
