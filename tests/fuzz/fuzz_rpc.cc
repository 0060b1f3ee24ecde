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
// heartbeat a job grant): member_key for its member_id, the job grant of its job_id in the call's
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
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"
#include "proto/ps.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
// clang: the generated raw-method classes PsService derives from (ps.grpc.pb.h) hide the typed
// Lookup and PushGradients (-Woverloaded-virtual); the same holds in server/ps_service.cc.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Woverloaded-virtual"
#endif
#include "server/ps_process.h"
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

namespace {

namespace fs = std::filesystem;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::MethodDescriptor;

constexpr absl::Duration kDeadline = absl::Milliseconds(200);
// Of the calls that make the fixture (LoadJob creates RocksDB stores).
constexpr absl::Duration kSetupDeadline = absl::Seconds(30);
// A call that has not ended this long after its deadline hangs.
constexpr absl::Duration kHangAfter = absl::Seconds(30);
constexpr int64_t kInputsPerCluster = 5000;
constexpr int64_t kMinInputsBeforeRepair = 500;
constexpr size_t kMaxLoadedJobs = 4;
// Metadata that carries a job grant to a parameter server (common/grants.h kJobGrantMetadata).
constexpr char kJobGrantMetadata[] = "x-dlrm-job-grant";
constexpr char kFixtureJob[] = "job-1";
constexpr char kFixtureSpec[] =
    "name: fuzz\n"
    "model: {dense_features: 13, bottom_mlp: [8, 4], top_mlp: [8, 1], embedding_dim: 4}\n"
    "tables: {cardinalities: [10, 20]}\n"
    "checkpoint: {dir: /nonexistent/dlrm-fuzz-rpc}\n";

struct Method {
  const MethodDescriptor* descriptor;
  std::string path;  // "/dlrm.v1.Coordinator/Register"
  bool on_ps;
};

const std::vector<Method>& Methods() {
  static const std::vector<Method>* methods = [] {
    auto* out = new std::vector<Method>();
    // Referencing the messages links their files into the generated pool.
    const google::protobuf::FileDescriptor* files[] = {
        dlrm::v1::RegisterRequest::descriptor()->file(),
        dlrm::v1::SubmitJobRequest::descriptor()->file(),
        dlrm::v1::LoadJobRequest::descriptor()->file()};
    for (const auto* file : files) {
      for (int s = 0; s < file->service_count(); ++s) {
        const google::protobuf::ServiceDescriptor* service = file->service(s);
        for (int m = 0; m < service->method_count(); ++m) {
          const MethodDescriptor* method = service->method(m);
          if (method->client_streaming()) continue;  // none today
          out->push_back({method, absl::StrCat("/", service->full_name(), "/", method->name()),
                          service->name() == "ParameterServer"});
        }
      }
    }
    if (out->empty() || out->size() > 127) std::abort();
    return out;
  }();
  return *methods;
}

std::unique_ptr<Message> NewMessage(const Descriptor* type) {
  const Message* prototype =
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(type);
  if (prototype == nullptr) std::abort();
  return std::unique_ptr<Message>(prototype->New());
}

// The string field `name` of `m`, or nullptr when it has none.
const FieldDescriptor* StringField(const Message& m, const char* name) {
  const FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  return f != nullptr && !f->is_repeated() && f->type() == FieldDescriptor::TYPE_STRING ? f
                                                                                        : nullptr;
}

std::string GetString(const Message& m, const char* name) {
  const FieldDescriptor* f = StringField(m, name);
  return f == nullptr ? std::string() : m.GetReflection()->GetString(m, f);
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One coordinator, one PS registered with it, clients of both, and what the answers taught.
class Cluster {
 public:
  static std::unique_ptr<Cluster> Create() {
    std::unique_ptr<Cluster> c(new Cluster());
    if (!c->Start()) {
      std::fprintf(stderr, "fuzz_rpc: cannot start the cluster\n");
      std::abort();
    }
    return c;
  }

  ~Cluster() {
    if (ps_ != nullptr) ps_->Shutdown();
    if (ps_thread_.joinable()) ps_thread_.join();
    ps_.reset();
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    coordinator_.reset();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Sends `payload` to method `index`; returns the status, with the answer in *answer.
  grpc::Status Call(size_t index, bool credentials, std::string payload,
                    std::string* answer = nullptr, absl::Duration deadline = kDeadline) {
    const Method& method = Methods()[index];
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    if (credentials) AddCredentials(method, &payload, &context);
    grpc::GenericStub& stub = method.on_ps ? *ps_stub_ : *coordinator_stub_;
    grpc::Status status;
    grpc::ByteBuffer response;
    const grpc::ByteBuffer request = ToBuffer(payload);
    if (method.descriptor->server_streaming()) {
      status = Stream(method, stub, request, &context);
    } else {
      std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
          stub.PrepareUnaryCall(&context, method.path, request, &cq_);
      call->StartCall();
      call->Finish(&response, &status, Tag(1));
      (void)Await(1, method, deadline);
    }
    if (status.ok()) {
      std::string bytes = FromBuffer(response);
      if (!method.descriptor->server_streaming()) Learn(method, bytes);
      if (answer != nullptr) *answer = std::move(bytes);
    }
    return status;
  }

  // Sends a message to method `name` (e.g. "Register") with kSetupDeadline.
  grpc::Status Call(const std::string& name, bool credentials, const Message& request,
                    std::string* answer = nullptr) {
    return Call(IndexOf(name), credentials, request.SerializeAsString(), answer, kSetupDeadline);
  }

  static size_t IndexOf(const std::string& name) {
    for (size_t i = 0; i < Methods().size(); ++i) {
      if (Methods()[i].descriptor->name() == name) return i;
    }
    std::fprintf(stderr, "fuzz_rpc: no method %s\n", name.c_str());
    std::abort();
  }

  // After each input: false when the fixture should be made again.
  bool Tend() {
    dlrm::server::PsService& ps = ps_->server().service();
    std::vector<std::string> jobs = ps.job_ids();
    if (jobs.size() > kMaxLoadedJobs) {
      for (const std::string& id : jobs) {
        if (id != kFixtureJob) (void)ps.DoUnloadJob(id);
      }
    }
    // An input unloaded the fixture's tables (UnloadJob with its grant): load them again.
    if (!ps.DoGetStats(kFixtureJob).ok() && !ps.DoLoadJob(load_).ok()) return false;
    absl::StatusOr<dlrm::v1::Job> job = coordinator_->state().GetJob(kFixtureJob);
    return job.ok() && job->state() == dlrm::v1::JOB_STATE_RUNNING;
  }

  const std::string& checkpoint_root() const { return checkpoint_root_; }
  int64_t job_epoch() const { return job_epoch_; }
  const std::vector<std::string>& workers() const { return workers_; }
  const dlrm::v1::LoadJobRequest& fixture_load() const { return load_; }

 private:
  Cluster() = default;

  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }

  // The `ok` of the event `want`, which must come before the call's deadline plus kHangAfter.
  bool Await(intptr_t want, const Method& method, absl::Duration deadline = kDeadline) {
    void* tag = nullptr;
    bool ok = false;
    const auto limit =
        std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline + kHangAfter);
    if (cq_.AsyncNext(&tag, &ok, limit) != grpc::CompletionQueue::GOT_EVENT || tag != Tag(want)) {
      std::fprintf(stderr, "fuzz_rpc: %s did not end %s after its deadline\n", method.path.c_str(),
                   absl::FormatDuration(kHangAfter).c_str());
      std::abort();
    }
    return ok;
  }

  // A server-streaming call: the request, one answer, then a cancel; the status it ends with.
  grpc::Status Stream(const Method& method, grpc::GenericStub& stub,
                      const grpc::ByteBuffer& request, grpc::ClientContext* context) {
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub.PrepareCall(context, method.path, &cq_);
    call->StartCall(Tag(1));
    if (Await(1, method)) {
      call->Write(request, Tag(2));
      if (Await(2, method)) {
        call->WritesDone(Tag(3));
        (void)Await(3, method);
      }
      grpc::ByteBuffer event;
      call->Read(&event, Tag(4));
      if (Await(4, method)) {
        context->TryCancel();
        for (int i = 0; i < 1000; ++i) {
          call->Read(&event, Tag(4));
          if (!Await(4, method)) break;
        }
      }
    }
    grpc::Status status;
    call->Finish(&status, Tag(5));
    (void)Await(5, method);
    return status;
  }

  // Fills in the credentials a member holding them would send (see the header comment).
  void AddCredentials(const Method& method, std::string* payload, grpc::ClientContext* context) {
    std::unique_ptr<Message> request = NewMessage(method.descriptor->input_type());
    if (!request->ParseFromString(*payload)) return;
    const google::protobuf::Reflection* r = request->GetReflection();
    const FieldDescriptor* key = StringField(*request, "member_key");
    if (key != nullptr) {
      auto it = member_keys_.find(GetString(*request, "member_id"));
      if (it != member_keys_.end()) r->SetString(request.get(), key, it->second);
    }
    const FieldDescriptor* directory = StringField(*request, "directory");
    if (directory != nullptr) {
      const std::string d = r->GetString(*request, directory);
      absl::string_view rest = d;
      if (absl::ConsumePrefix(&rest, "@root")) {
        r->SetString(request.get(), directory, absl::StrCat(checkpoint_root_, rest));
      }
    }
    auto grant = job_grants_.find(GetString(*request, "job_id"));
    if (grant != job_grants_.end()) context->AddMetadata(kJobGrantMetadata, grant->second);
    *payload = request->SerializeAsString();
  }

  // Keeps the keys an answer hands out (by field name, so that this file does not depend on which
  // messages carry them).
  void Learn(const Method& method, const std::string& bytes) {
    std::unique_ptr<Message> answer = NewMessage(method.descriptor->output_type());
    if (answer->ParseFromString(bytes)) Learn(*answer);
  }

  void Learn(const Message& m) {
    const std::string id = GetString(m, "member_id");
    const std::string key = GetString(m, "member_key");
    if (!id.empty() && !key.empty()) member_keys_[id] = key;
    const std::string grant = GetString(m, "job_grant");
    const google::protobuf::Reflection* r = m.GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r->ListFields(m, &fields);
    for (const FieldDescriptor* f : fields) {
      if (f->is_repeated() || f->type() != FieldDescriptor::TYPE_MESSAGE) continue;
      const Message& sub = r->GetMessage(m, f);
      if (!grant.empty() && f->name() == "job") {
        const std::string job = GetString(sub, "job_id");
        if (!job.empty()) job_grants_[job] = grant;
      }
      Learn(sub);
    }
  }

  bool Start() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/dlrm-fuzz-rpc-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) return false;
    dir_ = pattern;
    checkpoint_root_ = absl::StrCat(dir_, "/checkpoints");
    std::error_code ec;
    fs::create_directories(checkpoint_root_, ec);
    if (ec) return false;

