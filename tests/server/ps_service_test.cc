// The parameter-server service through gRPC on loopback: LoadJob semantics and its limits,
// validation of every request (codes and messages), ids owned by another shard, garbage bytes.
// (Rows and checkpoints: ps_service_rows_test.cc; lookups, pushes and the memory budget:
// ps_service_lookup_push_test.cc; staleness: ps_staleness_test.cc; the sharded client:
// tests/worker/ps_client_test.cc.)
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "common/sharding.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/ps_job.h"
#include "server/ps_server.h"
#include "tests/server/garbage_calls.h"
#include "tests/server/ps_service_fixture.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::kTimeout;
using testing::PackFloats;
using testing::PackIds;
using testing::PsServiceTest;
using testing::TestJob;
using testing::UnpackFloats;

TEST_F(PsServiceTest, LoadJobIsIdempotentAndRejectsConflicts) {
  StartPs();
  const auto job = TestJob("j1", {{100, 4}, {50, 8}});
  ASSERT_TRUE(Load(job).ok());
  ASSERT_TRUE(Load(job).ok()) << "a second worker loading the same job";
  EXPECT_EQ(ps_->service().job_ids(), std::vector<std::string>{"j1"});

  auto other = job;
  other.mutable_tables(1)->set_dim(16);
  grpc::Status s = Load(other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("j1"), HasSubstr("other parameters")));

  auto newer = job;
  newer.set_job_epoch(3);
  ASSERT_TRUE(Load(newer).ok());
  grpc::Status older = Load(job);
  EXPECT_EQ(older.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(older.error_message(), HasSubstr("epoch 1 is older than the loaded epoch 3"));

  auto bad = job;
  bad.set_job_id("../escape");
  EXPECT_EQ(Load(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = job;
  bad.mutable_optimizer()->set_type("rmsprop");
  EXPECT_EQ(Load(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = TestJob("j2", {{100, 4}}, /*shard=*/2, /*shards=*/2);
  s = Load(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("shard_index 2"));

  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("j1");
  dlrm::v1::UnloadJobResponse unload_resp;
  EXPECT_TRUE(
      stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unload_resp).ok());
  EXPECT_EQ(stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unload_resp)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(ps_->service().job_ids().empty());
}

TEST_F(PsServiceTest, EveryBadRequestGetsItsCodeAndMessage) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}, {10131227, 2}})).ok());
  dlrm::v1::LookupResponse resp;
  auto expect = [&](const grpc::Status& s, grpc::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(text));
  };
  expect(Lookup(LookupOf("nope", 0, {1}), &resp), grpc::StatusCode::NOT_FOUND, "'nope'");
  expect(Lookup(LookupOf("j", 5, {1}), &resp), grpc::StatusCode::NOT_FOUND, "table 5 not found");
  expect(Lookup(LookupOf("j", 1, {10131227}), &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "table 1: id 10131227 >= rows 10131227");
  expect(Lookup(LookupOf("j", 0, {-3}), &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: id -3 < 0");
  auto odd = LookupOf("j", 0, {1});
  odd.mutable_tables(0)->mutable_ids()->append("abc");
  expect(Lookup(odd, &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "ids payload of 11 bytes is not a multiple of 8");
  expect(Lookup(LookupOf("j", 0, {1}, /*epoch=*/0), &resp), grpc::StatusCode::FAILED_PRECONDITION,
         "request from epoch 0 is older than the loaded epoch 1");
  expect(Lookup(LookupOf("j", 0, {1}, /*epoch=*/2), &resp), grpc::StatusCode::FAILED_PRECONDITION,
         "epoch 2 is newer");
  auto bad_rank = LookupOf("j", 0, {1});
  bad_rank.set_step(0);
  bad_rank.set_worker_rank(4);
  expect(Lookup(bad_rank, &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "worker_rank 4 not in [0, 1)");
  // Bytes that are no LookupRequest at all (Lookup parses its own request).
  {
    grpc::GenericStub generic(common::MakeChannel({.target = ps_->address()}).value());
    const std::string junk(64, '\xff');
    grpc::Slice slice(junk.data(), junk.size());
    grpc::ByteBuffer junk_bytes(&slice, 1), junk_resp;
    grpc::CompletionQueue cq;
    auto ctx = common::MakeClientContext(kTimeout);
    auto call =
        generic.PrepareUnaryCall(ctx.get(), "/dlrm.v1.ParameterServer/Lookup", junk_bytes, &cq);
    grpc::Status status;
    call->StartCall();
    call->Finish(&junk_resp, &status, nullptr);
    void* tag;
    bool ok;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    expect(status, grpc::StatusCode::INVALID_ARGUMENT, "malformed LookupRequest");
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }

  expect(Push(PushOf("j", 0, {1, 2}, std::vector<float>(7))), grpc::StatusCode::INVALID_ARGUMENT,
         "gradient payload is 28 bytes, expected 32 (2 ids x dim 4 x 4 bytes of fp32)");
  expect(Push(PushOf("j", 0, {3, 3}, std::vector<float>(8))), grpc::StatusCode::INVALID_ARGUMENT,
         "id 3 repeated");
  expect(Push(PushOf("j", 0, {100}, std::vector<float>(4))), grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: id 100 >= rows 100");
  expect(Push(PushOf("x", 0, {1}, std::vector<float>(4))), grpc::StatusCode::NOT_FOUND, "'x'");
  expect(Push(PushOf("j", 0, {1, 9}, {0, 1, 2, 3, 4, 5, std::nanf(""), 7})),
         grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: the gradient of id 9 is inf or NaN (value 2 of its 4): the push is refused");

  // A bad table anywhere in a push leaves every table untouched.
  auto mixed = PushOf("j", 0, {1}, {1, 1, 1, 1});
  dlrm::v1::TableGradients* t = mixed.add_tables();
  t->set_table(1);
  t->set_ids(PackIds({5}));
  t->set_grads(PackFloats({1}));
  expect(Push(mixed), grpc::StatusCode::INVALID_ARGUMENT, "table 1: gradient payload is 4 bytes");
  t->set_grads(PackFloats({std::numeric_limits<float>::infinity(), 0}));
  expect(Push(mixed), grpc::StatusCode::INVALID_ARGUMENT, "id 5 is inf or NaN");
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1}), &resp).ok());
  embedding::LocalStoreOptions local_options;
  local_options.tables = {{"C1", 100, 4}, {"C2", 10, 2}};  // only table 0 is compared
  local_options.seed = 7;
  local_options.num_threads = -1;
  auto store = embedding::LocalEmbeddingStore::Create(local_options);
  ASSERT_TRUE(store.ok());
  std::vector<embedding::TableRows> ref = {{0, {1}, {}}};
  ASSERT_TRUE((*store)->Lookup(-1, absl::MakeSpan(ref)).ok());
  EXPECT_EQ(UnpackFloats(resp.tables(0).rows()), ref[0].values);
}

// A small request must not make the server build a huge answer: a Lookup or ReadRows whose rows
// would pass what one answer may carry (32 MiB; the client splits its batches below it) is refused
// before anything is allocated, naming the bytes, and the server goes on serving. Before, 16 KB of
// ids of a dim-4096 table asked for 8 GB here (a few MB took the server down).
TEST_F(PsServiceTest, ALookupOrReadRowsAskingForTooLargeAnAnswerIsRefused) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("wide", {{100, 4096}})).ok());
  const int64_t fits = common::kMaxRpcPayloadBytes / (4 * 4096);  // 2048 rows of 16 KiB
  dlrm::v1::LookupResponse resp;
  grpc::Status s = Lookup(LookupOf("wide", 0, std::vector<int64_t>(fits + 1, 3)), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("Lookup: the 2049 ids ask for 33570816 bytes of rows, "
                                           "more than the 33554432 one answer may carry"));
  s = Lookup(LookupOf("wide", 0, std::vector<int64_t>(fits, 3)), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.tables(0).rows().size(), static_cast<size_t>(common::kMaxRpcPayloadBytes));

  dlrm::v1::ReadRowsRequest read;
  read.set_job_id("wide");
  read.set_job_epoch(1);
  dlrm::v1::TableIds* t = read.add_tables();
  t->set_table(0);
  t->set_ids(PackIds(std::vector<int64_t>(fits, 3)));  // SGD: a stored row is its dim floats
  dlrm::v1::ReadRowsResponse rows;
  s = stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &rows);
  ASSERT_TRUE(s.ok()) << s.error_message();
  t->set_ids(PackIds(std::vector<int64_t>(fits + 1, 3)));
  s = stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &rows);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("ReadRows: the 2049 ids ask for 33570816 bytes"));

  // More ids than any request may carry, whatever their width.
  ASSERT_TRUE(Load(TestJob("narrow", {{100, 1}})).ok());
  s = Lookup(LookupOf("narrow", 0, std::vector<int64_t>(common::kMaxIdsPerRequest + 1, 1)), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("Lookup: 1048577 ids in one request, more than 1048576"));
  EXPECT_TRUE(Lookup(LookupOf("wide", 0, {1}), &resp).ok());
}

