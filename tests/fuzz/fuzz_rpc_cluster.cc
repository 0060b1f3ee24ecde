// The Cluster of fuzz_rpc (fuzz_rpc_cluster.h): the servers on loopback, the calls and the keys
// learnt from their answers.
#include "tests/fuzz/fuzz_rpc_cluster.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/ps_load_request.h"
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

namespace dlrm::fuzz_rpc {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Of the calls that make the fixture (LoadJob creates RocksDB stores).
constexpr absl::Duration kSetupDeadline = absl::Seconds(30);
// A call that has not ended this long after its deadline hangs.
constexpr absl::Duration kHangAfter = absl::Seconds(30);
constexpr size_t kMaxLoadedJobs = 4;
// Metadata that carries a job grant to a parameter server (common/grants.h kJobGrantMetadata),
// and a member grant (kMemberGrantMetadata).
constexpr char kJobGrantMetadata[] = "x-dlrm-job-grant";
constexpr char kMemberGrantMetadata[] = "x-dlrm-member-grant";
// And the load grant of a LoadJob request (kLoadGrantMetadata).
constexpr char kLoadGrantMetadata[] = "x-dlrm-load-grant";

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

// The first element of the repeated string field `name` of `m`, or "" when it has none (the
// cluster runs one parameter server: its grant is the first of a job's).
std::string GetFirstString(const Message& m, const char* name) {
  const FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || !f->is_repeated() || f->type() != FieldDescriptor::TYPE_STRING ||
      m.GetReflection()->FieldSize(m, f) == 0) {
    return "";
  }
  return m.GetReflection()->GetRepeatedString(m, f, 0);
}

// The int64 field `name` of `m`, or 0 when it has none.
int64_t GetInt64(const Message& m, const char* name) {
  const FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || f->is_repeated() || f->type() != FieldDescriptor::TYPE_INT64) return 0;
  return m.GetReflection()->GetInt64(m, f);
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

}  // namespace

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

std::unique_ptr<Cluster> Cluster::Create() {
  std::unique_ptr<Cluster> c(new Cluster());
  if (!c->Start()) {
    std::fprintf(stderr, "fuzz_rpc: cannot start the cluster\n");
    std::abort();
  }
  return c;
}

Cluster::~Cluster() {
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

grpc::Status Cluster::Call(size_t index, bool credentials, std::string payload, std::string* answer,
                           absl::Duration deadline) {
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

grpc::Status Cluster::Call(const std::string& name, bool credentials, const Message& request,
                           std::string* answer) {
  return Call(IndexOf(name), credentials, request.SerializeAsString(), answer, kSetupDeadline);
}

size_t Cluster::IndexOf(const std::string& name) {
  for (size_t i = 0; i < Methods().size(); ++i) {
    if (Methods()[i].descriptor->name() == name) return i;
  }
  std::fprintf(stderr, "fuzz_rpc: no method %s\n", name.c_str());
  std::abort();
}

bool Cluster::Tend() {
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

bool Cluster::Await(intptr_t want, const Method& method, absl::Duration deadline) {
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

grpc::Status Cluster::Stream(const Method& method, grpc::GenericStub& stub,
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

void Cluster::AddCredentials(const Method& method, std::string* payload,
                             grpc::ClientContext* context) {
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
  const std::string job_id = GetString(*request, "job_id");
  auto grant = job_grants_.find(job_id);
  if (grant != job_grants_.end()) context->AddMetadata(kJobGrantMetadata, grant->second);
  auto member = member_grants_.find({job_id, GetInt64(*request, "job_epoch")});
  if (member != member_grants_.end()) context->AddMetadata(kMemberGrantMetadata, member->second);
  *payload = request->SerializeAsString();
  // Whatever LoadJob the input makes is signed as the coordinator signs its jobs' loads, so that
  // the server's load goes on past the grant check.
  dlrm::v1::LoadJobRequest load;
  if (method.descriptor->name() == "LoadJob" && !ps_member_id_.empty() &&
      load.ParseFromString(*payload)) {
    context->AddMetadata(kLoadGrantMetadata,
                         dlrm::common::JobLoadGrant(coordinator_->keys().PsGrantKey(ps_member_id_),
                                                    dlrm::server::LoadJobRequestBytes(load)));
  }
}

void Cluster::Learn(const Method& method, const std::string& bytes) {
  std::unique_ptr<Message> answer = NewMessage(method.descriptor->output_type());
  if (answer->ParseFromString(bytes)) Learn(*answer);
}

void Cluster::Learn(const Message& m) {
  const std::string id = GetString(m, "member_id");
  const std::string key = GetString(m, "member_key");
  if (!id.empty() && !key.empty()) member_keys_[id] = key;
  const std::string grant = GetFirstString(m, "job_grants");
  const std::string member_grant = GetFirstString(m, "member_grants");
  if (const std::string ps = GetFirstString(m, "ps_member_ids"); !ps.empty()) ps_member_id_ = ps;
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
    if (!member_grant.empty() && f->name() == "job") {
      const std::string job = GetString(sub, "job_id");
      if (!job.empty()) member_grants_[{job, GetInt64(sub, "job_epoch")}] = member_grant;
    }
    Learn(sub);
  }
}

bool Cluster::Start() {
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

bool Cluster::Fail(const absl::Status& status) {
  std::fprintf(stderr, "fuzz_rpc: %s\n", status.ToString().c_str());
  return false;
}

bool Cluster::Fail(const char* what, const grpc::Status& status) {
  return Fail(absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                           absl::StrCat(what, ": ", status.error_message())));
}

bool Cluster::MakeFixture() {
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
  if (grpc::Status s = Call("LoadJob", true, load_); !s.ok()) return Fail("LoadJob", s);
  return true;
}

void Quiet() {
  dlrm::common::SetMinLogSeverity(dlrm::common::LogSeverity::kError);
  // Invalid UTF-8 in a string field is a parse failure that protobuf also logs.
  google::protobuf::SetLogHandler(nullptr);
}

}  // namespace dlrm::fuzz_rpc
