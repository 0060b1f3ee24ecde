// The parameter server's checkpoint snapshots are its jobs' own: two jobs loaded on one server
// checkpoint at the same step (both with shard 0, as two `--ps 1` jobs on one cluster are), each
// WRITE holds its own job's rows, and what an earlier attempt or a replaced epoch left is cleared.
// (The checkpoint calls themselves: ps_service_rows_test.cc.)
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "embedding/checkpoint_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/ps_service_fixture.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::kTimeout;
using testing::PsServiceTest;

constexpr int kDim = 4;
constexpr int64_t kRows = 400;

class PsSnapshotPathsTest : public PsServiceTest {
 protected:
  // Loads `job` (one table, shard 0 of 1, epoch `epoch`) and writes every row with `value`.
  void LoadWithRows(const std::string& job, float value, int64_t epoch = 1) {
    dlrm::v1::LoadJobRequest load = testing::TestJob(job, {{kRows, kDim}});
    load.set_job_epoch(epoch);
    grpc::Status s = Load(load);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<int64_t> ids(kRows);
    for (int64_t i = 0; i < kRows; ++i) ids[i] = i;
    dlrm::v1::WriteRowsRequest write =
        WriteRowsOf(job, 0, ids, std::vector<float>(kRows * kDim, value));  // SGD: dim floats
    write.set_job_epoch(epoch);
    s = WriteRows(write);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  grpc::Status Checkpoint(const std::string& job, dlrm::v1::CheckpointRequest::Phase phase,
                          int64_t step, const std::string& dir = "", int64_t epoch = 1,
                          dlrm::v1::CheckpointResponse* response = nullptr) {
    dlrm::v1::CheckpointRequest r;
    r.set_job_id(job);
    r.set_job_epoch(epoch);
    r.set_step(step);
    r.set_phase(phase);
    r.set_directory(dir);
    dlrm::v1::CheckpointResponse unused;
    return stub_->Checkpoint(common::MakeClientContext(kTimeout).get(), r,
                             response != nullptr ? response : &unused);
  }

  // Every row of the row file `dir`/rows-t0-p0.bin, which must all hold `value`.
  static void ExpectRowsOf(const std::string& dir, float value) {
    int64_t rows = 0;
    int64_t wrong = 0;
    const absl::Status read = embedding::ReadRowFile(
        dir + "/rows-t0-p0.bin", 0, kDim, [&](absl::Span<const int64_t> ids, const float* r) {
          rows += static_cast<int64_t>(ids.size());
          for (size_t k = 0; k < ids.size() * kDim; ++k) wrong += r[k] != value ? 1 : 0;
          return absl::OkStatus();
        });
    ASSERT_TRUE(read.ok()) << read;
    EXPECT_EQ(rows, kRows) << dir;
    EXPECT_EQ(wrong, 0) << dir << " holds rows that are not " << value;
  }
};

// Two jobs cut at the same step before either writes: each WRITE finds its own snapshot and
// writes its own job's rows. (With one snapshot folder per shard and step, the second SNAPSHOT
// replaced the first job's, whose WRITE then wrote the other job's rows and removed the folder,
// and the second WRITE found no snapshot.)
TEST_F(PsSnapshotPathsTest, TwoJobsCheckpointTheSameStepOnOneServer) {
  StartPs(/*budget=*/1 << 10);  // a small memory tier: most rows are in the RocksDB checkpoint
  LoadWithRows("job-a", 1.0f);
  LoadWithRows("job-b", 2.0f);
  dlrm::v1::CheckpointResponse a, b;
  grpc::Status s =
      Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 100, "", /*epoch=*/1, &a);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Checkpoint("job-b", dlrm::v1::CheckpointRequest::SNAPSHOT, 100, "", /*epoch=*/1, &b);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(a.directory(), b.directory());
  EXPECT_THAT(a.directory(), HasSubstr("job-a"));
  EXPECT_THAT(b.directory(), HasSubstr("job-b"));

  const std::string out_a = dir_.path() + "/ckpt-a/ckpt-100";
  const std::string out_b = dir_.path() + "/ckpt-b/ckpt-100";
  s = Checkpoint("job-a", dlrm::v1::CheckpointRequest::WRITE, 100, out_a);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Checkpoint("job-b", dlrm::v1::CheckpointRequest::WRITE, 100, out_b);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRowsOf(out_a, 1.0f);
  ExpectRowsOf(out_b, 2.0f);
  EXPECT_FALSE(fs::exists(a.directory())) << "a written snapshot is removed";
  EXPECT_FALSE(fs::exists(b.directory()));
}

