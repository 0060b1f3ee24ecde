// ps_load_bench: many concurrent clients against one running parameter server (`dlrm ps`) for a
// fixed time (issue 11, load): latency percentiles, throughput, errors, and the server's resident
// memory (VmRSS of --ps-pid) at the start, the middle and the end of the run.
//
// The clients are a job's workers, as the coordinator sees them: the bench registers --clients
// workers with the coordinator (--coordinator, as the worker identity), submits a job of the
// Criteo shape (26 tables of --rows rows of --dim, the --optimizer sparse optimizer) on
// --clients workers and the one server (as the admin identity: --admin-tls-dir, or plaintext
// with --insecure), heartbeats every member until each has its rank, and keeps heartbeating
// them through the run. Each client then sends what its rank's worker would: the member grant of
// the job's epoch with every call, and LoadJob (rank 0's, waiting up to 60 s for the server)
// with the coordinator's load grant of that very request (common/grants.h). At the end the job
// is cancelled and the members leave.
//
// After LoadJob, with --warmup 1, a lookup of every row of every table, so that the memory tier
// holds the whole job before the clock starts and what RSS does afterwards is the serving path's
// own. Then each of --clients threads opens a channel of its own
// (ChannelOptions::private_connections: one TCP and, with TLS, one TLS session per client), makes
// one untimed Lookup (the handshake), waits for the others, and loops for --seconds: a Lookup of
// --ids distinct Zipf-drawn ids in each of the 26 tables, and every --push-every-th call a
// PushGradients of the same ids instead (numbered, of the client's own worker rank, as a trainer
// sends them). Lookups carry step -1 (no staleness wait), so the latency is the server's and not
// the slowest client's. Every non-OK status, and every answer whose rows are not ids x dim, is
// an error (the first few are printed to stderr): `errors` in the timed window, `connect_errors`
// for the first calls (each client tries its first call up to 3 times, the later ones waiting for
// the connection).
//
//   build/bin/ps_load_bench --coordinator 127.0.0.1:50051 --ps 127.0.0.1:50061
//       --tls-dir certs/worker --admin-tls-dir certs/admin --ps-pid 1234
//       [--clients 64] [--seconds 60] [--rows 100000] [--dim 16] [--ids 512]
//       [--zipf 1.05] [--push-every 2] [--warmup 1] [--optimizer rowwise_adagrad]
//
// Prints one JSON object (one line) to stdout; exits 1 when any call of the timed window failed.
// rss_mib holds start, middle, end, the maximum of the once-a-second samples and every tenth of
// them (every_10s, from the start).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/tls_flags.h"
#include "common/allocator.h"
#include "common/criteo_shape.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "proto/ps.grpc.pb.h"
#include "server/ps_load_request.h"
#include "worker/input/zipf_sampler.h"

namespace dlrm::bench {
namespace {

struct Flags {
  std::string coordinator;
  std::string ps;
  client::TlsFlags tls;
  std::string admin_tls_dir;  // the admin identity that submits the job (TLS only)
  int clients = 64;
  double seconds = 60;
  int ps_pid = 0;
  int tables = common::kCriteoNumCategorical;  // the Criteo shape, which SubmitJob checks
  int64_t rows = 100000;
  int dim = 16;
  int ids = 512;
  double zipf = 1.05;
  int push_every = 2;  // every push_every-th call is a push; 0: lookups only
  int batches = 4;     // distinct batches per client, cycled
  bool warmup = true;
  std::string optimizer = "rowwise_adagrad";
  std::string job_name = "ps-load-bench";
  double call_timeout_s = 30;
};

constexpr int kErrorsPrinted = 5;

// VmRSS of `pid` in MiB from /proc/<pid>/status; nullopt when it cannot be read (or pid 0).
std::optional<double> RssMib(int pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // the value is in kB
    }
  }
  return std::nullopt;
}

nlohmann::json JsonOr(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(std::round(*v * 10) / 10) : nlohmann::json(nullptr);
}

std::string PackIds(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}