// A LoadJob with `restart` (a recovery rolling back to a checkpoint) drops the job's rows, which
// only the coordinator's grant allows: rank 0 holds it. Any other worker's restart moves the job
// to the new epoch and keeps the rows for rank 0's LoadJob of that epoch to drop. Before, any
// worker certificate could wipe a running job's trained rows with one LoadJob of a higher epoch.
TEST_F(PsServiceTest, ARestartDropsTheRowsOnlyWithTheJobsGrant) {
  const std::string key = "0123456789abcdef";
  const std::vector<float> fresh = StartWithJobJ(key);
  dlrm::v1::LookupResponse resp;
  ASSERT_TRUE(Push(PushOf("j", 0, {5}, {1, 1, 1, 1})).ok());
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {5}), &resp).ok());
  const std::vector<float> trained = UnpackFloats(resp.tables(0).rows());
  ASSERT_NE(trained, fresh);

  auto restart = [&](int64_t epoch, bool with_grant, int staleness = 0) {
    dlrm::v1::LoadJobRequest r = TestJob("j", {{100, 4}}, 0, 1, staleness);
    r.set_job_epoch(epoch);
    r.set_restart(true);
    auto ctx = LoadContext(r);
    if (with_grant) ctx->AddMetadata(common::kJobGrantMetadata, common::JobAdminGrant(key, "j"));
    dlrm::v1::LoadJobResponse out;
    return stub_->LoadJob(ctx.get(), r, &out);
  };
  auto row_at = [&](int64_t epoch) {
    EXPECT_TRUE(Lookup(LookupOf("j", 0, {5}, epoch), &resp).ok());
    return UnpackFloats(resp.tables(0).rows());
  };
  // Another rank first (no grant): the job is at epoch 2, its rows as they were.
  ASSERT_TRUE(restart(2, /*with_grant=*/false).ok());
  EXPECT_EQ(row_at(2), trained);
  // Other parameters without the grant: refused, nothing changes.
  EXPECT_EQ(restart(3, /*with_grant=*/false, /*staleness=*/4).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(row_at(2), trained);
  // Rank 0's LoadJob of epoch 2, with the grant: the rows start over.
  ASSERT_TRUE(restart(2, /*with_grant=*/true).ok());
  EXPECT_EQ(row_at(2), fresh);
  // Trained again; a late restart of the same epoch, with or without the grant, drops nothing.
  ASSERT_TRUE(Push([] {
                auto p = PushOf("j", 0, {5}, {1, 1, 1, 1});
                p.set_job_epoch(2);
                return p;
              }())
                  .ok());
  EXPECT_EQ(row_at(2), trained);
  ASSERT_TRUE(restart(2, /*with_grant=*/false).ok());
  ASSERT_TRUE(restart(2, /*with_grant=*/true).ok());
  EXPECT_EQ(row_at(2), trained);
  // Rank 0 first at the next epoch: it drops at once.
  ASSERT_TRUE(restart(3, /*with_grant=*/true).ok());
  EXPECT_EQ(row_at(3), fresh);
}

