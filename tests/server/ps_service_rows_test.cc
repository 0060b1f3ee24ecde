// The parameter-server service through gRPC on loopback: full rows (ReadRows / WriteRows) and
// checkpoints (SNAPSHOT, WRITE, the checkpoint root).
// (Jobs and request validation: ps_service_test.cc; lookups, pushes and the memory budget:
// ps_service_lookup_push_test.cc; staleness: ps_staleness_test.cc; the sharded client:
// tests/worker/ps_client_test.cc.)
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sharding.h"
#include "embedding/checkpoint_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "tests/server/ps_service_fixture.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;
using testing::kTimeout;
using testing::PackFloats;
using testing::PackIds;
using testing::PsServiceTest;
using testing::PsStub;
using testing::TestJob;
using testing::TestPsOptions;
using testing::UnpackFloats;

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
  // A NaN row (weights or optimizer state) would have been stored and served by Lookup.
  {
    dlrm::v1::WriteRowsRequest nan = one(0, {3, 4}, 2 * kWidth);
    std::vector<float> values(2 * kWidth, 1.0f);
    values[kWidth + 2] = std::numeric_limits<float>::quiet_NaN();
    nan.mutable_tables(0)->set_rows(PackFloats(values));
    expect(nan, grpc::StatusCode::INVALID_ARGUMENT,
           "table 0: the row of id 4 is inf or NaN (value 2 of its 5): the row write is refused");
  }
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

  // A phase that is neither (read as WRITE before, refused for its directory) and a part that is
  // not this server's shard (it wrote rows-t0-p-7.bin, which no manifest names).
  {
    const grpc::Status odd_phase =
        call(static_cast<dlrm::v1::CheckpointRequest::Phase>(7), out, &response);
    EXPECT_EQ(odd_phase.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(odd_phase.error_message(), HasSubstr("checkpoint phase 7 is neither"));
    dlrm::v1::CheckpointRequest r;
    r.set_job_id("c");
    r.set_step(5);
    r.set_phase(dlrm::v1::CheckpointRequest::WRITE);
    r.set_directory(out);
    r.set_part(-7);
    const grpc::Status odd_part =
        stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), r, &response);
    EXPECT_EQ(odd_part.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(odd_part.error_message(),
                HasSubstr("checkpoint part -7 is not this server's shard"));
  }
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

// A WRITE whose caller has gone (the worker died or gave up) or that a shutdown cancels stops
// and removes the files it wrote, instead of writing the whole shard for nobody (a SIGTERM waited
// for it); the snapshot stays, and a later WRITE of it succeeds. Three tables: the write is
// asked before each whether to go on; cancelled after the first, it leaves nothing.
TEST_F(PsServiceTest, ACancelledCheckpointWriteStopsAndRemovesItsFiles) {
  StartPs();
  ASSERT_TRUE(Load(TestJob("c", {{300, 4}, {200, 4}, {100, 4}})).ok());
  dlrm::v1::CheckpointRequest r;
  r.set_job_id("c");
  r.set_step(5);
  r.set_phase(dlrm::v1::CheckpointRequest::SNAPSHOT);
  r.set_part(0);
  ASSERT_TRUE(ps_->service().DoCheckpoint(r).ok());
  r.set_phase(dlrm::v1::CheckpointRequest::WRITE);
  const std::string out = dir_.path() + "/ckpt-000000000005";
  r.set_directory(out);
  int asked = 0;
  auto cancelled = ps_->service().DoCheckpoint(r, [&] { return ++asked > 1; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();
  EXPECT_THAT(std::string(cancelled.status().message()), HasSubstr("the call was cancelled"));
  EXPECT_GE(asked, 2);
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(out + "/rows-t0-p0.bin", ec)) << "removed";
  EXPECT_FALSE(std::filesystem::exists(out + "/rows-t1-p0.bin", ec));
  auto written = ps_->service().DoCheckpoint(r, [] { return false; });
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->files_size(), 3);
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

}  // namespace
}  // namespace dlrm::server
