// The parameter-server service through gRPC on loopback: lookups (reused messages, the inline
// path), pushes and the memory budget through the service, metrics, numbered pushes applied once
// (PushDedupe).
// (Jobs and request validation: ps_service_test.cc; rows and checkpoints:
// ps_service_rows_test.cc; staleness: ps_staleness_test.cc; the sharded client:
// tests/worker/ps_client_test.cc.)
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_job.h"
#include "server/ps_server.h"
#include "tests/server/ps_service_fixture.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;
using testing::kTimeout;
using testing::PackIds;
using testing::PsServiceTest;
using testing::TestJob;
using testing::UnpackFloats;

// The server reuses Lookup messages from call to call: a smaller answer after a larger one has
// exactly its own tables and rows, nothing left over.
TEST_F(PsServiceTest, ReusedLookupMessagesCarryNothingOver) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}, {50, 2}})).ok());
  dlrm::v1::LookupRequest big = LookupOf("j", 0, {1, 2, 3, 4, 5});
  dlrm::v1::TableIds* t = big.add_tables();
  t->set_table(1);
  t->set_ids(PackIds({7, 8}));
  for (int round = 0; round < 20; ++round) {  // more rounds than pooled pairs
    dlrm::v1::LookupResponse resp;
    ASSERT_TRUE(Lookup(big, &resp).ok());
    ASSERT_EQ(resp.tables_size(), 2);
    EXPECT_EQ(resp.tables(0).rows().size(), 5u * 4 * 4);
    EXPECT_EQ(resp.tables(1).rows().size(), 2u * 2 * 4);
    dlrm::v1::LookupResponse small_resp;
    ASSERT_TRUE(Lookup(LookupOf("j", 1, {7}), &small_resp).ok());
    ASSERT_EQ(small_resp.tables_size(), 1);
    EXPECT_EQ(small_resp.tables(0).table(), 1);
    EXPECT_EQ(small_resp.tables(0).dim(), 2);
    const std::vector<float> both = UnpackFloats(resp.tables(1).rows());
    EXPECT_EQ(UnpackFloats(small_resp.tables(0).rows()),
              std::vector<float>(both.begin(), both.begin() + 2));
  }
}

// A table four times the memory budget fills through the service: the memory tier stays within
// budget after every call and every row reads back with exactly the values the in-process store
// (same seed and optimizer, same pushes) has.
TEST_F(PsServiceTest, MemoryTierStaysUnderBudgetAndEveryRowReadsBack) {
  constexpr int kDim = 8;
  constexpr int64_t kRows = 4000;
  // Adagrad: 16 floats per stored row, 64 + 48 bytes accounted.
  constexpr int64_t kBudget = kRows / 4 * (16 * 4 + 48);
  StartPs(kBudget);
  auto job = TestJob("big", {{kRows, kDim}});
  job.mutable_optimizer()->set_type("adagrad");
  job.mutable_optimizer()->set_epsilon(1e-8f);
  ASSERT_TRUE(Load(job).ok());
  embedding::SparseOptimizerOptions opt;
  opt.type = embedding::SparseOptimizerType::kAdagrad;
  opt.learning_rate = 0.1f;
  opt.epsilon = 1e-8f;
  embedding::LocalStoreOptions local_options;
  local_options.tables = {{"C1", kRows, kDim}};
  local_options.seed = 7;
  local_options.optimizer = opt;
  local_options.num_threads = -1;
  auto local = embedding::LocalEmbeddingStore::Create(local_options);
  ASSERT_TRUE(local.ok());

  dlrm::v1::GetStatsRequest stats_req;
  stats_req.set_job_id("big");
  auto check_budget = [&] {
    dlrm::v1::GetStatsResponse stats;
    ASSERT_TRUE(stub_->GetStats(common::MakeClientContext(kTimeout).get(), stats_req, &stats).ok());
    EXPECT_LE(stats.memory_bytes(), kBudget);
    EXPECT_EQ(stats.memory_budget_bytes(), kBudget);
  };
  for (int round = 0; round < 2; ++round) {
    for (int64_t begin = 0; begin < kRows; begin += 500) {
      std::vector<int64_t> ids;
      std::vector<float> grads;
      for (int64_t id = begin; id < begin + 500; ++id) {
        ids.push_back(id);
        for (int k = 0; k < kDim; ++k)
          grads.push_back(0.01f * static_cast<float>((id + k) % 7 - 3 + round));
      }
      ASSERT_TRUE(Push(PushOf("big", 0, ids, grads)).ok());
      std::vector<embedding::TableRows> g = {{0, ids, grads}};
      ASSERT_TRUE((*local)->Push(-1, g).ok());
      check_budget();
    }
  }
  std::vector<int64_t> all(kRows);
  for (int64_t i = 0; i < kRows; ++i) all[i] = i;
  dlrm::v1::LookupResponse resp;
  ASSERT_TRUE(Lookup(LookupOf("big", 0, all), &resp).ok());
  check_budget();
  std::vector<embedding::TableRows> ref = {{0, all, {}}};
  ASSERT_TRUE((*local)->Lookup(-1, absl::MakeSpan(ref)).ok());
  const std::vector<float> got = UnpackFloats(resp.tables(0).rows());
  ASSERT_EQ(got.size(), ref[0].values.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != ref[0].values[i];
  EXPECT_EQ(mismatches, 0) << "rows must match the in-process store bit for bit";

  dlrm::v1::GetStatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(common::MakeClientContext(kTimeout).get(), stats_req, &stats).ok());
  EXPECT_GT(stats.rocksdb_writes(), 0) << "rows past the budget must have spilled";
  const std::string text = ps_->metrics().Serialize();
  for (const char* name :
       {"dlrm_ps_lookup_seconds", "dlrm_ps_push_seconds", "dlrm_ps_lookup_rows_total",
        "dlrm_ps_push_rows_total", "dlrm_ps_memory_rows", "dlrm_ps_memory_bytes",
        "dlrm_ps_memory_budget_bytes", "dlrm_ps_rocksdb_reads_total", "dlrm_ps_rocksdb_hits_total",
        "dlrm_ps_rows_created_total", "dlrm_ps_rocksdb_writes_total"}) {
    EXPECT_THAT(text, HasSubstr(name));
  }
  EXPECT_THAT(text, HasSubstr(absl::StrCat("dlrm_ps_lookup_rows_total ", kRows)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("dlrm_ps_push_rows_total ", 2 * kRows)));
}

