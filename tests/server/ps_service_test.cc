// The parameter-server service through gRPC on loopback: LoadJob semantics, validation of every
// request (codes and messages), the memory budget through the service, metrics, shutdown,
// numbered pushes applied once (PushDedupe).
// (Staleness: ps_staleness_test.cc; the sharded client: tests/worker/ps_client_test.cc.)
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "common/sharding.h"
#include "embedding/checkpoint_io.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/ps_job.h"
#include "server/ps_server.h"
#include "tests/server/garbage_calls.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::PackFloats;
using testing::PackIds;
using testing::PsStub;
using testing::PsTempDir;
using testing::TestJob;
using testing::TestPsOptions;
using testing::UnpackFloats;

constexpr absl::Duration kTimeout = absl::Seconds(10);

class PsServiceTest : public ::testing::Test {
 protected:
  void StartPs(int64_t budget = 1 << 20) {
    auto ps = ParameterServer::Start(TestPsOptions(dir_.path(), budget));
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    stub_ = PsStub(ps_->address());
  }
  grpc::Status Load(const dlrm::v1::LoadJobRequest& r) {
    dlrm::v1::LoadJobResponse resp;
    return stub_->LoadJob(common::MakeClientContext(kTimeout).get(), r, &resp);
  }
  grpc::Status Lookup(const dlrm::v1::LookupRequest& r, dlrm::v1::LookupResponse* resp) {
    return stub_->Lookup(common::MakeClientContext(kTimeout).get(), r, resp);
  }
  grpc::Status Push(const dlrm::v1::PushGradientsRequest& r) {
    dlrm::v1::PushGradientsResponse resp;
    return stub_->PushGradients(common::MakeClientContext(kTimeout).get(), r, &resp);
  }
  static dlrm::v1::LookupRequest LookupOf(const std::string& job, int table,
                                          const std::vector<int64_t>& ids, int64_t epoch = 1) {
    dlrm::v1::LookupRequest r;
    r.set_job_id(job);
    r.set_job_epoch(epoch);
    r.set_step(-1);
    dlrm::v1::TableIds* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    return r;
  }
  static dlrm::v1::WriteRowsRequest WriteRowsOf(const std::string& job, int table,
                                                const std::vector<int64_t>& ids,
                                                const std::vector<float>& rows) {
    dlrm::v1::WriteRowsRequest r;
    r.set_job_id(job);
    r.set_job_epoch(1);
    dlrm::v1::TableIdsRows* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    t->set_rows(PackFloats(rows));
    return r;
  }
  grpc::Status WriteRows(const dlrm::v1::WriteRowsRequest& r,
                         dlrm::v1::WriteRowsResponse* resp = nullptr) {
    dlrm::v1::WriteRowsResponse unused;
    return stub_->WriteRows(common::MakeClientContext(kTimeout).get(), r,
                            resp != nullptr ? resp : &unused);
  }
  static dlrm::v1::PushGradientsRequest PushOf(const std::string& job, int table,
                                               const std::vector<int64_t>& ids,
                                               const std::vector<float>& grads) {
    dlrm::v1::PushGradientsRequest r;
    r.set_job_id(job);
    r.set_job_epoch(1);
    r.set_step(-1);
    dlrm::v1::TableGradients* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    t->set_grads(PackFloats(grads));
    return r;
  }

  PsTempDir dir_;
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<dlrm::v1::ParameterServer::Stub> stub_;
};

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

  // A bad table anywhere in a push leaves every table untouched.
  auto mixed = PushOf("j", 0, {1}, {1, 1, 1, 1});
  dlrm::v1::TableGradients* t = mixed.add_tables();
  t->set_table(1);
  t->set_ids(PackIds({5}));
  t->set_grads(PackFloats({1}));
  expect(Push(mixed), grpc::StatusCode::INVALID_ARGUMENT, "table 1: gradient payload is 4 bytes");
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