// Once the server has a grant key (it registered with a coordinator), its data calls (LoadJob,
// Lookup, PushGradients, ReadRows) need the coordinator's member grant for the job at the epoch
// they name, which every rank of the job gets (common/grants.h): a call without it, with a made-up
// one, or with the grant of another epoch or job is PERMISSION_DENIED naming job and epoch, and
// changes nothing; so a worker certificate alone can neither load a job the coordinator does not
// run, nor move a job to an epoch it has not reached, nor read or train another job's rows.
TEST_F(PsServiceTest, DataCallsNeedTheMemberGrantOfTheirJobAndEpoch) {
  const std::string key = "0123456789abcdef";
  const std::vector<float> fresh = StartWithJobJ(key);
  dlrm::v1::LookupResponse resp;

  const std::vector<std::string> wrong = {"", std::string(64, 'a'),
                                          common::JobMemberGrant(key, "j", 2),
                                          common::JobMemberGrant(key, "other", 1)};
  for (const std::string& grant : wrong) {
    auto context = [&] {
      auto ctx = common::MakeClientContext(kTimeout);
      if (!grant.empty()) ctx->AddMetadata(common::kMemberGrantMetadata, grant);
      return ctx;
    };
    auto denied = [&](const grpc::Status& s) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
      EXPECT_THAT(s.error_message(),
                  HasSubstr("of job 'j' at epoch 1 needs the coordinator's grant for the job's "
                            "ranks at that epoch"));
    };
    dlrm::v1::LoadJobResponse loaded;
    denied(stub_->LoadJob(context().get(), TestJob("j", {{100, 4}}), &loaded));
    dlrm::v1::LookupResponse looked;
    denied(stub_->Lookup(context().get(), LookupOf("j", 0, {5}), &looked));
    dlrm::v1::PushGradientsResponse pushed;
    denied(stub_->PushGradients(context().get(), PushOf("j", 0, {5}, {1, 1, 1, 1}), &pushed));
    dlrm::v1::ReadRowsRequest read;
    read.set_job_id("j");
    read.set_job_epoch(1);
    dlrm::v1::TableIds* t = read.add_tables();
    t->set_table(0);
    t->set_ids(PackIds({5}));
    dlrm::v1::ReadRowsResponse rows;
    denied(stub_->ReadRows(context().get(), read, &rows));
  }
  // A made-up job is not loaded, nor does the job move to a newer epoch.
  dlrm::v1::LoadJobResponse loaded;
  auto other_epoch = TestJob("j", {{100, 4}});
  other_epoch.set_job_epoch(2);
  EXPECT_EQ(stub_->LoadJob(Context("j", 1).get(), other_epoch, &loaded).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(
      stub_->LoadJob(Context("j", 1).get(), TestJob("made-up", {{100, 4}}), &loaded).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ps_->service().job_ids(), std::vector<std::string>{"j"});
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {5}), &resp).ok()) << "still at epoch 1";
  EXPECT_EQ(UnpackFloats(resp.tables(0).rows()), fresh) << "no push was applied";
  // With the grant: the push is applied.
  ASSERT_TRUE(Push(PushOf("j", 0, {5}, {1, 1, 1, 1})).ok());
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {5}), &resp).ok());
  EXPECT_NE(UnpackFloats(resp.tables(0).rows()), fresh);
}