// The same with both jobs' checkpoints at once, as two jobs' rank 0s send them: every call
// succeeds, several rounds over.
TEST_F(PsSnapshotPathsTest, TwoJobsCheckpointingTogetherBothSucceed) {
  StartPs(/*budget=*/1 << 10);
  LoadWithRows("job-a", 1.0f);
  LoadWithRows("job-b", 2.0f);
  for (int round = 0; round < 5; ++round) {
    const int64_t step = 100 * (round + 1);
    grpc::Status results[2];
    std::vector<std::thread> threads;
    for (int j = 0; j < 2; ++j) {
      threads.emplace_back([&, j] {
        const std::string job = j == 0 ? "job-a" : "job-b";
        grpc::Status s = Checkpoint(job, dlrm::v1::CheckpointRequest::SNAPSHOT, step);
        if (s.ok()) {
          s = Checkpoint(job, dlrm::v1::CheckpointRequest::WRITE, step,
                         absl::StrCat(dir_.path(), "/ckpt-", job, "/", step));
        }
        results[j] = s;
      });
    }
    for (std::thread& t : threads) t.join();
    for (int j = 0; j < 2; ++j) {
      EXPECT_TRUE(results[j].ok())
          << "round " << round << " job " << j << ": " << results[j].error_message();
    }
    ExpectRowsOf(absl::StrCat(dir_.path(), "/ckpt-job-a/", step), 1.0f);
    ExpectRowsOf(absl::StrCat(dir_.path(), "/ckpt-job-b/", step), 2.0f);
  }
}

// A snapshot folder left by an attempt that never wrote (same job, epoch and step) is replaced;
// those of an older epoch go at the next SNAPSHOT; unloading the job removes the rest.
TEST_F(PsSnapshotPathsTest, LeftoverSnapshotsAreRemoved) {
  StartPs();
  LoadWithRows("job-a", 1.0f);
  dlrm::v1::CheckpointResponse first;
  ASSERT_TRUE(
      Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 20, "", /*epoch=*/1, &first).ok());
  ASSERT_TRUE(fs::exists(first.directory()));
  std::ofstream(first.directory() + "/stray") << "from the failed attempt";
  dlrm::v1::CheckpointResponse again;
  grpc::Status s =
      Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 20, "", /*epoch=*/1, &again);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(again.directory(), first.directory());
  EXPECT_FALSE(fs::exists(first.directory() + "/stray"));

  // A recovery moves the job to epoch 2 (same parameters: the rows stay); its first SNAPSHOT
  // clears epoch 1's unwritten one.
  dlrm::v1::LoadJobRequest load = testing::TestJob("job-a", {{kRows, kDim}});
  load.set_job_epoch(2);
  ASSERT_TRUE(Load(load).ok());
  dlrm::v1::CheckpointResponse next;
  s = Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 20, "", /*epoch=*/2, &next);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(next.directory(), first.directory());
  EXPECT_FALSE(fs::exists(first.directory())) << "epoch 1's snapshot was left behind";
  EXPECT_TRUE(fs::exists(next.directory()));

  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("job-a");
  dlrm::v1::UnloadJobResponse unloaded;
  s = stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(fs::exists(next.directory())) << "unloading the job leaves its snapshot";
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "job-a")) << "the job's own folder stays";
}