// The value of the unlabelled counter or gauge `name` in a metrics text (-1 when absent).
double MetricValue(const std::string& text, const std::string& name) {
  const std::string prefix = name + " ";
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) {
      return std::stod(text.substr(at + prefix.size(), end - at - prefix.size()));
    }
    at = end + 1;
  }
  return -1;
}

// dlrm_ps_rocksdb_hits_total counts the rows RocksDB had, dlrm_ps_rows_created_total the rows
// initialised because no tier had them, and dlrm_ps_rocksdb_reads_total their sum: a first
// lookup only creates; rows pushed past the memory budget go to RocksDB, and the next lookup
// reads them from it, creating none. The counters keep counting across an unload.
TEST_F(PsServiceTest, RocksDbHitsAndRowCreationsAreCountedApart) {
  constexpr int64_t kRows = 2000;
  constexpr int kDim = 8;
  StartPs(/*budget=*/200 * (kDim * 4 + 48));  // room for a few hundred of the rows
  ASSERT_TRUE(Load(TestJob("j", {{kRows, kDim}})).ok());
  struct Counts {
    double reads, hits, created;
  };
  auto counts = [&] {
    const std::string text = ps_->metrics().Serialize();
    return Counts{MetricValue(text, "dlrm_ps_rocksdb_reads_total"),
                  MetricValue(text, "dlrm_ps_rocksdb_hits_total"),
                  MetricValue(text, "dlrm_ps_rows_created_total")};
  };
  std::vector<int64_t> all(kRows);
  for (int64_t i = 0; i < kRows; ++i) all[i] = i;
  dlrm::v1::LookupResponse resp;

  // Never seen: every row is created, none is read from RocksDB.
  ASSERT_TRUE(Lookup(LookupOf("j", 0, all), &resp).ok());
  Counts c = counts();
  EXPECT_EQ(c.created, kRows);
  EXPECT_EQ(c.hits, 0);
  EXPECT_EQ(c.reads, kRows);

  // One push of every row: the rows the memory tier does not keep are written to RocksDB. (Rows
  // the lookup evicted are read back from RocksDB; the looked-up rows the memory tier did not
  // keep were never stored, so they are created again.)
  ASSERT_TRUE(Push(PushOf("j", 0, all, std::vector<float>(kRows * kDim, 0.5f))).ok());
  c = counts();
  EXPECT_GT(c.created, kRows);
  EXPECT_EQ(c.reads, c.hits + c.created);
  const Counts pushed = c;

  // Every row is stored now: the misses of this lookup are all read from RocksDB.
  ASSERT_TRUE(Lookup(LookupOf("j", 0, all), &resp).ok());
  c = counts();
  EXPECT_GT(c.hits, kRows / 2) << "most rows are past the memory budget";
  EXPECT_EQ(c.created, pushed.created);
  EXPECT_EQ(c.reads - pushed.reads, c.hits - pushed.hits);
  const Counts read = c;

  // GetStats splits the job's memory-tier misses the same way (one job so far: the same counts).
  dlrm::v1::GetStatsRequest stats_req;
  stats_req.set_job_id("j");
  dlrm::v1::GetStatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(common::MakeClientContext(kTimeout).get(), stats_req, &stats).ok());
  EXPECT_EQ(stats.rocksdb_hits(), read.hits);
  EXPECT_EQ(stats.rows_created(), read.created);
  EXPECT_EQ(stats.rocksdb_reads(), stats.rocksdb_hits() + stats.rows_created());

  // Unloaded, the job's counts stay in the counters; a new job's first lookup adds to them.
  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("j");
  dlrm::v1::UnloadJobResponse unloaded;
  ASSERT_TRUE(stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded).ok());
  ASSERT_TRUE(Load(TestJob("k", {{kRows, kDim}})).ok());
  ASSERT_TRUE(Lookup(LookupOf("k", 0, {1, 2, 3}), &resp).ok());
  c = counts();
  EXPECT_EQ(c.created, read.created + 3);
  EXPECT_EQ(c.hits, read.hits);
  EXPECT_EQ(c.reads, read.reads + 3);
}