// ReadRows / WriteRows: full rows [weights | optimizer state] round-trip bit for bit through a
// tier far smaller than the rows written (so most go to RocksDB), the budget holds, a Lookup
// sees the written weights, and every bad request is named.
TEST_F(PsServiceTest, WriteRowsThenReadRowsRoundTripUnderBudgetAndValidate) {
  constexpr int kDim = 4;
  constexpr int kWidth = kDim + 1;  // row-wise Adagrad: one accumulator per row
  constexpr int64_t kRows = 600;
  constexpr int64_t kBudget = 50 * (kWidth * 4 + 48);  // 50 resident rows
  StartPs(kBudget);
  dlrm::v1::LoadJobRequest job = TestJob("j", {{kRows, kDim}});
  job.mutable_optimizer()->set_type("rowwise_adagrad");
  job.mutable_optimizer()->set_initial_accumulator(0.1f);
  job.mutable_optimizer()->set_epsilon(1e-6f);
  ASSERT_TRUE(Load(job).ok());

  // Every row, in a scrambled order, with values whose bits must survive (signed zero, denormal).
  std::vector<int64_t> ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = (i * 7919) % kRows;
  std::vector<float> rows(kRows * kWidth);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<float>(k) * 0.37f - 11.0f;
  rows[3] = -0.0f;
  rows[4] = 1e-42f;
  const dlrm::v1::WriteRowsRequest write = WriteRowsOf("j", 0, ids, rows);
  dlrm::v1::WriteRowsResponse written;
  grpc::Status s = WriteRows(write, &written);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(written.rows_written(), kRows);

  dlrm::v1::GetStatsRequest stats_request;
  stats_request.set_job_id("j");
  dlrm::v1::GetStatsResponse stats;
  ASSERT_TRUE(
      stub_->GetStats(common::MakeClientContext(kTimeout).get(), stats_request, &stats).ok());
  EXPECT_LE(stats.memory_bytes(), kBudget);
  EXPECT_GT(stats.rocksdb_writes(), 0);

  // Read back in another order: row of ids[i] must be rows[i] bit for bit.
  std::vector<int64_t> order(ids.rbegin(), ids.rend());
  dlrm::v1::ReadRowsRequest read;
  read.set_job_id("j");
  read.set_job_epoch(1);
  dlrm::v1::TableIds* r = read.add_tables();
  r->set_table(0);
  r->set_ids(PackIds(order));
  dlrm::v1::ReadRowsResponse got;
  s = stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(got.tables_size(), 1);
  EXPECT_EQ(got.tables(0).row_floats(), kWidth);
  const std::vector<float> back = UnpackFloats(got.tables(0).rows());
  ASSERT_EQ(back.size(), rows.size());
  for (int64_t i = 0; i < kRows; ++i) {
    const int64_t j = kRows - 1 - i;  // order[i] == ids[j]
    EXPECT_EQ(std::memcmp(&back[i * kWidth], &rows[j * kWidth], kWidth * sizeof(float)), 0)
        << "id " << order[i];
  }
  dlrm::v1::LookupResponse looked;
  ASSERT_TRUE(Lookup(LookupOf("j", 0, {ids[0], ids[1]}), &looked).ok());
  EXPECT_EQ(
      UnpackFloats(looked.tables(0).rows()),
      std::vector<float>({rows[0], rows[1], rows[2], rows[3], rows[5], rows[6], rows[7], rows[8]}));

  auto expect = [&](const dlrm::v1::WriteRowsRequest& bad, grpc::StatusCode code,
                    const std::string& text) {
    dlrm::v1::WriteRowsResponse resp;
    grpc::Status st = stub_->WriteRows(common::MakeClientContext(kTimeout).get(), bad, &resp);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(text));
  };
  auto one = [&](int table, const std::vector<int64_t>& bad_ids, size_t floats) {
    dlrm::v1::WriteRowsRequest bad = write;
    bad.mutable_tables(0)->set_table(table);
    bad.mutable_tables(0)->set_ids(PackIds(bad_ids));
    bad.mutable_tables(0)->set_rows(PackFloats(std::vector<float>(floats, 1.0f)));
    return bad;
  };
  expect(one(0, {1, 2}, 2 * kDim), grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: rows payload is 32 bytes, expected 40 (2 ids x row_floats 5 x 4)");
  expect(one(0, {9, 9}, 2 * kWidth), grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: id 9 repeated in one row write");
  expect(one(0, {kRows}, kWidth), grpc::StatusCode::INVALID_ARGUMENT,
         "table 0: id 600 >= rows 600");
  expect(one(3, {1}, kWidth), grpc::StatusCode::NOT_FOUND, "table 3 not found");
  dlrm::v1::WriteRowsRequest twice = one(0, {1}, kWidth);
  *twice.add_tables() = twice.tables(0);
  expect(twice, grpc::StatusCode::INVALID_ARGUMENT, "table 0 appears twice in one row write");
  dlrm::v1::WriteRowsRequest old_epoch = one(0, {1}, kWidth);
  old_epoch.set_job_epoch(0);
  expect(old_epoch, grpc::StatusCode::FAILED_PRECONDITION, "request from epoch 0 is older");
  dlrm::v1::WriteRowsRequest no_job = one(0, {1}, kWidth);
  no_job.set_job_id("nope");
  expect(no_job, grpc::StatusCode::NOT_FOUND, "'nope'");
  // None of the rejected writes touched row 1, 2 or 9.
  read.mutable_tables(0)->set_ids(PackIds({1, 2, 9}));
  ASSERT_TRUE(stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &got).ok());
  const std::vector<float> kept = UnpackFloats(got.tables(0).rows());
  for (int k = 0; k < 3; ++k) {
    const int64_t id = std::vector<int64_t>{1, 2, 9}[k];
    const int64_t at = std::find(ids.begin(), ids.end(), id) - ids.begin();
    EXPECT_EQ(std::memcmp(&kept[k * kWidth], &rows[at * kWidth], kWidth * sizeof(float)), 0);
  }
  read.mutable_tables(0)->set_ids(PackIds({-1}));
  s = stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("table 0: id -1 < 0"));
}

