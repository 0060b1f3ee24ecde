// GrpcPsClient against real parameter servers on loopback: bit-for-bit agreement with the
// in-process store over two shards (with and without request splitting), the staleness bound
// across two clients, client-side validation, peers that are gone or too slow, and transient
// faults (through tests/worker/tcp_proxy.h): retried within the budget, a retried push applied
// once, Cancel.
#include "worker/ps_client.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "embedding/local_store.h"
#include "embedding/row_dtype.h"
#include "embedding/sparse_optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_job.h"
#include "server/ps_server.h"
#include "tests/server/ps_test_util.h"
#include "tests/worker/tcp_proxy.h"
#include "worker/input/zipf_sampler.h"

namespace dlrm::worker {
namespace {

using ::dlrm::testing::FreeLoopbackPort;
using ::dlrm::testing::TcpProxy;
using server::ParameterServer;
using server::testing::PsTempDir;
using server::testing::TestPsOptions;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

const std::vector<embedding::TableConfig> kTables = {
    {"C1", 1000, 8}, {"C2", 37, 4}, {"C3", 5000, 16}};

embedding::SparseOptimizerOptions Optimizer() {
  embedding::SparseOptimizerOptions o;
  o.type = embedding::SparseOptimizerType::kRowWiseAdagrad;
  o.learning_rate = 0.05f;
  o.epsilon = 1e-6f;
  o.initial_accumulator = 0.1f;
  return o;
}

// Distinct random ids per table.
std::vector<embedding::TableRows> RandomIds(Xoshiro256& rng, int per_table) {
  std::vector<embedding::TableRows> out;
  for (int t = 0; t < static_cast<int>(kTables.size()); ++t) {
    embedding::TableRows r;
    r.table = t;
    std::vector<bool> taken(kTables[t].rows, false);
    for (int i = 0; i < per_table; ++i) {
      const int64_t id = static_cast<int64_t>(rng.NextU64() % kTables[t].rows);
      if (taken[id]) continue;
      taken[id] = true;
      r.ids.push_back(id);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<embedding::TableRows> FirstRows(embedding::EmbeddingStore& store);

class PsClientTest : public ::testing::Test {
 protected:
  void StartShards(int n, absl::Duration delay = absl::ZeroDuration(), int64_t budget = 1 << 20) {
    for (int i = 0; i < n; ++i) {
      dirs_.push_back(std::make_unique<PsTempDir>());
      server::PsOptions options = TestPsOptions(dirs_.back()->path(), budget);
      options.injected_delay = delay;
      auto ps = ParameterServer::Start(options);
      ASSERT_TRUE(ps.ok()) << ps.status();
      addresses_.push_back((*ps)->address());
      servers_.push_back(std::move(*ps));
    }
  }
  PsClientOptions ClientOptions(int rank = 0) const {
    PsClientOptions o;
    o.ps_addresses = addresses_;
    o.job_id = "job-1";
    o.job_epoch = 1;
    o.worker_rank = rank;
    o.tables = kTables;
    o.rpc_timeout = absl::Seconds(10);
    return o;
  }
  // One shard behind a TcpProxy (proxy_, up) and a client through it with `rpc_timeout`, which
  // has loaded the job and made its connection (null on failure, with the failure recorded).
  std::unique_ptr<GrpcPsClient> ClientBehindProxy(absl::Duration rpc_timeout) {
    StartShards(1);
    proxy_ = std::make_unique<TcpProxy>(servers_[0]->port());
    proxy_->Up();
    addresses_ = {proxy_->address()};
    PsClientOptions options = ClientOptions();
    options.rpc_timeout = rpc_timeout;
    auto client = Client(options);
    if (client == nullptr) return nullptr;
    absl::Status loaded = client->LoadJobOnAll({Optimizer(), 5, 0, 1});
    EXPECT_TRUE(loaded.ok()) << loaded;
    if (!loaded.ok()) return nullptr;
    FirstRows(*client);  // the connection is up
    return client;
  }

  std::unique_ptr<GrpcPsClient> Client(const PsClientOptions& options) {
    auto client = GrpcPsClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::vector<std::unique_ptr<PsTempDir>> dirs_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<TcpProxy> proxy_;  // ClientBehindProxy's
};

class PsClientMatchTest : public PsClientTest, public ::testing::WithParamInterface<int> {};

// Several lookup/push steps through 2 shards give exactly the rows of the in-process store with
// the same seed and optimizer. Param: max rows per request (0: no splitting).
TEST_P(PsClientMatchTest, TwoShardsMatchTheLocalStoreBitForBit) {
  StartShards(2);
  PsClientOptions options = ClientOptions();
  options.max_rows_per_request = GetParam();
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  PsJobParams params;
  params.optimizer = Optimizer();
  params.seed = 42;
  ASSERT_TRUE(client->LoadJobOnAll(params).ok());
  ASSERT_TRUE(client->LoadJobOnAll(params).ok()) << "LoadJob is idempotent";

  embedding::LocalStoreOptions local_options;
  local_options.tables = kTables;
  local_options.seed = 42;
  local_options.optimizer = Optimizer();
  local_options.num_threads = -1;
  auto local = embedding::LocalEmbeddingStore::Create(local_options);
  ASSERT_TRUE(local.ok()) << local.status();

  Xoshiro256 rng(3);
  for (int step = 0; step < 5; ++step) {
    std::vector<embedding::TableRows> remote = RandomIds(rng, 300);
    std::vector<embedding::TableRows> expected = remote;
    ASSERT_TRUE(client->Lookup(step, absl::MakeSpan(remote)).ok());
    ASSERT_TRUE((*local)->Lookup(step, absl::MakeSpan(expected)).ok());
    for (size_t t = 0; t < remote.size(); ++t) {
      ASSERT_EQ(remote[t].values, expected[t].values) << "step " << step << " table " << t;
    }
    for (auto& r : remote) {
      for (float& v : r.values) v = static_cast<float>(rng.NextGaussian()) * 0.1f;
    }
    ASSERT_TRUE(client->Push(step, remote).ok());
    ASSERT_TRUE((*local)->Push(step, remote).ok());
  }
  // Every row of every table, after the pushes.
  std::vector<embedding::TableRows> all;
  for (int t = 0; t < static_cast<int>(kTables.size()); ++t) {
    embedding::TableRows r;
    r.table = t;
    for (int64_t id = 0; id < kTables[t].rows; ++id) r.ids.push_back(id);
    all.push_back(std::move(r));
  }
  std::vector<embedding::TableRows> expected = all;
  ASSERT_TRUE(client->Lookup(-1, absl::MakeSpan(all)).ok());
  ASSERT_TRUE((*local)->Lookup(-1, absl::MakeSpan(expected)).ok());
  for (size_t t = 0; t < all.size(); ++t) EXPECT_EQ(all[t].values, expected[t].values);

  auto stats = client->GetStatsAll();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  for (const auto& s : *stats) {
    EXPECT_GT(s.rows_looked_up(), 0) << "both shards serve rows";
    EXPECT_GT(s.rows_pushed(), 0);
  }
  const int64_t total_rows = 1000 + 37 + 5000;
  EXPECT_GE((*stats)[0].rows_looked_up() + (*stats)[1].rows_looked_up(), total_rows);
  if (GetParam() > 0) {
    EXPECT_GE((*stats)[0].lookups(), total_rows / 2 / GetParam()) << "requests were split";
  }
  EXPECT_TRUE(client->UnloadJobOnAll().ok());
}

INSTANTIATE_TEST_SUITE_P(Splitting, PsClientMatchTest, ::testing::Values(0, 97));

// Two workers, k = 0: worker 0's lookup for step 1 waits for worker 1's push of step 0, which
// must reach every shard even where worker 1 has no rows.
TEST_F(PsClientTest, StalenessBoundHoldsAcrossClientsAndShards) {
  StartShards(2);
  auto w0 = Client(ClientOptions(0));
  auto w1 = Client(ClientOptions(1));
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  PsJobParams params;
  params.num_workers = 2;
  params.staleness = 0;
  ASSERT_TRUE(w0->LoadJobOnAll(params).ok());
  ASSERT_TRUE(w1->LoadJobOnAll(params).ok());

  std::vector<embedding::TableRows> rows = {{0, {1, 2, 3, 4, 5, 6}, {}}};
  ASSERT_TRUE(w0->Lookup(0, absl::MakeSpan(rows)).ok());
  std::vector<embedding::TableRows> grads = {{0, rows[0].ids, std::vector<float>(6 * 8, 1.0f)}};
  ASSERT_TRUE(w0->Push(0, grads).ok());

  std::atomic<bool> done{false};
  absl::Status status;
  std::thread lookup([&] {
    std::vector<embedding::TableRows> r = {{0, {1, 2, 3, 4, 5, 6}, {}}};
    status = w0->Lookup(1, absl::MakeSpan(r));
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(done.load()) << "step 1 must wait for worker 1's step 0";
  // Worker 1 touches one row of table 2 only: one shard gets rows, the other an empty push.
  std::vector<embedding::TableRows> g1 = {{2, {9}, std::vector<float>(16, 0.5f)}};
  ASSERT_TRUE(w1->Push(0, g1).ok());
  lookup.join();
  EXPECT_TRUE(status.ok()) << status;
}

// Full stored rows written through two shards (small memory tiers, so most rows go to RocksDB)
// read back bit for bit in another order, split over several requests or not; a Lookup sees the
// written weights; bad writes are named.
TEST_F(PsClientTest, StoredRowsRoundTripBitExactThroughTwoShards) {
  StartShards(2, absl::ZeroDuration(), /*budget=*/8 << 10);
  for (int64_t max_rows : {int64_t{0}, int64_t{61}}) {
    PsClientOptions options = ClientOptions();
    options.max_rows_per_request = max_rows;
    auto client = Client(options);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->LoadJobOnAll({Optimizer(), 11, 0, 1}).ok());
    Xoshiro256 rng(max_rows + 5);
    std::vector<embedding::TableRows> rows = RandomIds(rng, 400);
    for (embedding::TableRows& r : rows) {
      const int width = kTables[r.table].dim + 1;  // row-wise Adagrad
      r.values.resize(r.ids.size() * width);
      for (float& v : r.values) v = static_cast<float>(rng.NextU64() % 100000) * 1e-3f - 50.0f;
      if (!r.values.empty()) r.values[0] = -0.0f;
    }
    ASSERT_TRUE(client->WriteStoredRows(rows).ok());

    std::vector<embedding::TableRows> back;
    for (const embedding::TableRows& r : rows) {
      back.push_back({r.table, std::vector<int64_t>(r.ids.rbegin(), r.ids.rend()), {}});
    }
    absl::Status s = client->ReadStoredRows(absl::MakeSpan(back));
    ASSERT_TRUE(s.ok()) << s;
    for (size_t t = 0; t < rows.size(); ++t) {
      const size_t width = kTables[rows[t].table].dim + 1;
      const size_t n = rows[t].ids.size();
      ASSERT_EQ(back[t].values.size(), n * width) << "table " << t;
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::memcmp(&back[t].values[i * width], &rows[t].values[(n - 1 - i) * width],
                              width * sizeof(float)),
                  0)
            << "table " << t << " id " << back[t].ids[i];
      }
    }
    std::vector<embedding::TableRows> looked = {{2, {rows[2].ids[0], rows[2].ids[1]}, {}}};
    ASSERT_TRUE(client->Lookup(-1, absl::MakeSpan(looked)).ok());
    const int dim = kTables[2].dim;
    EXPECT_EQ(looked[0].values[dim - 1], rows[2].values[dim - 1]);
    EXPECT_EQ(looked[0].values[dim], rows[2].values[dim + 1]);
    auto stats = client->GetStatsAll();
    ASSERT_TRUE(stats.ok());
    for (const auto& shard : *stats) {
      EXPECT_LE(shard.memory_bytes(), 8 << 10);
      EXPECT_GT(shard.rocksdb_writes(), 0);
    }

    // Bad writes: a width that is not the stored row's, a partial row, a repeated id.
    std::vector<embedding::TableRows> narrow = {{0, {1, 2}, std::vector<float>(2 * 8, 1.0f)}};
    s = client->WriteStoredRows(narrow);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("row_floats 9"));
    std::vector<embedding::TableRows> partial = {{1, {1, 2}, std::vector<float>(9, 1.0f)}};
    s = client->WriteStoredRows(partial);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("table 1: 9 row floats for 2 ids"));
    std::vector<embedding::TableRows> repeated = {{0, {4, 4}, std::vector<float>(18, 1.0f)}};
    s = client->WriteStoredRows(repeated);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("table 0: id 4 repeated"));
    std::vector<embedding::TableRows> out_of_range = {{0, {1000}, {}}};
    s = client->ReadStoredRows(absl::MakeSpan(out_of_range));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("table 0 (C1): id 1000 >= rows 1000"));
    ASSERT_TRUE(client->UnloadJobOnAll().ok());
  }
}

// Tables of fp16 and bf16 rows next to an fp32 one, through two shards (one request split in
// pieces): lookups give the stored half values (the in-process store's initial rows rounded to
// nearest), gradients go as half values, and each updated weight is a neighbour of the fp32
// update of the stored row by the rounded gradient; the fp32 table matches bit for bit. A
// parameter server told a dtype it does not know refuses the job by name.
TEST_F(PsClientTest, HalfPrecisionTablesStoreAndSendHalfValues) {
  using embedding::RowDtype;
  StartShards(2, absl::ZeroDuration(), /*budget=*/16 << 10);  // rows go to RocksDB and back
  PsClientOptions options = ClientOptions();
  options.tables[0].dtype = RowDtype::kFp16;
  options.tables[2].dtype = RowDtype::kBf16;
  options.max_rows_per_request = 101;
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->LoadJobOnAll({Optimizer(), 42, 0, 1}).ok());
  embedding::LocalStoreOptions local_options;
  local_options.tables = kTables;
  local_options.seed = 42;
  local_options.optimizer = Optimizer();
  auto local = embedding::LocalEmbeddingStore::Create(local_options);
  ASSERT_TRUE(local.ok()) << local.status();