    dlrm::server::CoordinatorOptions coordinator;
    coordinator.listen_address = "127.0.0.1:0";
    coordinator.data_dir = absl::StrCat(dir_, "/coordinator");
    coordinator.lease_ttl = absl::Hours(1);  // the fixture's workers do not heartbeat
    coordinator.metrics_port = -1;
    auto created = dlrm::server::Coordinator::Create(coordinator);
    if (!created.ok()) return Fail(created.status());
    coordinator_ = std::move(*created);
    if (absl::Status s = coordinator_->Start(); !s.ok()) return Fail(s);

    dlrm::server::PsProcessOptions ps;
    ps.coordinator = coordinator_->address();
    ps.name = "fuzz-ps";
    ps.server.listen_address = "127.0.0.1:0";
    ps.server.data_dir = absl::StrCat(dir_, "/ps");
    ps.server.memory_budget_bytes = 64 << 20;
    ps.server.num_threads = 2;
    ps.server.checkpoint_root = checkpoint_root_;
    auto ps_created = dlrm::server::PsProcess::Create(ps);
    if (!ps_created.ok()) return Fail(ps_created.status());
    ps_ = std::move(*ps_created);
    ps_thread_ = std::thread([this] { (void)ps_->Run(); });

    for (const auto& [stub, address] : {std::pair{&coordinator_stub_, coordinator_->address()},
                                        std::pair{&ps_stub_, ps_->server().address()}}) {
      auto channel = dlrm::common::MakeChannel({.target = address});
      if (!channel.ok()) return Fail(channel.status());
      *stub = std::make_unique<grpc::GenericStub>(*channel);
    }
    return MakeFixture();
  }

  bool Fail(const absl::Status& status) {
    std::fprintf(stderr, "fuzz_rpc: %s\n", status.ToString().c_str());
    return false;
  }
  bool Fail(const char* what, const grpc::Status& status) {
    return Fail(absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                             absl::StrCat(what, ": ", status.error_message())));
  }

  bool MakeFixture() {
    // The PS registers on its own thread.
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (coordinator_->state().ClusterView().shard_map_size() == 0) {
      if (absl::Now() > give_up) return Fail(absl::DeadlineExceededError("PS did not register"));
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (int i = 0; i < 3; ++i) {
      dlrm::v1::RegisterRequest reg;
      reg.set_role(dlrm::v1::ROLE_WORKER);
      reg.set_address(absl::StrCat("127.0.0.1:", 1000 + i));
      reg.set_name(absl::StrCat("fuzz-worker-", i));
      std::string bytes;
      dlrm::v1::RegisterResponse answer;
      if (grpc::Status s = Call("Register", false, reg, &bytes);
          !s.ok() || !answer.ParseFromString(bytes)) {
        return Fail("Register", s);
      }
      workers_.push_back(answer.member_id());
    }
    dlrm::v1::SubmitJobRequest submit;
    submit.set_spec_yaml(kFixtureSpec);
    submit.set_workers(2);
    submit.set_ps(1);
    if (grpc::Status s = Call("SubmitJob", false, submit); !s.ok()) return Fail("SubmitJob", s);
    for (int i = 0; i < 2; ++i) {  // rank 0's answer carries the job grant
      dlrm::v1::HeartbeatRequest beat;
      beat.set_member_id(workers_[i]);
      if (grpc::Status s = Call("Heartbeat", true, beat); !s.ok()) return Fail("Heartbeat", s);
    }
    absl::StatusOr<dlrm::v1::Job> job = coordinator_->state().GetJob(kFixtureJob);
    if (!job.ok() || job->state() != dlrm::v1::JOB_STATE_RUNNING) {
      return Fail(absl::InternalError("job-1 is not RUNNING"));
    }
    job_epoch_ = job->job_epoch();
    load_.set_job_id(kFixtureJob);
    load_.set_job_epoch(job_epoch_);
    load_.set_shard_index(0);
    load_.set_shard_count(1);
    for (int t = 0; t < 2; ++t) {
      dlrm::v1::TableDef* table = load_.add_tables();
      table->set_table(t);
      table->set_name(absl::StrCat("t", t));
      table->set_rows(10 * (t + 1));
      table->set_dim(4);
      if (t == 1) table->set_dtype("fp16");  // half rows: 2-byte gradients and answers
    }
    load_.mutable_optimizer()->set_type("adagrad");
    load_.mutable_optimizer()->set_learning_rate(0.01f);
    load_.mutable_optimizer()->set_initial_accumulator(0.1f);
    load_.set_seed(7);
    load_.set_staleness(1);
    load_.set_num_workers(2);
    if (grpc::Status s = Call("LoadJob", false, load_); !s.ok()) return Fail("LoadJob", s);
    return true;
  }

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
  std::vector<std::string> workers_;
  int64_t job_epoch_ = 0;
  dlrm::v1::LoadJobRequest load_;
};

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