// Lookups served inline on the reactor (all rows resident, bound met) answer exactly what the
// pool path answers; a call mixing resident and cold tables is finished by the pool; a lookup
// whose staleness bound is not met still waits even when its rows are resident.
TEST_F(PsServiceTest, InlineLookupsMatchThePoolPathAndStillWaitForTheBound) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}, {1000, 4}}, 0, 1, /*staleness=*/0)).ok());
  auto stats = [&] {
    dlrm::v1::GetStatsRequest req;
    req.set_job_id("j");
    dlrm::v1::GetStatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(common::MakeClientContext(kTimeout).get(), req, &resp).ok());
    return resp;
  };
  dlrm::v1::LookupRequest both = LookupOf("j", 0, {1, 2, 3, 2});
  dlrm::v1::TableIds* t1 = both.add_tables();
  t1->set_table(1);
  t1->set_ids(PackIds({10, 11, 12}));
  dlrm::v1::LookupResponse cold, warm;
  ASSERT_TRUE(Lookup(both, &cold).ok());  // first touch: from the pool
  const int64_t reads = stats().rocksdb_reads();
  EXPECT_GT(reads, 0);
  ASSERT_TRUE(Lookup(both, &warm).ok());  // resident: inline
  EXPECT_EQ(stats().rocksdb_reads(), reads);
  ASSERT_EQ(warm.tables_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(warm.tables(i).table(), cold.tables(i).table());
    EXPECT_EQ(warm.tables(i).dim(), 4);
    EXPECT_EQ(UnpackFloats(warm.tables(i).rows()), UnpackFloats(cold.tables(i).rows()));
  }
  // Table 0 resident, table 1 cold: served in two parts, answer as from scratch.
  both.mutable_tables(1)->set_ids(PackIds({10, 500, 11}));
  dlrm::v1::LookupResponse mixed;
  ASSERT_TRUE(Lookup(both, &mixed).ok());
  EXPECT_GT(stats().rocksdb_reads(), reads);
  EXPECT_EQ(UnpackFloats(mixed.tables(0).rows()), UnpackFloats(cold.tables(0).rows()));
  const std::vector<float> m1 = UnpackFloats(mixed.tables(1).rows());
  const std::vector<float> c1 = UnpackFloats(cold.tables(1).rows());
  ASSERT_EQ(m1.size(), 12u);
  EXPECT_EQ(std::vector<float>(m1.begin(), m1.begin() + 4),
            std::vector<float>(c1.begin(), c1.begin() + 4));
  EXPECT_EQ(std::vector<float>(m1.begin() + 8, m1.end()),
            std::vector<float>(c1.begin() + 4, c1.begin() + 8));
  const dlrm::v1::GetStatsResponse s = stats();
  EXPECT_EQ(s.lookups(), 3);
  EXPECT_EQ(s.rows_looked_up(), 21);

  // An update is seen by the next inline lookup (SGD, lr 0.1: w - 0.1 * g).
  ASSERT_TRUE(Push(PushOf("j", 0, {1}, {1.f, 2.f, 3.f, 4.f})).ok());
  dlrm::v1::LookupResponse after;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1}), &after).ok());
  const std::vector<float> w0 = UnpackFloats(cold.tables(0).rows());
  const std::vector<float> w1 = UnpackFloats(after.tables(0).rows());
  for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(w1[k], w0[k] - 0.1f * (k + 1));

  // Step 1 needs worker 0's step 0, never pushed: waits (and times out) though rows are hot.
  dlrm::v1::LookupRequest gated = LookupOf("j", 0, {1, 2});
  gated.set_step(1);
  gated.set_worker_rank(0);
  dlrm::v1::LookupResponse gated_resp;
  grpc::Status g =
      stub_->Lookup(common::MakeClientContext(absl::Milliseconds(300)).get(), gated, &gated_resp);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