  auto rounded = [](RowDtype dtype, float x) {
    uint16_t h[2];
    embedding::EncodeValues(dtype, &x, 1, h);
    embedding::DecodeValues(dtype, h, 1, &x);
    return x;
  };
  Xoshiro256 rng(9);
  for (int step = 0; step < 3; ++step) {
    std::vector<embedding::TableRows> ids = RandomIds(rng, 300);
    std::vector<embedding::TableRows> looked = ids, before = ids, expected = ids;
    ASSERT_TRUE(client->Lookup(step, absl::MakeSpan(looked)).ok());
    ASSERT_TRUE(client->ReadStoredRows(absl::MakeSpan(before)).ok());
    ASSERT_TRUE((*local)->Lookup(step, absl::MakeSpan(expected)).ok());
    std::vector<embedding::TableRows> grads = looked;
    for (auto& r : grads) {
      for (float& v : r.values) v = static_cast<float>(rng.NextGaussian()) * 0.1f;
    }
    ASSERT_TRUE(client->Push(step, grads).ok());
    std::vector<embedding::TableRows> after = ids;
    ASSERT_TRUE(client->ReadStoredRows(absl::MakeSpan(after)).ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      const RowDtype dtype = options.tables[t].dtype;
      const int dim = kTables[t].dim, width = dim + 1;
      for (size_t j = 0; j < ids[t].ids.size(); ++j) {
        for (int i = 0; i < dim; ++i) {
          const float w = looked[t].values[j * dim + i];
          ASSERT_EQ(w, before[t].values[j * width + i]) << "table " << t;
          // Rows untouched before this step hold their initial values, rounded.
          if (step == 0) {
            ASSERT_EQ(w, rounded(dtype, expected[t].values[j * dim + i]));
          }
        }
        std::vector<float> want(before[t].values.begin() + j * width,
                                before[t].values.begin() + (j + 1) * width);
        std::vector<float> g(grads[t].values.begin() + j * dim,
                             grads[t].values.begin() + (j + 1) * dim);
        for (float& x : g) x = rounded(dtype, x);
        embedding::ApplySparseOptimizerToRow(Optimizer(), dim, g.data(), want.data());
        for (int i = 0; i < dim; ++i) {
          const float w = after[t].values[j * width + i];
          if (dtype == RowDtype::kFp32) {
            ASSERT_EQ(w, want[i]) << "table " << t;
            continue;
          }
          // Stochastic rounding: the value of the dtype just below or just above the update.
          const float near = rounded(dtype, want[i]);
          const float step_size =
              std::fabs(near) * (dtype == RowDtype::kFp16 ? 0x1.0p-10f : 0x1.0p-7f);
          ASSERT_EQ(w, rounded(dtype, w));
          ASSERT_LE(std::fabs(w - want[i]), step_size * 1.01f + 1e-7f)
              << "table " << t << " id " << ids[t].ids[j] << " weight " << i;
        }
        ASSERT_EQ(after[t].values[j * width + dim], want[dim]) << "state, table " << t;
      }
    }
  }
  ASSERT_TRUE(client->UnloadJobOnAll().ok());

