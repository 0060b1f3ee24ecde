// The parts of the fuzz_rpc target (fuzz_rpc.cc: what it fuzzes, the input format and the
// entry points): the table of the methods it calls, the Cluster it calls them on
// (fuzz_rpc_cluster.cc) and the seed corpus (fuzz_rpc_seeds.cc). Single-threaded: the fuzzer calls
// one input at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.pb.h"

namespace dlrm::server {
class Coordinator;
class PsProcess;
}  // namespace dlrm::server

namespace dlrm::fuzz_rpc {

using google::protobuf::Message;
using google::protobuf::MethodDescriptor;

inline constexpr absl::Duration kDeadline = absl::Milliseconds(200);
inline constexpr char kFixtureJob[] = "job-1";
inline constexpr char kFixtureSpec[] =
    "name: fuzz\n"
    "model: {dense_features: 13, bottom_mlp: [8, 4], top_mlp: [8, 1], embedding_dim: 4}\n"
    // 26 tables: Criteo input's shape, which SubmitJob checks (the fixture loads two on the PS).
    "tables: {cardinalities: [10, 20, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, "
    "10, 10, 10, 10, 10, 10, 10, 10, 10]}\n"
    "checkpoint: {dir: /nonexistent/dlrm-fuzz-rpc}\n";

struct Method {
  const MethodDescriptor* descriptor;
  std::string path;  // "/dlrm.v1.Coordinator/Register"
  bool on_ps;
};

// The unary and server-streaming methods of the three services, in proto order.
const std::vector<Method>& Methods();

// One coordinator, one PS registered with it, clients of both, and what the answers taught.
class Cluster {
 public:
  // Starts a coordinator and a PS on loopback and makes the fixture; aborts when it cannot.
  static std::unique_ptr<Cluster> Create();

  // Stops the servers and removes the temporary folder.
  ~Cluster();

  // Sends `payload` to method `index`; returns the status, with the answer in *answer.
  grpc::Status Call(size_t index, bool credentials, std::string payload,
                    std::string* answer = nullptr, absl::Duration deadline = kDeadline);

  // Sends a message to method `name` (e.g. "Register") with kSetupDeadline.
  grpc::Status Call(const std::string& name, bool credentials, const Message& request,
                    std::string* answer = nullptr);

  // The index in Methods() of the method called `name`; aborts when there is none.
  static size_t IndexOf(const std::string& name);

  // After each input: false when the fixture should be made again.
  bool Tend();

  const std::string& checkpoint_root() const { return checkpoint_root_; }
  int64_t job_epoch() const { return job_epoch_; }
  const std::vector<std::string>& workers() const { return workers_; }
  const dlrm::v1::LoadJobRequest& fixture_load() const { return load_; }

 private:
  Cluster() = default;

  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }

  // The `ok` of the event `want`, which must come before the call's deadline plus kHangAfter.
  bool Await(intptr_t want, const Method& method, absl::Duration deadline = kDeadline);

  // A server-streaming call: the request, one answer, then a cancel; the status it ends with.
  grpc::Status Stream(const Method& method, grpc::GenericStub& stub,
                      const grpc::ByteBuffer& request, grpc::ClientContext* context);

  // Fills in the credentials a member holding them would send (see fuzz_rpc.cc's header comment).
  void AddCredentials(const Method& method, std::string* payload, grpc::ClientContext* context);

  // Keeps the keys an answer hands out (by field name, so that this file does not depend on which
  // messages carry them).
  void Learn(const Method& method, const std::string& bytes);
  void Learn(const Message& m);

  // Starts the servers in a fresh temporary folder, then MakeFixture(); false on a failure.
  bool Start();
  // Prints the failure; false.
  bool Fail(const absl::Status& status);
  bool Fail(const char* what, const grpc::Status& status);
  // Registers three workers, submits job-1 (2 workers) and loads its tables on the PS.
  bool MakeFixture();

  std::string dir_;
  std::string checkpoint_root_;
  std::unique_ptr<dlrm::server::Coordinator> coordinator_;
  std::unique_ptr<dlrm::server::PsProcess> ps_;
  std::thread ps_thread_;
  std::unique_ptr<grpc::GenericStub> coordinator_stub_;
  std::unique_ptr<grpc::GenericStub> ps_stub_;
  grpc::CompletionQueue cq_;
  std::map<std::string, std::string> member_keys_;
  std::map<std::string, std::string> job_grants_;
  // Member grants by (job id, job epoch), from the heartbeat answers of the job's ranks.
  std::map<std::pair<std::string, int64_t>, std::string> member_grants_;
  // The parameter server's member id, from a job's assignment: its key signs LoadJob requests.
  std::string ps_member_id_;
  std::vector<std::string> workers_;
  int64_t job_epoch_ = 0;
  dlrm::v1::LoadJobRequest load_;
};

// Keeps the servers and protobuf from logging every refused input.
void Quiet();

// Writes the seed corpus (corpus/rpc) to `dir` (DLRM_FUZZ_WRITE_SEEDS; fuzz_rpc_seeds.cc).
void WriteSeeds(const std::string& dir);

}  // namespace dlrm::fuzz_rpc
