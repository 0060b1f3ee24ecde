// The seed corpus of fuzz_rpc (corpus/rpc): valid requests of every method, made against a fresh
// fixture (DLRM_FUZZ_WRITE_SEEDS=DIR).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"
#include "proto/ps.pb.h"
#include "tests/fuzz/fuzz_rpc_cluster.h"

namespace dlrm::fuzz_rpc {
namespace {

std::string Bytes(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}

std::string Floats(size_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace

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
    // The rate of a scheduled step (optimizer.schedule), which the server checks and applies.
    auto scheduled = std::make_unique<dlrm::v1::PushGradientsRequest>(*r);
    scheduled->set_sequence(2);
    scheduled->set_learning_rate(0.0125f);
    add("", false, std::move(r));
    add("scheduled", false, std::move(scheduled));
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

}  // namespace dlrm::fuzz_rpc