  // A dtype the parameter server does not know.
  dlrm::v1::LoadJobRequest bad = MakeLoadJobRequest(options, {Optimizer(), 42, 0, 1}, 0, 1);
  bad.mutable_tables(1)->set_dtype("fp8");
  absl::Status s = server::ValidateLoadRequest(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dtype 'fp8' is not one of fp32, fp16, bf16"));
}

TEST_F(PsClientTest, ValidatesBeforeSending) {
  addresses_ = {"127.0.0.1:1"};  // never contacted
  auto client = Client(ClientOptions());
  ASSERT_NE(client, nullptr);
  std::vector<embedding::TableRows> rows = {{1, {3, 37}, {}}};
  absl::Status s = client->Lookup(0, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 1 (C2): id 37 >= rows 37"));
  rows = {{5, {1}, {}}};
  EXPECT_THAT(client->Lookup(0, absl::MakeSpan(rows)).message(), HasSubstr("table 5 not in"));
  std::vector<embedding::TableRows> grads = {{0, {1, 2}, std::vector<float>(15)}};
  EXPECT_THAT(client->Push(0, grads).message(),
              HasSubstr("table 0: 15 gradient floats, expected 2 ids x dim 8"));
  PsClientOptions bad = ClientOptions();
  bad.ps_addresses.clear();
  EXPECT_EQ(GrpcPsClient::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

void ExpectFailsWithinDeadline(GrpcPsClient& client, absl::Duration deadline) {
  std::vector<embedding::TableRows> rows = {{0, {1, 2, 3}, {}}};
  const absl::Time start = absl::Now();
  absl::Status s = client.Lookup(0, absl::MakeSpan(rows));
  EXPECT_THAT(s.code(), AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
      << s;
  EXPECT_THAT(s.message(), HasSubstr("ps shard"));
  std::vector<embedding::TableRows> grads = {{0, {1}, std::vector<float>(8)}};
  s = client.Push(0, grads);
  EXPECT_THAT(s.code(), AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
      << s;
  EXPECT_LT(absl::Now() - start, 2 * deadline + absl::Milliseconds(500));
}

TEST_F(PsClientTest, NobodyListeningFailsWithinTheDeadline) {
  addresses_ = {"127.0.0.1:1"};
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Milliseconds(500);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  ExpectFailsWithinDeadline(*client, options.rpc_timeout);
  EXPECT_FALSE(client->LoadJobOnAll({}).ok());
}

TEST_F(PsClientTest, ServerShutDownMidRunFailsWithinTheDeadline) {
  StartShards(2);
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Milliseconds(500);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->LoadJobOnAll({}).ok());
  std::vector<embedding::TableRows> rows = {{0, {1, 2, 3}, {}}};
  ASSERT_TRUE(client->Lookup(-1, absl::MakeSpan(rows)).ok());
  servers_[1]->Shutdown(absl::ZeroDuration());
  servers_[1].reset();
  ExpectFailsWithinDeadline(*client, options.rpc_timeout);
}

TEST_F(PsClientTest, SlowServerFailsWithDeadlineExceeded) {
  StartShards(1, /*delay=*/absl::Seconds(1));
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Seconds(5);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->LoadJobOnAll({}).ok());
  options.rpc_timeout = absl::Milliseconds(300);
  auto impatient = Client(options);
  std::vector<embedding::TableRows> rows = {{0, {1}, {}}};
  const absl::Time start = absl::Now();
  absl::Status s = impatient->Lookup(-1, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

// ---- Transient faults ----

// A local store with the job's tables, seed and optimizer: what the PS rows must be.
std::unique_ptr<embedding::LocalEmbeddingStore> Reference(uint64_t seed) {
  embedding::LocalStoreOptions o;
  o.tables = kTables;
  o.seed = seed;
  o.optimizer = Optimizer();
  o.num_threads = -1;
  auto local = embedding::LocalEmbeddingStore::Create(o);
  EXPECT_TRUE(local.ok()) << local.status();
  return local.ok() ? std::move(*local) : nullptr;
}

// Rows 0..99 of every table through `store` (no staleness wait).
std::vector<embedding::TableRows> FirstRows(embedding::EmbeddingStore& store) {
  std::vector<embedding::TableRows> rows;
  for (int t = 0; t < static_cast<int>(kTables.size()); ++t) {
    embedding::TableRows r;
    r.table = t;
    for (int64_t id = 0; id < std::min<int64_t>(100, kTables[t].rows); ++id) r.ids.push_back(id);
    rows.push_back(std::move(r));
  }
  EXPECT_TRUE(store.Lookup(-1, absl::MakeSpan(rows)).ok());
  return rows;
}

std::vector<embedding::TableRows> SomeGradients() {
  return {{0, {1, 5, 7}, std::vector<float>(3 * 8, 0.25f)},
          {2, {3, 99}, std::vector<float>(2 * 16, -0.5f)}};
}

// How many pushes the PS at `address` has applied for job-1.
int64_t PushesApplied(const std::string& address) {
  auto stub = server::testing::PsStub(address);
  dlrm::v1::GetStatsRequest request;
  request.set_job_id("job-1");
  dlrm::v1::GetStatsResponse response;
  grpc::Status s =
      stub->GetStats(common::MakeClientContext(absl::Seconds(10)).get(), request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response.pushes();
}

// A PS that is not there yet when LoadJob starts, and comes up on its address a second later.
TEST_F(PsClientTest, ParameterServerThatComesUpLateIsWaitedFor) {
  addresses_ = {absl::StrCat("127.0.0.1:", FreeLoopbackPort())};
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Seconds(20);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  dirs_.push_back(std::make_unique<PsTempDir>());
  std::unique_ptr<ParameterServer> late;
  std::thread starter([&] {
    absl::SleepFor(absl::Seconds(1));
    server::PsOptions ps_options = TestPsOptions(dirs_.back()->path());
    ps_options.listen_address = addresses_[0];
    auto ps = ParameterServer::Start(ps_options);
    ASSERT_TRUE(ps.ok()) << ps.status();
    late = std::move(*ps);
  });
  const absl::Time start = absl::Now();
  absl::Status s = client->LoadJobOnAll({Optimizer(), 5, 0, 1});
  const absl::Duration took = absl::Now() - start;
  starter.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(15));
  std::vector<embedding::TableRows> grads = SomeGradients();
  EXPECT_TRUE(client->Push(0, grads).ok());
  auto reference = Reference(5);
  ASSERT_TRUE(reference->Push(0, grads).ok());
  EXPECT_EQ(FirstRows(*client)[0].values, FirstRows(*reference)[0].values);
}

// The network to a PS is down when a Lookup / Push starts and comes back a second later: both
// succeed, and the push is applied once.
TEST_F(PsClientTest, LookupAndPushWaitForANetworkThatComesBack) {
  StartShards(1);
  TcpProxy proxy(servers_[0]->port());
  proxy.Up();
  addresses_ = {proxy.address()};
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Seconds(20);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->LoadJobOnAll({Optimizer(), 5, 0, 1}).ok());
  auto reference = Reference(5);

  for (bool push : {false, true}) {
    proxy.Down();
    std::thread up([&] {
      absl::SleepFor(absl::Seconds(1));
      proxy.Up();
    });
    const absl::Time start = absl::Now();
    std::vector<embedding::TableRows> rows = SomeGradients();
    absl::Status s = push ? client->Push(0, rows) : client->Lookup(0, absl::MakeSpan(rows));
    const absl::Duration took = absl::Now() - start;
    up.join();
    ASSERT_TRUE(s.ok()) << (push ? "Push: " : "Lookup: ") << s;
    EXPECT_GE(took, absl::Milliseconds(900));
    EXPECT_LT(took, absl::Seconds(15));
    if (push) {
      ASSERT_TRUE(reference->Push(0, SomeGradients()).ok());
    }
  }
  const std::vector<embedding::TableRows> got = FirstRows(*client);
  const std::vector<embedding::TableRows> want = FirstRows(*reference);
  for (size_t t = 0; t < got.size(); ++t) EXPECT_EQ(got[t].values, want[t].values) << t;
  EXPECT_EQ(PushesApplied(servers_[0]->address()), 1);
}

// Nobody ever listens: UNAVAILABLE once the budget is spent (not at the first refusal), naming
// the shard's address and the attempts.
TEST_F(PsClientTest, ParameterServerThatNeverComesFailsWithinTheBudget) {
  addresses_ = {absl::StrCat("127.0.0.1:", FreeLoopbackPort())};
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Seconds(2);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  for (bool push : {false, true}) {
    std::vector<embedding::TableRows> rows = SomeGradients();
    const absl::Time start = absl::Now();
    absl::Status s = push ? client->Push(0, rows) : client->Lookup(0, absl::MakeSpan(rows));
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr(push ? "PushGradients on ps shard 0 (" : "Lookup on ps shard 0 ("),
                      HasSubstr(addresses_[0]), HasSubstr(" attempts in ")));
    EXPECT_GE(took, absl::Seconds(1)) << "retried, not failed at the first refusal";
    EXPECT_LT(took, options.rpc_timeout + absl::Seconds(3));
  }
}

// The answer to a push is lost (the connection drops after the PS applied it): the client sends
// it again with the same sequence number, the PS answers OK without applying it twice.
TEST_F(PsClientTest, PushWhoseAnswerWasLostIsAppliedOnce) {
  auto client = ClientBehindProxy(absl::Seconds(20));
  ASSERT_NE(client, nullptr);
  TcpProxy& proxy = *proxy_;

  proxy.HoldReplies();
  absl::Status pushed;
  std::thread push([&] { pushed = client->Push(0, SomeGradients()); });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (PushesApplied(servers_[0]->address()) == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(PushesApplied(servers_[0]->address()), 1);
  proxy.Down();  // the answer never arrives; the client sees the connection reset
  absl::SleepFor(absl::Milliseconds(300));
  proxy.Resume();
  proxy.Up();
  push.join();
  ASSERT_TRUE(pushed.ok()) << pushed;
  EXPECT_GE(proxy.connections(), 2) << "the push was sent again on a new connection";
  EXPECT_EQ(PushesApplied(servers_[0]->address()), 1) << "the copy is not counted";
  auto reference = Reference(5);
  ASSERT_TRUE(reference->Push(0, SomeGradients()).ok());
  const std::vector<embedding::TableRows> got = FirstRows(*client);
  const std::vector<embedding::TableRows> want = FirstRows(*reference);
  for (size_t t = 0; t < got.size(); ++t) EXPECT_EQ(got[t].values, want[t].values) << t;
}

// A PS that stalls for 3 s (its peer stopped, the kernel still holding the connection) costs the
// calls 3 s, not an error.
TEST_F(PsClientTest, StalledParameterServerCostsItsStallOnly) {
  auto client = ClientBehindProxy(absl::Seconds(20));
  ASSERT_NE(client, nullptr);
  TcpProxy& proxy = *proxy_;

  proxy.Stall();
  std::thread resume([&] {
    absl::SleepFor(absl::Seconds(3));
    proxy.Resume();
  });
  const absl::Time start = absl::Now();
  std::vector<embedding::TableRows> rows = SomeGradients();
  absl::Status lookup = client->Lookup(0, absl::MakeSpan(rows));
  absl::Status push = client->Push(0, SomeGradients());
  const absl::Duration took = absl::Now() - start;
  resume.join();
  EXPECT_TRUE(lookup.ok()) << lookup;
  EXPECT_TRUE(push.ok()) << push;
  EXPECT_GE(took, absl::Milliseconds(2500));
  EXPECT_LT(took, absl::Seconds(15));
}

// Cancel ends a call that is retrying a dead PS (budget 30 s) at once, and every later call.
TEST_F(PsClientTest, CancelEndsACallRetryingADeadParameterServer) {
  addresses_ = {absl::StrCat("127.0.0.1:", FreeLoopbackPort())};
  PsClientOptions options = ClientOptions();
  options.rpc_timeout = absl::Seconds(30);
  auto client = Client(options);
  ASSERT_NE(client, nullptr);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    client->Cancel();
  });
  std::vector<embedding::TableRows> rows = SomeGradients();
  const absl::Time start = absl::Now();
  absl::Status s = client->Lookup(0, absl::MakeSpan(rows));
  const absl::Duration took = absl::Now() - start;
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("ps client cancelled"));
  EXPECT_LT(took, absl::Seconds(5));

  client->Cancel();  // idempotent
  const absl::Time later = absl::Now();
  s = client->Push(0, SomeGradients());
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(client->LoadJobOnAll({}).code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - later, absl::Seconds(1));
}

// Cancel ends a call in flight to a stalled PS.
TEST_F(PsClientTest, CancelEndsACallInFlight) {
  auto client = ClientBehindProxy(absl::Seconds(30));
  ASSERT_NE(client, nullptr);
  TcpProxy& proxy = *proxy_;

  proxy.Stall();
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    client->Cancel();
  });
  const absl::Time start = absl::Now();
  absl::Status s = client->Push(0, SomeGradients());
  const absl::Duration took = absl::Now() - start;
  canceller.join();
  proxy.Resume();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("ps client cancelled"));
  EXPECT_LT(took, absl::Seconds(5));
}

}  // namespace
}  // namespace dlrm::worker