// A rank of a job holds its member grant, but the job's tables and parameters are the
// coordinator's to choose: a LoadJob also needs the coordinator's load grant over the very
// request (server/ps_load_request.h), so that a worker certificate given a rank cannot load the
// job with tables of its own (an audit loaded 2^33-row tables into a 1000-row job). Without it,
// with the grant of another request (other rows, another optimizer, another shard) or a made-up
// one: PERMISSION_DENIED naming the job, and nothing loaded; whether the load restarts the job
// is not part of what is signed (the job grant decides that).
TEST_F(PsServiceTest, LoadJobNeedsTheCoordinatorsGrantOfItsVeryRequest) {
  const std::string key = "0123456789abcdef";
  StartPs();
  SetGrantKey(key);
  const dlrm::v1::LoadJobRequest job = TestJob("j", {{1000, 4}});
  dlrm::v1::LoadJobRequest huge = job;
  huge.mutable_tables(0)->set_rows(int64_t{1} << 33);
  dlrm::v1::LoadJobRequest faster = job;
  faster.mutable_optimizer()->set_learning_rate(1000);
  dlrm::v1::LoadJobRequest other_shard = TestJob("j", {{1000, 4}}, 1, 2);
  auto load_with = [&](const dlrm::v1::LoadJobRequest& r, const std::string& load_grant) {
    auto ctx = Context(r.job_id(), r.job_epoch());
    if (!load_grant.empty()) ctx->AddMetadata(common::kLoadGrantMetadata, load_grant);
    dlrm::v1::LoadJobResponse out;
    return stub_->LoadJob(ctx.get(), r, &out);
  };
  const std::string granted = common::JobLoadGrant(key, LoadJobRequestBytes(job));
  for (const auto& [request, grant] :
       {std::pair{job, std::string()}, std::pair{job, std::string(64, 'a')},
        std::pair{job, common::JobLoadGrant(key, LoadJobRequestBytes(other_shard))},
        std::pair{huge, granted}, std::pair{faster, granted}, std::pair{other_shard, granted}}) {
    grpc::Status s = load_with(request, grant);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("LoadJob of job 'j' at epoch 1 (shard " +
                                             std::to_string(request.shard_index())));
    EXPECT_THAT(s.error_message(), HasSubstr("needs the coordinator's load grant"));
    EXPECT_THAT(s.error_message(),
                HasSubstr(grant.empty() ? "it carries none" : "the tables or parameters differ"));
  }
  EXPECT_TRUE(ps_->service().job_ids().empty());
  ASSERT_TRUE(load_with(job, granted).ok());
  dlrm::v1::LoadJobRequest restarted = job;
  restarted.set_restart(true);
  EXPECT_TRUE(load_with(restarted, granted).ok());
  EXPECT_EQ(ps_->service().job_ids(), std::vector<std::string>{"j"});
}