// A job unloaded while a call in flight still holds it keeps its store open for that call; its
// folders go once the call lets go and the store has closed (at the next sweep: the PS's
// heartbeat, a load or an unload), not at the next load of the same job, which may never come.
TEST_F(PsSnapshotPathsTest, AJobHeldAtItsUnloadLosesItsFoldersOnceReleased) {
  StartPs();
  LoadWithRows("job-a", 1.0f);
  ASSERT_TRUE(Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 20).ok());
  const fs::path folder = fs::path(dir_.path()) / "job-a";
  absl::StatusOr<std::shared_ptr<PsJob>> held = ps_->service().FindJob("job-a");
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string store = (*held)->path(), snapshots = (*held)->snapshots_path();
  ASSERT_TRUE(fs::exists(store));
  ASSERT_TRUE(fs::exists(snapshots));

  dlrm::v1::UnloadJobRequest unload;
  unload.set_job_id("job-a");
  dlrm::v1::UnloadJobResponse unloaded;
  grpc::Status s = stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(fs::exists(store)) << "removed under a call that still uses the store";
  EXPECT_EQ(ps_->service().RemoveReleasedJobFolders(), 0);
  EXPECT_TRUE(fs::exists(store));

  held->reset();  // the call ends; the store closes on the reaper's thread
  int removed = 0;
  for (int i = 0; i < 1000 && removed == 0; ++i) {
    removed = ps_->service().RemoveReleasedJobFolders();
    if (removed == 0) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(removed, 1);
  EXPECT_FALSE(fs::exists(store));
  EXPECT_FALSE(fs::exists(snapshots));
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_EQ(ps_->service().RemoveReleasedJobFolders(), 0);

  // Loaded again after its release, the job's new folders are its own: a sweep leaves them.
  held = absl::NotFoundError("");
  LoadWithRows("job-a", 2.0f);
  held = ps_->service().FindJob("job-a");
  ASSERT_TRUE(held.ok());
  s = stub_->UnloadJob(common::MakeClientContext(kTimeout).get(), unload, &unloaded);
  ASSERT_TRUE(s.ok()) << s.error_message();
  held->reset();
  LoadWithRows("job-a", 3.0f);  // the load's sweep takes the released folders first
  EXPECT_TRUE(fs::exists(store));
  EXPECT_EQ(ps_->service().RemoveReleasedJobFolders(), 0);
  EXPECT_TRUE(fs::exists(store));
  dlrm::v1::LookupResponse rows;
  s = Lookup(LookupOf("job-a", 0, {0, 1}), &rows);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// A data folder from before the snapshots moved beside each job's store: the snapshots an
// interrupted checkpoint left in <data>/snapshots/<shard>-<step> hold RocksDB files nothing reads
// any more, and go when the server starts; anything else there stays.
TEST_F(PsSnapshotPathsTest, SnapshotsOfTheOldLayoutAreRemovedAtStart) {
  const fs::path old = fs::path(dir_.path()) / "snapshots";
  fs::create_directories(old / "0-100" / "table_0");
  std::ofstream((old / "0-100" / "table_0" / "000012.sst").string()) << "rows";
  fs::create_directories(old / "3-2000");
  std::ofstream((old / "notes.txt").string()) << "the operator's";
  fs::create_directories(old / "0-latest");
  StartPs();
  EXPECT_FALSE(fs::exists(old / "0-100"));
  EXPECT_FALSE(fs::exists(old / "3-2000"));
  EXPECT_TRUE(fs::exists(old / "notes.txt"));
  EXPECT_TRUE(fs::exists(old / "0-latest"));
  // With nothing else in it, the folder itself goes too.
  ps_.reset();
  fs::remove(old / "notes.txt");
  fs::remove(old / "0-latest");
  fs::create_directories(old / "1-5");
  StartPs();
  EXPECT_FALSE(fs::exists(old));
}

// A server killed with jobs loaded leaves their stores, and their checkpoint snapshots (hard
// links to the stores' files), in its data folder. The process restarted on that folder has none
// of them loaded and nothing else would remove them (LoadJob makes a store anew): it removes
// them when it starts. A store another process has open (a second server on the same folder),
// and folders of other names, stay.
TEST_F(PsSnapshotPathsTest, StoresAKilledServerLeftAreRemovedAtStart) {
  const fs::path data = dir_.path();
  StartPs(/*budget=*/1 << 10);  // most rows in the RocksDB tier
  LoadWithRows("job-a", 1.0f);
  ASSERT_TRUE(Checkpoint("job-a", dlrm::v1::CheckpointRequest::SNAPSHOT, 10).ok());
  ASSERT_TRUE(fs::exists(data / "job-a" / "shard-0" / "CURRENT"));
  ASSERT_TRUE(fs::exists(data / "job-a" / "shard-0-snapshots"));
  ps_.reset();  // as a killed server: nothing unloaded
  ASSERT_TRUE(fs::exists(data / "job-a" / "shard-0"));

  // Another process has job-b's store open: RocksDB's fcntl lock on its LOCK file.
  const fs::path busy = data / "job-b" / "shard-1";
  fs::create_directories(busy);
  std::ofstream((busy / "LOCK").string());
  fs::create_directories(data / "job-b" / "shard-1-snapshots" / "epoch-1-step-5");
  fs::create_directories(data / "models" / "shard-final");
  std::ofstream((data / "notes.txt").string()) << "the operator's";
  int locked[2], release[2];
  ASSERT_EQ(pipe(locked), 0);
  ASSERT_EQ(pipe(release), 0);
  const std::string lock_path = (busy / "LOCK").string();
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {  // only async-signal-safe calls
    const int fd = open(lock_path.c_str(), O_RDWR);
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    char c = fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0 ? 'y' : 'n';
    if (write(locked[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(locked[0], &c, 1), 1);
  ASSERT_EQ(c, 'y') << "the other process could not lock " << lock_path;

  StartPs();
  EXPECT_FALSE(fs::exists(data / "job-a")) << "the killed server's store and snapshots stay";
  EXPECT_TRUE(fs::exists(busy / "LOCK"));
  EXPECT_TRUE(fs::exists(data / "job-b" / "shard-1-snapshots" / "epoch-1-step-5"));
  EXPECT_TRUE(fs::exists(data / "models" / "shard-final"));
  EXPECT_TRUE(fs::exists(data / "notes.txt"));
  EXPECT_EQ(write(release[1], "x", 1), 1);
  int status = 0;
  EXPECT_EQ(waitpid(holder, &status, 0), holder);
  for (int fd : {locked[0], locked[1], release[0], release[1]}) close(fd);

  // The job loads on the new server as on any other.
  LoadWithRows("job-a", 2.0f);
  EXPECT_TRUE(fs::exists(data / "job-a" / "shard-0"));
}

}  // namespace
}  // namespace dlrm::server