// The server reuses Lookup messages from call to call: a smaller answer after a larger one has
// exactly its own tables and rows, nothing left over.
// Checkpoint: SNAPSHOT then WRITE gives one row file per table holding exactly the written rows;
// bad calls get their codes and leave the job's rows as they were.
TEST_F(PsServiceTest, CheckpointWritesTheSnapshotsRowsAndRefusesBadCalls) {
  constexpr int kDim = 4;
  constexpr int64_t kRows = 300;
  StartPs();
  dlrm::v1::LoadJobRequest job = TestJob("c", {{kRows, kDim}});
  ASSERT_TRUE(Load(job).ok());
  std::vector<int64_t> ids = {3, 7, 100, 299};
  // Width as the server reports it.
  dlrm::v1::ReadRowsRequest read;
  read.set_job_id("c");
  read.set_job_epoch(1);
  read.add_tables()->set_table(0);
  read.mutable_tables(0)->set_ids(PackIds(ids));
  dlrm::v1::ReadRowsResponse before;
  ASSERT_TRUE(stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &before).ok());
  const int row_floats = before.tables(0).row_floats();
  ASSERT_GE(row_floats, kDim);
  std::vector<float> rows(ids.size() * row_floats);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = 0.25f * static_cast<float>(k) - 1.0f;
  ASSERT_TRUE(WriteRows(WriteRowsOf("c", 0, ids, rows)).ok());

  auto call = [&](dlrm::v1::CheckpointRequest::Phase phase, const std::string& dir,
                  dlrm::v1::CheckpointResponse* response) {
    dlrm::v1::CheckpointRequest r;
    r.set_job_id("c");
    r.set_step(5);
    r.set_phase(phase);
    r.set_directory(dir);
    r.set_part(0);
    return stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), r, response);
  };
  dlrm::v1::CheckpointResponse response;
  const std::string out = dir_.path() + "/ckpt-000000000005";
  // WRITE before SNAPSHOT, a relative or unnormalised directory: refused.
  EXPECT_EQ(call(dlrm::v1::CheckpointRequest::WRITE, out, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(call(dlrm::v1::CheckpointRequest::WRITE, "rel/dir", &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(
      call(dlrm::v1::CheckpointRequest::WRITE, dir_.path() + "/a/../b", &response).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);

  ASSERT_TRUE(call(dlrm::v1::CheckpointRequest::SNAPSHOT, "", &response).ok());
  // An update after the snapshot is not in the checkpoint.
  ASSERT_TRUE(
      WriteRows(WriteRowsOf("c", 0, ids, std::vector<float>(ids.size() * row_floats, 9.0f))).ok());
  grpc::Status s = call(dlrm::v1::CheckpointRequest::WRITE, out, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.files_size(), 1);
  EXPECT_EQ(response.files(0).name(), "rows-t0-p0.bin");
  EXPECT_EQ(response.files(0).rows(), static_cast<int64_t>(ids.size()));
  std::vector<int64_t> got_ids;
  std::vector<float> got_rows;
  ASSERT_TRUE(embedding::ReadRowFile(out + "/rows-t0-p0.bin", 0, row_floats,
                                     [&](absl::Span<const int64_t> i, const float* r) {
                                       got_ids.insert(got_ids.end(), i.begin(), i.end());
                                       got_rows.insert(got_rows.end(), r,
                                                       r + i.size() * row_floats);
                                       return absl::OkStatus();
                                     })
                  .ok());
  EXPECT_EQ(got_ids, ids);
  EXPECT_EQ(got_rows, rows) << "the file holds the rows at the snapshot, not the later ones";
  auto digest = embedding::DigestFile(out + "/rows-t0-p0.bin");
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->crc32c, response.files(0).crc32c());
  EXPECT_EQ(digest->bytes, response.files(0).bytes());

  // After the job moved to epoch 2 (a recovery), a checkpoint call of epoch 1 is refused.
  job.set_job_epoch(2);
  ASSERT_TRUE(Load(job).ok());
  dlrm::v1::CheckpointRequest old;
  old.set_job_id("c");
  old.set_job_epoch(1);
  old.set_step(6);
  old.set_phase(dlrm::v1::CheckpointRequest::SNAPSHOT);
  s = stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), old, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("request from epoch 1 is older than the loaded epoch 2"));
  old.set_job_epoch(2);
  s = stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), old, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// dlrm ps --checkpoint-root: row files only go under the root, also not through a symbolic link