// Each job is a RocksDB instance with its files: a server holds at most kMaxJobsPerPs, so that
// LoadJob calls of made-up jobs cannot take its file descriptors and memory. Past it, a load is
// refused naming the limit, and the jobs loaded stay as they were.
// A job unloaded (or restarted) while a call of its load still holds it keeps its store open
// until that call lets go; its store then closes on the reaper's thread. A new load of the same
// job and shard must not open a store in the folder the old one still writes and cleans (RocksDB
// deletes the files it does not know on close): it waits, and past its wait it is UNAVAILABLE,
// which clients retry; once the old store has closed the load succeeds and serves rows.
TEST_F(PsServiceTest, AReloadWaitsForTheOldStoreToCloseBeforeUsingItsFolder) {
  PsOptions options = testing::TestPsOptions(dir_.path());
  options.store_close_wait = absl::Milliseconds(300);
  StartPs(options);
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}})).ok());
  auto held = ps_->service().FindJob("j");  // a call of the first load, still in flight
  ASSERT_TRUE(held.ok());
  const std::string path = (*held)->path();
  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("j");
  dlrm::v1::UnloadJobResponse unloaded;
  ASSERT_TRUE(stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded).ok());
  const grpc::Status refused = Load(TestJob("j", {{100, 4}}));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("is still closing"));
  EXPECT_THAT(ps_->service().job_ids(), ::testing::IsEmpty());

  // The holder lets go while the next load waits: that load goes on once the store has closed.
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(100));
    held->reset();
  });
  const grpc::Status loaded = Load(TestJob("j", {{100, 4}}));
  release.join();
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  dlrm::v1::LookupResponse resp;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2}), &resp).ok());
  EXPECT_EQ(UnpackFloats(resp.tables(0).rows()).size(), 8u);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(path) / "CURRENT"));
}

