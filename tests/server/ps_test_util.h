// Helpers for the parameter-server tests: a temp data directory, a PS on loopback, a stub, and
// packing of ids and floats into the wire's bytes.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_server.h"
#include "tests/common/temp_dir.h"

namespace dlrm::server::testing {

// A fresh directory for a parameter server's data, removed at scope exit.
class PsTempDir : public ::dlrm::testing::ScopedTempDir {
 public:
  PsTempDir() : ScopedTempDir("dlrm_ps") {}
};

inline std::string PackIds(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
}
inline std::string PackFloats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
inline std::vector<float> UnpackFloats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

inline PsOptions TestPsOptions(const std::string& data_dir, int64_t budget = 1 << 20,
                               int threads = 2) {
  PsOptions o;
  o.data_dir = data_dir;
  o.memory_budget_bytes = budget;
  o.num_threads = threads;
  return o;
}

inline std::unique_ptr<dlrm::v1::ParameterServer::Stub> PsStub(const std::string& address) {
  auto channel = common::MakeChannel({.target = address});
  EXPECT_TRUE(channel.ok()) << channel.status();
  return dlrm::v1::ParameterServer::NewStub(*channel);
}

// A job of `tables` (rows, dim) with SGD, as shard `shard` of `shards`.
inline dlrm::v1::LoadJobRequest TestJob(const std::string& job_id,
                                        const std::vector<std::pair<int64_t, int>>& tables,
                                        int shard = 0, int shards = 1, int staleness = 0,
                                        int num_workers = 1) {
  dlrm::v1::LoadJobRequest r;
  r.set_job_id(job_id);
  r.set_job_epoch(1);
  r.set_shard_index(shard);
  r.set_shard_count(shards);
  for (size_t t = 0; t < tables.size(); ++t) {
    dlrm::v1::TableDef* def = r.add_tables();
    def->set_table(static_cast<int>(t));
    def->set_name(absl::StrCat("C", t + 1));
    def->set_rows(tables[t].first);
    def->set_dim(tables[t].second);
  }
  r.mutable_optimizer()->set_type("sgd");
  r.mutable_optimizer()->set_learning_rate(0.1f);
  r.set_seed(7);
  r.set_staleness(staleness);
  r.set_num_workers(num_workers);
  return r;
}

}  // namespace dlrm::server::testing