void Quiet() {
  dlrm::common::SetMinLogSeverity(dlrm::common::LogSeverity::kError);
  // Invalid UTF-8 in a string field is a parse failure that protobuf also logs.
  google::protobuf::SetLogHandler(nullptr);
}

std::string Bytes(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}

std::string Floats(size_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

void WriteSeeds(const std::string& dir) {
  Quiet();
  std::unique_ptr<Cluster> cluster = Cluster::Create();
  const size_t m = Methods().size();
  const std::string job = kFixtureJob;
  const int64_t epoch = cluster->job_epoch();
  const std::vector<std::string>& w = cluster->workers();
  struct Seed {
    std::string variant;  // in the file name, after the method's
    bool credentials;
    std::unique_ptr<Message> request;
  };
  std::vector<Seed> seeds;
  auto add = [&](const char* variant, bool credentials, std::unique_ptr<Message> request) {
    seeds.push_back(Seed{variant, credentials, std::move(request)});
  };
  {
    auto r = std::make_unique<dlrm::v1::RegisterRequest>();
    r->set_role(dlrm::v1::ROLE_WORKER);
    r->set_address("127.0.0.1:2000");
    r->set_name("w");
    r->mutable_capabilities()->set_cpu_cores(4);
    add("worker", false, std::move(r));
    r = std::make_unique<dlrm::v1::RegisterRequest>();
    r->set_role(dlrm::v1::ROLE_PS);
    r->set_address("127.0.0.1:2001");
    add("ps", false, std::move(r));
  }
  for (const std::string& id : {w[0], w[2]}) {
    auto r = std::make_unique<dlrm::v1::HeartbeatRequest>();
    r->set_member_id(id);
    add(id == w[0] ? "rank0" : "idle", true, std::move(r));
  }
  add("", false, std::make_unique<dlrm::v1::GetClusterViewRequest>());
  {
    auto r = std::make_unique<dlrm::v1::LeaveRequest>();
    r->set_member_id(w[2]);
    add("idle", true, std::move(r));
  }
  {
    auto r = std::make_unique<dlrm::v1::KvSetRequest>();
    r->set_key("job-1/addr/0");
    r->set_value("127.0.0.1:3000");
    add("", false, std::move(r));
    auto g = std::make_unique<dlrm::v1::KvGetRequest>();
    g->set_key("job-1/addr/0");
    add("", false, std::move(g));
    g = std::make_unique<dlrm::v1::KvGetRequest>();
    g->set_key("job-1/missing");
    g->set_wait_timeout_ms(20);
    add("wait", false, std::move(g));
    auto d = std::make_unique<dlrm::v1::KvDeleteRequest>();
    d->set_key("job-1/");
    d->set_prefix(true);
    add("prefix", false, std::move(d));
    auto a = std::make_unique<dlrm::v1::KvAddRequest>();
    a->set_key("job-1/count");
    a->set_delta(3);
    add("", false, std::move(a));
  }
  {
    auto r = std::make_unique<dlrm::v1::ReportProgressRequest>();
    r->set_job_id(job);
    r->set_rank(0);
    r->set_member_id(w[0]);
    r->set_step(10);
    r->set_samples(640);
    r->set_loss(0.5);
    (*r->mutable_metrics())["auc"] = 0.7;
    r->set_job_epoch(epoch);
    add("rank0", true, std::move(r));
  }
  {
    auto r = std::make_unique<dlrm::v1::SubmitJobRequest>();
    r->set_spec_yaml(kFixtureSpec);
    r->set_workers(1);
    add("", false, std::move(r));
    auto g = std::make_unique<dlrm::v1::GetJobRequest>();
    g->set_job_id(job);
    add("", false, std::move(g));
    auto l = std::make_unique<dlrm::v1::ListJobsRequest>();
    l->set_state(dlrm::v1::JOB_STATE_RUNNING);
    add("", false, std::move(l));
    auto c = std::make_unique<dlrm::v1::CancelJobRequest>();
    c->set_job_id(job);
    c->set_reason("fuzz");
    add("", false, std::move(c));
    auto k = std::make_unique<dlrm::v1::CheckpointJobRequest>();
    k->set_job_id(job);
    add("", false, std::move(k));
    auto watch = std::make_unique<dlrm::v1::WatchJobRequest>();
    watch->set_job_id(job);
    add("", false, std::move(watch));
  }
  {
    auto r = std::make_unique<dlrm::v1::LoadJobRequest>(cluster->fixture_load());
    add("same", false, std::move(r));
    r = std::make_unique<dlrm::v1::LoadJobRequest>(cluster->fixture_load());
    r->set_job_id("other");
    r->set_job_epoch(0);
    r->mutable_optimizer()->set_type("adam");
    r->mutable_optimizer()->set_beta1(0.9f);
    r->mutable_optimizer()->set_beta2(0.999f);
    r->mutable_optimizer()->set_epsilon(1e-8f);
    add("other", false, std::move(r));
    auto u = std::make_unique<dlrm::v1::UnloadJobRequest>();
    u->set_job_id("other");
    add("other", true, std::move(u));
    u = std::make_unique<dlrm::v1::UnloadJobRequest>();
    u->set_job_id(job);
    add("fixture", true, std::move(u));
  }
  {
    auto r = std::make_unique<dlrm::v1::LookupRequest>();
    r->set_job_id(job);
    r->set_job_epoch(epoch);
    r->set_step(0);
    r->set_worker_rank(0);
    auto* t0 = r->add_tables();
    t0->set_table(0);
    t0->set_ids(Bytes({1, 2, 3}));
    auto* t1 = r->add_tables();
    t1->set_table(1);
    t1->set_ids(Bytes({4, 19}));
    auto parked = std::make_unique<dlrm::v1::LookupRequest>(*r);
    parked->set_step(5);  // past the staleness bound: waits for pushes until the deadline
    add("", false, std::move(r));
    add("parked", false, std::move(parked));
  }
  {
    auto r = std::make_unique<dlrm::v1::PushGradientsRequest>();
    r->set_job_id(job);
    r->set_job_epoch(epoch);
    r->set_step(0);
    r->set_worker_rank(0);
    r->set_sequence(1);
    auto* t = r->add_tables();
    t->set_table(0);
    t->set_ids(Bytes({1, 2}));
    t->set_grads(Floats(2 * 4, 0.25f));
    add("", false, std::move(r));
  }
  {
    auto r = std::make_unique<dlrm::v1::GetStatsRequest>();
    add("all", false, std::move(r));
    r = std::make_unique<dlrm::v1::GetStatsRequest>();
    r->set_job_id(job);
    add("job", false, std::move(r));
  }
  int row_floats = 0;
  {
    auto r = std::make_unique<dlrm::v1::ReadRowsRequest>();
    r->set_job_id(job);
    r->set_job_epoch(epoch);
    auto* t = r->add_tables();
    t->set_table(0);
    t->set_ids(Bytes({1, 2}));
    std::string bytes;
    dlrm::v1::ReadRowsResponse answer;
    if (!cluster->Call("ReadRows", false, *r, &bytes).ok() || !answer.ParseFromString(bytes) ||
        answer.tables_size() != 1) {
      std::fprintf(stderr, "fuzz_rpc: ReadRows of the fixture failed\n");
      std::abort();
    }
    row_floats = answer.tables(0).row_floats();
    add("", false, std::move(r));
  }
  {
    auto r = std::make_unique<dlrm::v1::WriteRowsRequest>();
    r->set_job_id(job);
    r->set_job_epoch(epoch);
    auto* t = r->add_tables();
    t->set_table(1);
    t->set_ids(Bytes({3}));
    t->set_rows(Floats(static_cast<size_t>(row_floats), 0.5f));
    add("", true, std::move(r));
  }
  {
    auto r = std::make_unique<dlrm::v1::CheckpointRequest>();
    r->set_job_id(job);
    r->set_step(10);
    r->set_phase(dlrm::v1::CheckpointRequest::SNAPSHOT);
    add("snapshot", true, std::move(r));
    r = std::make_unique<dlrm::v1::CheckpointRequest>();
    r->set_job_id(job);
    r->set_step(10);
    r->set_phase(dlrm::v1::CheckpointRequest::WRITE);
    r->set_directory("@root/step-10");
    r->set_part(0);
    add("write", true, std::move(r));
  }
  std::vector<bool> covered(m, false);
  for (const auto& [variant, credentials, request] : seeds) {
    size_t index = m;
    for (size_t i = 0; i < m; ++i) {
      if (Methods()[i].descriptor->input_type() == request->GetDescriptor()) index = i;
    }
    if (index == m) std::abort();
    covered[index] = true;
    std::string input(1, static_cast<char>(index + (credentials ? m : 0)));
    input += request->SerializeAsString();
    const std::string name =
        absl::StrCat(Methods()[index].descriptor->name(), variant.empty() ? "" : "_", variant);
    std::ofstream out(absl::StrCat(dir, "/", name), std::ios::binary | std::ios::trunc);
    out << input;
    if (!out.good()) std::abort();
  }
  for (size_t i = 0; i < m; ++i) {
    if (!covered[i]) {
      std::fprintf(stderr, "fuzz_rpc: no seed for %s\n", Methods()[i].path.c_str());
      std::abort();
    }
  }
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