// LoadJob and UnloadJob run off the data plane's pool: while loads wait for the load lock (here
// one waits for a held store to close, and more of every rank queue behind it), another job's
// pushes and lookups are still served at once. On the shared pool of two threads they waited
// for the loads.
TEST_F(PsServiceTest, LoadsWaitingForTheLoadLockDoNotHoldOtherJobsCalls) {
  PsOptions options = testing::TestPsOptions(dir_.path(), 1 << 20, /*threads=*/2);
  options.store_close_wait = absl::Seconds(5);
  StartPs(options);
  ASSERT_TRUE(Load(TestJob("other", {{100, 4}})).ok());
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}})).ok());
  auto held = ps_->service().FindJob("j");
  ASSERT_TRUE(held.ok());
  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("j");
  dlrm::v1::UnloadJobResponse unloaded;
  ASSERT_TRUE(stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded).ok());
  std::vector<std::thread> loads;
  for (int i = 0; i < 4; ++i) loads.emplace_back([&] { (void)Load(TestJob("j", {{100, 4}})); });
  absl::SleepFor(absl::Milliseconds(300));  // the loads have taken their threads
  dlrm::v1::PushGradientsResponse pushed;
  const grpc::Status push = stub_->PushGradients(common::MakeClientContext(absl::Seconds(2)).get(),
                                                 PushOf("other", 0, {1}, {1, 1, 1, 1}), &pushed);
  EXPECT_TRUE(push.ok()) << push.error_message();
  dlrm::v1::LookupResponse resp;
  EXPECT_TRUE(stub_
                  ->Lookup(common::MakeClientContext(absl::Seconds(2)).get(),
                           LookupOf("other", 0, {1}), &resp)
                  .ok());
  held->reset();
  for (std::thread& t : loads) t.join();
}