// A push sent twice with the same (worker, sequence), as a client does when the answer to the
// first copy was lost, changes the rows once and completes its step once; unnumbered pushes are
// applied every time; a newer epoch numbers from 1 again.
TEST_F(PsServiceTest, NumberedPushIsAppliedOnce) {
  StartPs();
  for (const char* job : {"once", "twice", "plain"}) {
    ASSERT_TRUE(Load(TestJob(job, {{100, 4}}, 0, 1, /*staleness=*/1)).ok());
  }
  auto push = [](const std::string& job, int64_t step, uint64_t sequence) {
    dlrm::v1::PushGradientsRequest r = PushOf(job, 0, {1, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    r.set_step(step);
    r.set_worker_rank(0);
    r.set_sequence(sequence);
    return r;
  };
  auto rows = [&](const std::string& job) {
    dlrm::v1::LookupResponse resp;
    EXPECT_TRUE(Lookup(LookupOf(job, 0, {1, 2}), &resp).ok());
    return UnpackFloats(resp.tables(0).rows());
  };
  auto stats = [&](const std::string& job) {
    dlrm::v1::GetStatsRequest req;
    req.set_job_id(job);
    dlrm::v1::GetStatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(common::MakeClientContext(kTimeout).get(), req, &resp).ok());
    return resp;
  };
  // Whether a lookup of `step` by worker 0 passes the staleness bound within 300 ms.
  auto passes = [&](const std::string& job, int64_t step) {
    dlrm::v1::LookupRequest r = LookupOf(job, 0, {1});
    r.set_step(step);
    r.set_worker_rank(0);
    dlrm::v1::LookupResponse resp;
    grpc::Status s =
        stub_->Lookup(common::MakeClientContext(absl::Milliseconds(300)).get(), r, &resp);
    EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
        << s.error_message();
    return s.ok();
  };
  const std::vector<float> initial = rows("once");

  ASSERT_TRUE(Push(push("once", 0, 1)).ok());
  ASSERT_TRUE(Push(push("twice", 0, 1)).ok());
  dlrm::v1::PushGradientsResponse again;
  ASSERT_TRUE(
      stub_->PushGradients(common::MakeClientContext(kTimeout).get(), push("twice", 0, 1), &again)
          .ok())
      << "a copy is answered OK";
  EXPECT_EQ(again.rows_updated(), 0);
  ASSERT_TRUE(Push(push("plain", 0, 0)).ok());
  ASSERT_TRUE(Push(push("plain", 0, 0)).ok());
  const std::vector<float> once = rows("once");
  EXPECT_NE(once, initial);
  EXPECT_EQ(rows("twice"), once) << "the copy was applied again";
  EXPECT_NE(rows("plain"), once) << "unnumbered pushes are applied every time";
  // The counters are the server's: once 1, twice 1, plain 2; the copy is not counted.
  EXPECT_EQ(stats("twice").pushes(), 4);
  EXPECT_EQ(stats("twice").rows_pushed(), 8);
  // Staleness 1: step 2 needs step 0 (pushed), step 3 needs step 1, which the copy is not.
  EXPECT_TRUE(passes("twice", 2));
  EXPECT_FALSE(passes("twice", 3));

  // A new number is a new push (and completes step 1).
  ASSERT_TRUE(Push(push("twice", 1, 2)).ok());
  EXPECT_NE(rows("twice"), once);
  EXPECT_TRUE(passes("twice", 3));

  // Epoch 2 (a recovery): the client numbers from 1 again, and its pushes are applied.
  auto newer = TestJob("once", {{100, 4}}, 0, 1, /*staleness=*/1);
  newer.set_job_epoch(2);
  ASSERT_TRUE(Load(newer).ok());
  dlrm::v1::PushGradientsRequest first = push("once", 0, 1);
  first.set_job_epoch(2);
  ASSERT_TRUE(Push(first).ok());
  dlrm::v1::LookupResponse at2;
  ASSERT_TRUE(Lookup(LookupOf("once", 0, {1, 2}, /*epoch=*/2), &at2).ok());
  EXPECT_NE(UnpackFloats(at2.tables(0).rows()), once);
}

// PushDedupe's window: per worker, out of order, released when nothing was applied, refused
// when applied part way, a number below the window refused, a newer epoch starting afresh, an
// older one refused.
TEST(PushDedupeTest, RemembersTheLastWindowOfEachWorkerPerEpoch) {
  using Claim = PushDedupe::Claim;
  using Outcome = PushDedupe::Outcome;
  PushDedupe dedupe(/*num_workers=*/2);
  auto claim = [&](int64_t epoch, int rank, uint64_t sequence) -> absl::StatusOr<Claim> {
    absl::StatusOr<Claim> c = dedupe.Begin(epoch, rank, sequence);
    if (c.ok() && *c == Claim::kApply) dedupe.End(epoch, rank, sequence, Outcome::kApplied);
    return c;
  };
  EXPECT_EQ(*claim(1, 0, 5), Claim::kApply);
  EXPECT_EQ(*claim(1, 0, 3), Claim::kApply) << "numbers arrive with gaps and out of order";
  EXPECT_EQ(*claim(1, 0, 5), Claim::kDuplicate);
  EXPECT_EQ(*claim(1, 0, 3), Claim::kDuplicate);
  EXPECT_EQ(*claim(1, 1, 5), Claim::kApply) << "every worker numbers on its own";

  // Nothing applied (the store failed before the first row): a copy may apply it.
  ASSERT_EQ(*dedupe.Begin(1, 0, 4), Claim::kApply);
  dedupe.End(1, 0, 4, Outcome::kNotApplied);
  EXPECT_EQ(*claim(1, 0, 4), Claim::kApply);
  EXPECT_EQ(*claim(1, 0, 4), Claim::kDuplicate);
  // Failed part way: a copy is refused, neither applied nor answered OK.
  ASSERT_EQ(*dedupe.Begin(1, 0, 2), Claim::kApply);
  dedupe.End(1, 0, 2, Outcome::kPartly);
  EXPECT_EQ(claim(1, 0, 2).status().code(), absl::StatusCode::kAborted);

  // The window moves: 5 + kWindow reuses 5's bit, 6 is new, 5 is too old to tell.
  const uint64_t far = 5 + PushDedupe::kWindow;
  EXPECT_EQ(*claim(1, 0, far), Claim::kApply);
  EXPECT_EQ(*claim(1, 0, 6), Claim::kApply);
  absl::StatusOr<Claim> old = claim(1, 0, 5);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(), HasSubstr("push 5 of worker 0 is older than the last"));

  EXPECT_EQ(*claim(2, 0, 5), Claim::kApply) << "a newer epoch numbers from 1 again";
  EXPECT_EQ(*claim(2, 1, 5), Claim::kApply);
  EXPECT_EQ(claim(1, 0, 7).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A copy that arrives while the first is being applied waits for it, so that its OK means
// "applied".
TEST(PushDedupeTest, CopyOfAPushBeingAppliedWaitsForIt) {
  PushDedupe dedupe(/*num_workers=*/1);
  ASSERT_EQ(*dedupe.Begin(1, 0, 9), PushDedupe::Claim::kApply);
  std::atomic<bool> answered{false};
  absl::StatusOr<PushDedupe::Claim> copy;
  std::thread other([&] {
    copy = dedupe.Begin(1, 0, 9);
    answered = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(answered.load());
  dedupe.End(1, 0, 9, PushDedupe::Outcome::kApplied);
  other.join();
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(*copy, PushDedupe::Claim::kDuplicate);
}

}  // namespace
}  // namespace dlrm::server