// Errors of every thread: counted, the first few printed (with `kind`: "connect" or "load").
class Errors {
 public:
  explicit Errors(std::string kind) : kind_(std::move(kind)) {}
  void Add(const std::string& what) {
    const int64_t n = count_.fetch_add(1, std::memory_order_relaxed);
    if (n < kErrorsPrinted) {
      absl::MutexLock lock(&mu_);
      std::cerr << "ps_load_bench: " << kind_ << " error " << n + 1 << ": " << what << "\n";
    }
  }
  int64_t count() const { return count_.load(); }

 private:
  const std::string kind_;
  std::atomic<int64_t> count_{0};
  absl::Mutex mu_;
};

// The requests one client cycles through: lookups, and pushes of the same ids.
struct Batch {
  dlrm::v1::LookupRequest lookup;
  dlrm::v1::PushGradientsRequest push;
};

std::vector<Batch> MakeBatches(const Flags& f, const std::string& job_id, int64_t job_epoch,
                               int rank) {
  worker::ZipfSampler sampler(f.rows, f.zipf);
  worker::Xoshiro256 rng(1000 + static_cast<uint64_t>(rank));
  std::vector<Batch> batches(f.batches);
  std::vector<int64_t> ids;
  std::vector<float> grads;
  absl::flat_hash_set<int64_t> seen;
  for (Batch& b : batches) {
    b.lookup.set_job_id(job_id);
    b.lookup.set_job_epoch(job_epoch);
    b.lookup.set_step(-1);
    b.lookup.set_worker_rank(rank);
    b.push.set_job_id(job_id);
    b.push.set_job_epoch(job_epoch);
    b.push.set_worker_rank(rank);
    for (int t = 0; t < f.tables; ++t) {
      seen.clear();
      ids.clear();
      while (static_cast<int>(ids.size()) < f.ids) {
        const int64_t id = sampler.Sample(rng) - 1;
        if (seen.insert(id).second) ids.push_back(id);
      }
      grads.resize(ids.size() * f.dim);
      for (float& g : grads) g = static_cast<float>(rng.NextDouble() - 0.5) * 0.02f;
      dlrm::v1::TableIds* lookup = b.lookup.add_tables();
      lookup->set_table(t);
      lookup->set_ids(PackIds(ids));
      dlrm::v1::TableGradients* push = b.push.add_tables();
      push->set_table(t);
      push->set_ids(lookup->ids());
      push->set_grads(
          std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
    }
  }
  return batches;
}

// OK when the answer has a table of ids x dim floats for every table asked for.
absl::Status CheckAnswer(const dlrm::v1::LookupRequest& request,
                         const dlrm::v1::LookupResponse& response, int dim) {
  if (response.tables_size() != request.tables_size()) {
    return absl::InternalError(absl::StrCat("Lookup answered ", response.tables_size(),
                                            " tables for ", request.tables_size()));
  }
  for (int i = 0; i < request.tables_size(); ++i) {
    const size_t expected = request.tables(i).ids().size() / sizeof(int64_t) * dim * sizeof(float);
    if (response.tables(i).rows().size() != expected) {
      return absl::InternalError(absl::StrCat("Lookup table ", i, ": ",
                                              response.tables(i).rows().size(),
                                              " bytes of rows, expected ", expected));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(const Flags& f,
                                                       const common::TransportSecurity& security,
                                                       bool private_connections) {
  common::ChannelOptions options;
  options.target = f.ps;
  options.security = security;
  options.private_connections = private_connections;
  return common::MakeChannel(options);
}

// A call's context: its deadline and the member grant every data call of the job carries.
std::unique_ptr<grpc::ClientContext> CallContext(absl::Duration timeout, const std::string& grant) {
  auto context = common::MakeClientContext(timeout);
  context->AddMetadata(common::kMemberGrantMetadata, grant);
  return context;
}

// The job the clients belong to, as the coordinator runs it: --clients registered workers, kept
// alive by heartbeats until the job is cancelled and they leave (the destructor).
class BenchJob {
 public:
  static absl::StatusOr<std::unique_ptr<BenchJob>> Join(const Flags& f,
                                                        const common::TransportSecurity& worker,
                                                        const common::TransportSecurity& admin);
  ~BenchJob();
  BenchJob(const BenchJob&) = delete;
  BenchJob& operator=(const BenchJob&) = delete;

  const std::string& id() const { return id_; }
  int64_t epoch() const { return load_request_.job_epoch(); }
  // Every rank's grant for its data calls at the job's epoch (one server: one grant).
  const std::string& member_grant() const { return member_grant_; }
  // The LoadJob request of the job's one server, and the coordinator's grant of it.
  const dlrm::v1::LoadJobRequest& load_request() const { return load_request_; }
  const std::string& load_grant() const { return load_grant_; }

 private:
  BenchJob() = default;
  void HeartbeatLoop(absl::Duration interval);

  std::unique_ptr<client::CoordinatorClient> as_worker_;
  std::unique_ptr<client::CoordinatorClient> as_admin_;
  std::vector<dlrm::v1::RegisterResponse> members_;
  std::string id_;
  std::string member_grant_;
  dlrm::v1::LoadJobRequest load_request_;
  std::string load_grant_;
  absl::Notification stop_;
  std::thread heartbeats_;
};

// The job's spec: the Criteo shape (13 dense features, 26 tables, which SubmitJob checks) with
// the bench's rows, dim and sparse optimizer. Its model and data are never used: no one trains.
std::string JobSpecYaml(const Flags& f) {
  const std::vector<std::string> rows(f.tables, std::to_string(f.rows));
  return absl::StrCat("name: ", f.job_name, "\nmodel: {dense_features: 13, bottom_mlp: [", f.dim,
                      "], top_mlp: [4, 1], embedding_dim: ", f.dim, "}\ntables: {cardinalities: [",
                      absl::StrJoin(rows, ", "), "]}\noptimizer: {sparse: {type: ", f.optimizer,
                      "}}\ntraining: {seed: 7, staleness: 0}\ndata: {train: [unused.tsv]}\n");
}

absl::StatusOr<std::unique_ptr<BenchJob>> BenchJob::Join(const Flags& f,
                                                         const common::TransportSecurity& worker,
                                                         const common::TransportSecurity& admin) {
  std::unique_ptr<BenchJob> job(new BenchJob());
  DLRM_ASSIGN_OR_RETURN(job->as_worker_, client::CoordinatorClient::Create(
                                             {.address = f.coordinator, .security = worker}));
  DLRM_ASSIGN_OR_RETURN(job->as_admin_, client::CoordinatorClient::Create(
                                            {.address = f.coordinator, .security = admin}));
  // A job starts on the servers alive when it is submitted: wait for the server to register.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (true) {
    DLRM_ASSIGN_OR_RETURN(dlrm::v1::GetClusterViewResponse view, job->as_admin_->Members());
    if (view.shard_map_size() > 0 && !view.shard_map(0).empty()) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("no parameter server registered within 60 s");
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  absl::Duration interval = absl::Seconds(1);
  for (int i = 0; i < f.clients; ++i) {
    DLRM_ASSIGN_OR_RETURN(dlrm::v1::RegisterResponse member,
                          job->as_worker_->Register(client::MakeRegisterRequest(
                              dlrm::v1::ROLE_WORKER, absl::StrCat("127.0.0.1:", 20000 + i), "",
                              absl::StrCat(f.job_name, "-", i))));
    interval = std::min(interval, client::HeartbeatInterval(member));
    job->members_.push_back(std::move(member));
  }
  DLRM_ASSIGN_OR_RETURN(dlrm::v1::Job submitted,
                        job->as_admin_->Submit(JobSpecYaml(f), {.workers = f.clients, .ps = 1}));
  job->id_ = submitted.job_id();
  // Every member's heartbeat answers with its rank once the job runs.
  std::vector<bool> assigned(f.clients, false);
  dlrm::v1::WorkerAssignment rank0;
  for (int left = f.clients; left > 0;) {
    for (int i = 0; i < f.clients; ++i) {
      if (assigned[i]) continue;
      DLRM_ASSIGN_OR_RETURN(
          dlrm::v1::HeartbeatResponse beat,
          job->as_worker_->Heartbeat(job->members_[i].member_id(), job->members_[i].member_key()));
      if (!beat.has_worker() || beat.worker().job().job_id() != job->id_) continue;
      assigned[i] = true;
      --left;
      if (beat.worker().rank() == 0) rank0 = beat.worker();
    }
    if (left > 0 && absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("job ", job->id_, ": ", left, " of ",
                                                      f.clients, " workers had no rank in 60 s"));
    }
    if (left > 0) absl::SleepFor(absl::Milliseconds(100));
  }
  if (rank0.member_grants_size() != 1 || rank0.load_grants_size() != 1) {
    return absl::InternalError(absl::StrCat("job ", job->id_, " runs on ",
                                            rank0.job().ps_addresses_size(),
                                            " servers; the bench loads one"));
  }
  job->member_grant_ = rank0.member_grants(0);
  job->load_grant_ = rank0.load_grants(0);
  // The request a worker sends, from the spec the coordinator assigned (and signed).
  DLRM_ASSIGN_OR_RETURN(common::JobSpec spec,
                        common::ParseJobSpec(rank0.job().job_spec_yaml(), "the assigned job"));
  DLRM_ASSIGN_OR_RETURN(server::PsJobParams params,
                        server::PsJobParamsFromSpec(spec, rank0.job().world_size(), false));
  job->load_request_ = server::MakeLoadJobRequest(job->id_, rank0.job().job_epoch(),
                                                  server::TableConfigsFromSpec(spec), params, 0, 1);
  job->heartbeats_ = std::thread([raw = job.get(), interval] { raw->HeartbeatLoop(interval); });
  return job;
}

void BenchJob::HeartbeatLoop(absl::Duration interval) {
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    for (const dlrm::v1::RegisterResponse& m : members_) {
      absl::StatusOr<dlrm::v1::HeartbeatResponse> beat =
          as_worker_->Heartbeat(m.member_id(), m.member_key());
      if (!beat.ok()) std::cerr << "ps_load_bench: heartbeat: " << beat.status() << "\n";
    }
  }
}

BenchJob::~BenchJob() {
  if (!id_.empty()) (void)as_admin_->Cancel(id_, "ps_load_bench is done");
  stop_.Notify();
  if (heartbeats_.joinable()) heartbeats_.join();
  for (const dlrm::v1::RegisterResponse& m : members_) {
    (void)as_worker_->Leave(m.member_id(), m.member_key());
  }
}

// LoadJob with the coordinator's grants, waiting up to 60 s for the server to come up.
// wait_for_ready: the call itself keeps the connection attempts going (a fail-fast call retried
// after a sleep can find the channel in TRANSIENT_FAILURE every time: with TLS, nobody polls the
// handshake of its background attempts).
absl::Status LoadJob(const BenchJob& job, dlrm::v1::ParameterServer::Stub* stub) {
  auto context = CallContext(absl::Seconds(60), job.member_grant());
  context->AddMetadata(common::kLoadGrantMetadata, job.load_grant());
  context->set_wait_for_ready(true);
  dlrm::v1::LoadJobResponse response;
  return common::FromGrpcStatus(stub->LoadJob(context.get(), job.load_request(), &response));
}

// Looks up every row of every table (chunks of 4096 ids per table), so that the rows exist.
absl::Status Warmup(const Flags& f, const BenchJob& job, dlrm::v1::ParameterServer::Stub* stub) {
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> ids;
  for (int64_t begin = 0; begin < f.rows; begin += kChunk) {
    const int64_t end = std::min(f.rows, begin + kChunk);
    ids.resize(end - begin);
    for (int64_t i = begin; i < end; ++i) ids[i - begin] = i;
    dlrm::v1::LookupRequest request;
    request.set_job_id(job.id());
    request.set_job_epoch(job.epoch());
    request.set_step(-1);
    for (int t = 0; t < f.tables; ++t) {
      dlrm::v1::TableIds* table = request.add_tables();
      table->set_table(t);
      table->set_ids(PackIds(ids));
    }
    dlrm::v1::LookupResponse response;
    absl::Status status = common::FromGrpcStatus(
        stub->Lookup(CallContext(absl::Seconds(60), job.member_grant()).get(), request, &response));
    if (status.ok()) status = CheckAnswer(request, response, f.dim);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

struct Latencies {
  std::vector<float> lookup_ms;
  std::vector<float> push_ms;
};

// Nearest-rank percentile of sorted `v` (0 for none).
double Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double Round3(double v) { return std::round(v * 1000) / 1000; }

int Run(const Flags& f, const common::TransportSecurity& security,
        const common::TransportSecurity& admin) {
  if (f.ids > f.rows || f.clients < 1 || f.tables < 1 || f.batches < 1 || f.seconds <= 0) {
    std::cerr << "ps_load_bench: need 1 <= --ids <= --rows, --clients, --tables, --batches >= 1 "
                 "and --seconds > 0\n";
    return 2;
  }
  auto admin_channel = Channel(f, security, /*private_connections=*/true);
  if (!admin_channel.ok()) {
    std::cerr << "ps_load_bench: " << admin_channel.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<BenchJob>> joined = BenchJob::Join(f, security, admin);
  if (!joined.ok()) {
    std::cerr << "ps_load_bench: the job on " << f.coordinator << ": " << joined.status() << "\n";
    return 1;
  }
  const BenchJob& job = **joined;
  auto stub = dlrm::v1::ParameterServer::NewStub(*admin_channel);
  if (absl::Status s = LoadJob(job, stub.get()); !s.ok()) {
    std::cerr << "ps_load_bench: LoadJob on " << f.ps << ": " << s << "\n";
    return 1;
  }
  const absl::Time warmup_start = absl::Now();
  if (f.warmup) {
    if (absl::Status s = Warmup(f, job, stub.get()); !s.ok()) {
      std::cerr << "ps_load_bench: warm-up: " << s << "\n";
      return 1;
    }
  }
  const double warmup_s = absl::ToDoubleSeconds(absl::Now() - warmup_start);

  Errors errors("load");             // calls in the timed window
  Errors connect_errors("connect");  // the untimed first call of each client
  std::vector<Latencies> latencies(f.clients);
  std::vector<std::vector<Batch>> batches(f.clients);
  for (int c = 0; c < f.clients; ++c) batches[c] = MakeBatches(f, job.id(), job.epoch(), c);
  const absl::Duration timeout = absl::Seconds(f.call_timeout_s);
  // Every client connected (and its first call answered) before the clock starts.
  absl::Barrier* connected = new absl::Barrier(f.clients + 1);
  absl::Notification go;
  absl::Time end_time;  // written before `go`
  std::vector<std::thread> threads;
  for (int c = 0; c < f.clients; ++c) {
    threads.emplace_back([&, c] {
      auto channel = Channel(f, security, /*private_connections=*/true);
      std::unique_ptr<dlrm::v1::ParameterServer::Stub> client;
      if (channel.ok()) {
        client = dlrm::v1::ParameterServer::NewStub(*channel);
      } else {
        connect_errors.Add(absl::StrCat("client ", c, ": ", channel.status().ToString()));
      }
      auto lookup = [&](Batch& b, bool wait_for_ready) {
        dlrm::v1::LookupResponse response;
        auto context = CallContext(timeout, job.member_grant());
        context->set_wait_for_ready(wait_for_ready);
        absl::Status s = common::FromGrpcStatus(client->Lookup(context.get(), b.lookup, &response));
        if (s.ok()) s = CheckAnswer(b.lookup, response, f.dim);
        return s;
      };
      // The first call makes the connection (and the TLS handshake): a failure is counted apart
      // and the call made again, waiting for the connection this time, up to 3 attempts.
      for (int attempt = 0; client != nullptr && attempt < 3; ++attempt) {
        absl::Status s = lookup(batches[c][0], /*wait_for_ready=*/attempt > 0);
        if (s.ok()) break;
        connect_errors.Add(absl::StrCat("client ", c, " first Lookup: ", s.ToString()));
      }
      if (connected->Block()) delete connected;
      go.WaitForNotification();
      if (client == nullptr) return;
      Latencies& mine = latencies[c];
      uint64_t sequence = 0;
      int64_t step = 0;
      for (int64_t call = 0; absl::Now() < end_time; ++call) {
        Batch& b = batches[c][call % f.batches];
        const bool push = f.push_every > 0 && call % f.push_every == f.push_every - 1;
        const absl::Time start = absl::Now();
        if (push) {
          b.push.set_step(step++);
          b.push.set_sequence(++sequence);
          dlrm::v1::PushGradientsResponse response;
          absl::Status s = common::FromGrpcStatus(client->PushGradients(
              CallContext(timeout, job.member_grant()).get(), b.push, &response));
          if (!s.ok()) errors.Add(absl::StrCat("client ", c, " PushGradients: ", s.ToString()));
          mine.push_ms.push_back(
              static_cast<float>(absl::ToDoubleMilliseconds(absl::Now() - start)));
        } else {
          absl::Status s = lookup(b, /*wait_for_ready=*/false);
          if (!s.ok()) errors.Add(absl::StrCat("client ", c, " Lookup: ", s.ToString()));
          mine.lookup_ms.push_back(
              static_cast<float>(absl::ToDoubleMilliseconds(absl::Now() - start)));
        }
      }
    });
  }
  if (connected->Block()) delete connected;

  // RSS: at the start, once a second (for the maximum), at the middle and at the end.
  std::optional<double> rss_start = RssMib(f.ps_pid), rss_middle, rss_end;
  std::optional<double> rss_max = rss_start;
  const absl::Time start = absl::Now();
  end_time = start + absl::Seconds(f.seconds);
  const absl::Time middle_time = start + absl::Seconds(f.seconds / 2);
  go.Notify();
  auto note_max = [&](const std::optional<double>& v) {
    if (v.has_value() && (!rss_max.has_value() || *v > *rss_max)) rss_max = v;
  };
  // Every 10th second's sample, for the trace in the output.
  nlohmann::json trace = nlohmann::json::array({JsonOr(rss_start)});
  int second = 0;
  for (absl::Time tick = start + absl::Seconds(1); tick < end_time; tick += absl::Seconds(1)) {
    if (!rss_middle.has_value() && middle_time < tick) {
      absl::SleepFor(middle_time - absl::Now());
      rss_middle = RssMib(f.ps_pid);
      note_max(rss_middle);
    }
    absl::SleepFor(tick - absl::Now());
    const std::optional<double> rss = RssMib(f.ps_pid);
    note_max(rss);
    if (++second % 10 == 0) trace.push_back(JsonOr(rss));
  }
  if (!rss_middle.has_value()) {  // --seconds under 2
    absl::SleepFor(middle_time - absl::Now());
    rss_middle = RssMib(f.ps_pid);
    note_max(rss_middle);
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  rss_end = RssMib(f.ps_pid);
  note_max(rss_end);

  std::vector<float> all, lookups, pushes;
  for (const Latencies& l : latencies) {
    lookups.insert(lookups.end(), l.lookup_ms.begin(), l.lookup_ms.end());
    pushes.insert(pushes.end(), l.push_ms.begin(), l.push_ms.end());
  }
  all = lookups;
  all.insert(all.end(), pushes.begin(), pushes.end());
  std::sort(all.begin(), all.end());
  std::sort(lookups.begin(), lookups.end());
  std::sort(pushes.begin(), pushes.end());
  const int64_t calls = static_cast<int64_t>(all.size());
  nlohmann::json out = {
      {"benchmark", "ps_load"},
      {"clients", f.clients},
      {"seconds", f.seconds},
      {"tls", security.tls()},
      {"calls", calls},
      {"lookups", lookups.size()},
      {"pushes", pushes.size()},
      {"errors", errors.count()},
      {"connect_errors", connect_errors.count()},
      {"calls_per_sec", std::round(calls / elapsed * 10) / 10},
      {"p50_ms", Round3(Percentile(all, 0.5))},
      {"p99_ms", Round3(Percentile(all, 0.99))},
      {"max_ms", Round3(all.empty() ? 0 : all.back())},
      {"lookup_p50_ms", Round3(Percentile(lookups, 0.5))},
      {"lookup_p99_ms", Round3(Percentile(lookups, 0.99))},
      {"push_p50_ms", Round3(Percentile(pushes, 0.5))},
      {"push_p99_ms", Round3(Percentile(pushes, 0.99))},
      {"elapsed_s", Round3(elapsed)},
      {"warmup_s", Round3(warmup_s)},
      {"shape",
       {{"tables", f.tables},
        {"rows", f.rows},
        {"dim", f.dim},
        {"ids_per_table", f.ids},
        {"zipf", f.zipf},
        {"push_every", f.push_every},
        {"optimizer", f.optimizer},
        {"warmup", f.warmup}}},
      {"rss_mib",
       {{"start", JsonOr(rss_start)},
        {"middle", JsonOr(rss_middle)},
        {"end", JsonOr(rss_end)},
        {"max", JsonOr(rss_max)},
        {"every_10s", trace}}},
  };
  std::cout << out.dump() << std::endl;
  return errors.count() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dlrm::bench

int main(int argc, char** argv) {
  dlrm::common::ConfigureAllocatorForLargeBuffers();
  dlrm::bench::Flags f;
  CLI::App app{"Concurrent clients against one parameter server: latency, errors and its RSS"};
  app.add_option("--coordinator", f.coordinator,
                 "HOST:PORT of the coordinator the parameter server registered with")
      ->required();
  app.add_option("--ps", f.ps, "HOST:PORT of the parameter server")->required();
  dlrm::client::AddTlsFlags(&app, &f.tls);
  app.add_option("--admin-tls-dir", f.admin_tls_dir,
                 "The admin identity that submits the job (`dlrm certs` DIR/admin); not with "
                 "--insecure");
  app.add_option("--clients", f.clients, "Concurrent clients, each with its own connection")
      ->capture_default_str();
  app.add_option("--seconds", f.seconds, "How long the clients run")->capture_default_str();
  app.add_option("--ps-pid", f.ps_pid, "Process id of the parameter server (its VmRSS; 0: none)");
  app.add_option("--rows", f.rows, "Rows per table")->capture_default_str();
  app.add_option("--dim", f.dim, "Embedding dimension")->capture_default_str();
  app.add_option("--ids", f.ids, "Distinct ids per table per request")->capture_default_str();
  app.add_option("--zipf", f.zipf, "Zipf exponent of the ids")->capture_default_str();
  app.add_option("--push-every", f.push_every,
                 "Every N-th call is a PushGradients of the batch's ids (0: lookups only)")
      ->capture_default_str();
  app.add_option("--batches", f.batches, "Distinct batches per client, cycled")
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "Look up every row once before the clock starts")
      ->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "Sparse optimizer of the job")->capture_default_str();
  app.add_option("--job-name", f.job_name, "Name of the job submitted")->capture_default_str();
  app.add_option("--call-timeout", f.call_timeout_s, "Deadline of every call, seconds")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto security = dlrm::client::ResolveTls(f.tls, "", "ps_load_bench");
  if (!security.ok()) {
    std::cerr << security.status() << "\n";
    return 2;
  }
  dlrm::common::TransportSecurity admin = *security;
  if (security->tls()) {
    if (f.admin_tls_dir.empty()) {
      std::cerr << "ps_load_bench: --admin-tls-dir is needed with TLS (the job is submitted as "
                   "the admin identity)\n";
      return 2;
    }
    admin = dlrm::common::TransportSecurity::FromDir(f.admin_tls_dir);
  }
  return dlrm::bench::Run(f, *security, admin);
}