TEST_F(PsServiceTest, LoadJobPastTheJobsAServerHoldsIsRefused) {
  StartPs();
  for (int64_t j = 0; j < common::kMaxJobsPerPs; ++j) {
    ASSERT_TRUE(Load(TestJob(absl::StrCat("j", j), {{10, 2}})).ok()) << "job " << j;
  }
  const grpc::Status s = Load(TestJob("one-more", {{10, 2}}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("holds 64 jobs, the most it loads (kMaxJobsPerPs)"));
  // The same job again is no new job: idempotent, as before.
  EXPECT_TRUE(Load(TestJob("j3", {{10, 2}})).ok());
  dlrm::v1::LookupResponse resp;
  EXPECT_TRUE(Lookup(LookupOf("j63", 0, {9}), &resp).ok());
  EXPECT_EQ(Lookup(LookupOf("one-more", 0, {1}), &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A push may carry the learning rate of its step (a job's schedule, common/lr_schedule.h, which
// only the worker knows across a resume): SGD then moves a row by that rate times the gradient,
// not by LoadJob's 0.1; without one it uses LoadJob's; a rate of 0 moves nothing; a negative, NaN
// or infinite rate is refused naming it, and nothing is applied.
TEST_F(PsServiceTest, APushAppliesTheLearningRateItCarries) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}})).ok());
  auto row = [&] {
    dlrm::v1::LookupResponse resp;
    EXPECT_TRUE(Lookup(LookupOf("j", 0, {1}), &resp).ok());
    return resp.tables_size() == 1 ? UnpackFloats(resp.tables(0).rows()) : std::vector<float>{};
  };
  const std::vector<float> g = {1, -2, 4, 8};
  auto push = [&](std::optional<float> rate) {
    dlrm::v1::PushGradientsRequest r = PushOf("j", 0, {1}, g);
    if (rate.has_value()) r.set_learning_rate(*rate);
    return Push(r);
  };
  std::vector<float> before = row();
  ASSERT_EQ(before.size(), 4u);
  ASSERT_TRUE(push(0.25f).ok());
  std::vector<float> after = row();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(after[k], before[k] - 0.25f * g[k]) << k;

  before = after;
  ASSERT_TRUE(push(std::nullopt).ok());
  after = row();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(after[k], before[k] - 0.1f * g[k]) << "LoadJob's " << k;

  before = after;
  ASSERT_TRUE(push(0.0f).ok());
  EXPECT_EQ(row(), before) << "a rate of 0";
  for (float bad : {-0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), 2e6f}) {
    const grpc::Status s = push(bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr("learning_rate")) << bad;
  }
  EXPECT_EQ(row(), before) << "a refused push changed the row";
}

TEST_F(PsServiceTest, RejectsIdsOwnedByAnotherShard) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{1000, 4}}, /*shard=*/1, /*shards=*/3)).ok());
  int64_t foreign = 0;
  while (common::ShardOf(0, foreign, 3) == 1) ++foreign;
  int64_t own = 0;
  while (common::ShardOf(0, own, 3) != 1) ++own;
  dlrm::v1::LookupResponse resp;
  grpc::Status s = Lookup(LookupOf("j", 0, {own, foreign}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              AllOf(HasSubstr(absl::StrCat("id ", foreign, " belongs to shard ")),
                    HasSubstr("not to this shard 1 of 3")));
  EXPECT_TRUE(Lookup(LookupOf("j", 0, {own}), &resp).ok());
}