// inside it that points out.
TEST_F(PsServiceTest, CheckpointWritesStayUnderTheCheckpointRoot) {
  const std::string root = dir_.path() + "/ckpts";
  const std::string outside = dir_.path() + "/outside";
  std::filesystem::create_directories(root);
  std::filesystem::create_directories(outside);
  std::filesystem::create_directory_symlink(outside, root + "/link");
  PsOptions options = TestPsOptions(dir_.path() + "/data", 1 << 20);
  options.checkpoint_root = root;
  auto ps = ParameterServer::Start(options);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ps_ = std::move(*ps);
  stub_ = PsStub(ps_->address());
  ASSERT_TRUE(Load(TestJob("c", {{100, 4}})).ok());
  auto call = [&](dlrm::v1::CheckpointRequest::Phase phase, const std::string& dir) {
    dlrm::v1::CheckpointRequest r;
    r.set_job_id("c");
    r.set_step(5);
    r.set_phase(phase);
    r.set_directory(dir);
    dlrm::v1::CheckpointResponse response;
    return stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), r, &response);
  };
  ASSERT_TRUE(call(dlrm::v1::CheckpointRequest::SNAPSHOT, "").ok());
  for (const std::string& bad : {outside + "/c", root + "/link/c", std::string("/etc/dlrm-c"),
                                 dir_.path() + "/ckpts-sibling/c"}) {
    grpc::Status s = call(dlrm::v1::CheckpointRequest::WRITE, bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << bad;
    EXPECT_THAT(s.error_message(), HasSubstr("outside this parameter server's --checkpoint-root"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(outside)) << "nothing was written outside the root";
  grpc::Status inside = call(dlrm::v1::CheckpointRequest::WRITE, root + "/ckpt-5");
  EXPECT_TRUE(inside.ok()) << inside.error_message();
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-5/rows-t0-p0.bin"));
}

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

TEST_F(PsServiceTest, RowCallsRejectIdsOwnedByAnotherShard) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("j", {{1000, 4}}, /*shard=*/0, /*shards=*/2)).ok());
  int64_t foreign = 0;
  while (common::ShardOf(0, foreign, 2) == 0) ++foreign;
  // SGD: row_floats = dim.
  grpc::Status s = WriteRows(WriteRowsOf("j", 0, {foreign}, std::vector<float>(4, 1.0f)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("id ", foreign, " belongs to shard 1")));
  dlrm::v1::ReadRowsRequest read;
  read.set_job_id("j");
  read.set_job_epoch(1);
  dlrm::v1::TableIds* r = read.add_tables();
  r->set_table(0);
  r->set_ids(PackIds({foreign}));
  dlrm::v1::ReadRowsResponse got;
  s = stub_->ReadRows(common::MakeClientContext(kTimeout).get(), read, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("not to this shard 0 of 2"));
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
        "dlrm_ps_memory_budget_bytes", "dlrm_ps_rocksdb_reads_total",
        "dlrm_ps_rocksdb_writes_total"}) {
    EXPECT_THAT(text, HasSubstr(name));
  }
  EXPECT_THAT(text, HasSubstr(absl::StrCat("dlrm_ps_lookup_rows_total ", kRows)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("dlrm_ps_push_rows_total ", 2 * kRows)));
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