// LoadJob requests past a limit of common/limits.h are refused before anything is allocated
// (num_workers 1e9 once grew a PS to 8 GB; 10,000 tables wedged its pool), naming the field, the
// value and the limit; the job loaded before keeps its rows and nothing else is loaded.
TEST_F(PsServiceTest, LoadJobPastALimitIsRefusedAndTheServerIsUnchanged) {
  StartPs();
  const auto job = TestJob("j", {{100, 4}});
  ASSERT_TRUE(Load(job).ok());
  ASSERT_TRUE(Push(PushOf("j", 0, {1, 2}, std::vector<float>(8, 0.5f))).ok());
  dlrm::v1::LookupResponse before;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2, 3}), &before).ok());

  struct Case {
    std::string what;
    std::function<void(dlrm::v1::LoadJobRequest*)> edit;
    std::vector<std::string> texts;  // all in the message
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"num_workers",
       [](auto* r) { r->set_num_workers(1000000000); },
       {"num_workers 1000000000", absl::StrCat(common::kMaxJobWorkers), "kMaxJobWorkers"}},
      {"tables",
       [](auto* r) {
         *r = TestJob("big", std::vector<std::pair<int64_t, int>>(10000, {10, 4}));
       },
       {"tables (count) 10000", absl::StrCat(common::kMaxTables), "kMaxTables"}},
      {"rows",
       [](auto* r) { r->mutable_tables(0)->set_rows(int64_t{1} << 40); },
       {"table 0 rows 1099511627776", absl::StrCat(common::kMaxTableRows), "kMaxTableRows"}},
      {"dim",
       [](auto* r) { r->mutable_tables(0)->set_dim(1 << 20); },
       {"table 0 dim 1048576", absl::StrCat(common::kMaxEmbeddingDim), "kMaxEmbeddingDim"}},
      {"staleness",
       [](auto* r) { r->set_staleness(2000000000); },
       {"staleness 2000000000", absl::StrCat(common::kMaxStaleness), "kMaxStaleness"}},
      {"shard_count",
       [](auto* r) {
         r->set_shard_count(1 << 30);
         r->set_shard_index(0);
       },
       {"shard_count 1073741824", absl::StrCat(common::kMaxJobWorkers), "kMaxJobWorkers"}},
      {"nan learning rate",
       [nan](auto* r) { r->mutable_optimizer()->set_learning_rate(nan); },
       {"optimizer.learning_rate nan", "finite", "kMaxOptimizerValue"}},
      {"negative learning rate",
       [](auto* r) { r->mutable_optimizer()->set_learning_rate(-1); },
       {"optimizer.learning_rate -1", "finite"}},
      {"inf epsilon",
       [inf](auto* r) { r->mutable_optimizer()->set_epsilon(inf); },
       {"optimizer.epsilon inf", "finite"}},
      {"beta",
       [](auto* r) { r->mutable_optimizer()->set_beta2(1); },
       {"optimizer.beta2 1", "[0, 1)"}},
      {"job id",
       [](auto* r) { r->set_job_id(std::string(1 << 20, 'j')); },
       {"job_id of 1048576 bytes", absl::StrCat(common::kMaxNameBytes), "kMaxNameBytes"}},
      {"table name",
       [](auto* r) { r->mutable_tables(0)->set_name(std::string(1 << 20, 'n')); },
       {"name bytes 1048576", absl::StrCat(common::kMaxNameBytes), "kMaxNameBytes"}},
  };
  for (const Case& c : cases) {
    dlrm::v1::LoadJobRequest bad = TestJob("k", {{100, 4}});
    c.edit(&bad);
    const absl::Time start = absl::Now();
    grpc::Status s = Load(bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    for (const std::string& text : c.texts) {
      EXPECT_THAT(s.error_message(), HasSubstr(text)) << c.what;
    }
    EXPECT_LT(s.error_message().size(), 1000u) << c.what << ": the message quotes no payload";
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << c.what;
    EXPECT_TRUE(ValidateLoadRequest(bad).code() == absl::StatusCode::kInvalidArgument) << c.what;
  }
  EXPECT_EQ(ps_->service().job_ids(), std::vector<std::string>{"j"});
  dlrm::v1::LookupResponse after;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2, 3}), &after).ok());
  EXPECT_EQ(after.tables(0).rows(), before.tables(0).rows());
  // The pool is not wedged: the next job loads and serves at once.
  ASSERT_TRUE(Load(TestJob("k", {{100, 4}})).ok());
  ASSERT_TRUE(Lookup(LookupOf("k", 0, {5}), &after).ok());
}

// Bytes that are no request: every method parses its own request (raw methods) and answers
// INVALID_ARGUMENT naming the message; nothing is applied and the server serves on.
TEST_F(PsServiceTest, GarbageBytesChangeNothing) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{100, 4}})).ok());
  dlrm::v1::LookupResponse before;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2}), &before).ok());
  ::dlrm::testing::ExpectEveryMethodRefusesGarbage(
      common::MakeChannel({.target = ps_->address()}).value(),
      *dlrm::v1::LoadJobRequest::descriptor()->file()->FindServiceByName("ParameterServer"));
  dlrm::v1::LookupResponse after;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2}), &after).ok());
  EXPECT_EQ(after.tables(0).rows(), before.tables(0).rows());
  ASSERT_TRUE(Push(PushOf("j", 0, {1}, std::vector<float>(4, 1.0f))).ok());
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {1, 2}), &after).ok());
  EXPECT_NE(after.tables(0).rows(), before.tables(0).rows()) << "a real push still applies";
}

}  // namespace
}  // namespace dlrm::server
