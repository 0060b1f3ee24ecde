// Checkpoint folders as a user sees them: a folder is one run's (another run's newer checkpoints,
// a second run at once, another cluster job through a symlink are refused), and what a scan of a
// folder loads, keeps or passes over (damaged or edited manifests, folders that are not
// checkpoints, other jobs' checkpoints, a child whose parent another run rewrote). The fixture is
// checkpoint_fixture.h; resume, chains and eval/predict are checkpoint_test.cc's.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/checkpoint_fixture.h"
#include "tests/worker/test_util.h"
#include "worker/checkpoint.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A run from the start into a folder that holds another run's checkpoints would mix the two:
// refused before anything is written, naming the newest. Resuming from the newest continues the
// folder; resuming from an older one while newer ones exist is refused; a newer checkpoint that
// does not verify (nothing can load it) does not stand in the way.
TEST_F(CheckpointTest, ARunRefusesAFolderHoldingNewerCheckpointsOfAnotherRun) {
  common::JobSpec spec = Job("mix", 10, 5);
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  const std::string newest = Ckpt("mix/ckpt-000000000010");
  auto before = embedding::ReadManifest(newest);
  ASSERT_TRUE(before.ok());

  auto again = TrainInProcess(spec, Quiet());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("already holds checkpoint ckpt-000000000010 (step 10, job 'ckpt-test')"));
  auto after = embedding::ReadManifest(newest);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->created_unix, before->created_unix) << "the earlier run's checkpoint is kept";

  common::JobSpec more = spec;
  more.max_steps = 15;
  auto resumed = TrainInProcess(more, Quiet(Ckpt("mix")));
  ASSERT_TRUE(resumed.ok()) << resumed.status();

  auto older = TrainInProcess(more, Quiet(Ckpt("mix/ckpt-000000000005")));
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(older.status().message()),
              HasSubstr("holds checkpoint ckpt-000000000015 (step 15, job 'ckpt-test'), newer "
                        "than step 5 that this run resumes from"));

  // ckpt-15 damaged: the folder resumes from ckpt-10, and the run writes over ckpt-15.
  testing::WriteFile(Ckpt("mix/ckpt-000000000015/dense.bin"), "damaged");
  auto over = TrainInProcess(more, Quiet(Ckpt("mix")));
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_TRUE(embedding::LoadChain(Ckpt("mix/ckpt-000000000015")).ok());
}

// Two runs at once in one folder: the second is refused naming the first's process, and may
// start once the first is done.
TEST_F(CheckpointTest, ASecondCheckpointerOfAFolderIsRefusedWhileTheFirstLives) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("locked"));
  auto first = TrainCheckpointer::Create(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = TrainCheckpointer::Create(spec);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("is in use by another run (process ", ::getpid())));
  first->reset();
  EXPECT_TRUE(TrainCheckpointer::Create(spec).ok());
}

// Rank 0 of a cluster job locks its checkpoint folder like dlrm train: a second job given the
// same folder under another name (a symlink), which the coordinator's comparison of paths lets
// through, is refused naming the first job, where before its checkpoints replaced the first's
// under the same names. The same job's next run (a recovery whose earlier rank 0 still holds
// the lock) goes on; once the first lets go, another job may use the folder.
TEST_F(CheckpointTest, AClusterJobsRankZeroHoldsItsCheckpointFolder) {
  std::filesystem::create_directories(Ckpt("real"));
  std::filesystem::create_symlink(Ckpt("real"), Ckpt("link"));
  auto options = [&](const std::string& job_id, const std::string& dir) {
    ClusterCheckpointer::Options o;
    o.spec = SmallJob(dir_.File("train.tsv"), dir);
    o.job_id = job_id;
    return o;
  };
  auto first = ClusterCheckpointer::Create(options("job-1", Ckpt("real")));
  ASSERT_TRUE(first.ok()) << first.status();
  auto other = ClusterCheckpointer::Create(options("job-2", Ckpt("link")));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
  EXPECT_THAT(std::string(other.status().message()),
              HasSubstr(absl::StrCat("is in use by another run (job job-1 (process ", ::getpid())));
  auto recovery = ClusterCheckpointer::Create(options("job-1", Ckpt("link")));
  EXPECT_TRUE(recovery.ok()) << recovery.status();
  // A run that has written its last checkpoint lets go before it is torn down.
  (*first)->ReleaseFolder();
  recovery->reset();
  EXPECT_TRUE(ClusterCheckpointer::Create(options("job-2", Ckpt("link"))).ok());
  first->reset();

  // A checkpoint.dir that cannot be a folder fails with the file system's error, not UNAVAILABLE:
  // the workers take UNAVAILABLE for a lost peer, and such a job used up its recoveries on it.
  testing::WriteFile(Ckpt("afile"), "x");
  auto under_a_file = ClusterCheckpointer::Create(options("job-3", Ckpt("afile/sub")));
  EXPECT_EQ(under_a_file.status().code(), absl::StatusCode::kFailedPrecondition)
      << under_a_file.status();
  EXPECT_THAT(std::string(under_a_file.status().message()), HasSubstr("Not a directory"));
}

// A newest checkpoint whose manifest does not parse is passed over like one whose files do not
// verify: the folder resolves to the one before, and the listing reports the damaged one.
TEST_F(CheckpointTest, AFolderPassesOverACheckpointWithADamagedManifest) {
  common::JobSpec spec = Job("dm", 10, 5);
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  testing::WriteFile(Ckpt("dm/ckpt-000000000010/MANIFEST.json"), "{not json");
  std::vector<absl::Status> damaged;
  auto list = embedding::ListCheckpoints(Ckpt("dm"), &damaged);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(damaged[0].message()), HasSubstr("ckpt-000000000010/MANIFEST.json"));
  auto resolved = embedding::ResolveCheckpoint(Ckpt("dm"));
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(fs::path(*resolved).filename(), "ckpt-000000000005");
}

// A manifest that is no regular file hung a scan (a FIFO) or grew memory without end (a link to
// /dev/zero); one that could not be read was taken for a missing one, so its checkpoint counted as
// unfinished and a run removed it; a checkpoint name that is a link in a loop crashed the scan
// with an uncaught exception (audit). Each is now damaged or an error, named, and never removed.
TEST_F(CheckpointTest, AManifestThatCannotBeReadIsNeitherMissingNorReadForever) {
  common::JobSpec spec = Job("nr", 10, 5);
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  const std::string newest = Ckpt("nr/ckpt-000000000010");
  const std::string manifest = newest + "/MANIFEST.json";
  const std::string text = testing::ReadFile(manifest);
  auto expect_passed_over = [&](absl::StatusCode code, const std::string& says) {
    std::vector<absl::Status> damaged;
    auto list = embedding::ListCheckpoints(Ckpt("nr"), &damaged);
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_EQ(list->size(), 1u);
    ASSERT_EQ(damaged.size(), 1u);
    EXPECT_EQ(damaged[0].code(), code) << damaged[0];
    EXPECT_THAT(std::string(damaged[0].message()), HasSubstr(says));
    auto resolved = embedding::ResolveCheckpoint(Ckpt("nr"));
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(fs::path(*resolved).filename(), "ckpt-000000000005");
    auto removed = embedding::RemoveUncommitted(Ckpt("nr"));
    ASSERT_TRUE(removed.ok()) << removed.status();
    EXPECT_EQ(*removed, 0);
    EXPECT_TRUE(fs::exists(newest)) << "removed as unfinished";
  };
  fs::remove(manifest);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0) << std::strerror(errno);
  expect_passed_over(absl::StatusCode::kDataLoss, "MANIFEST.json: damaged manifest: not a regular");
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  expect_passed_over(absl::StatusCode::kDataLoss, "not a regular file");
  fs::remove(manifest);
  testing::WriteFile(manifest, text);
  ASSERT_TRUE(embedding::ReadManifest(newest).ok());
  // Unreadable: root reads any file, so the test takes the permission away as nobody's.
  if (::geteuid() != 0) {
    fs::permissions(manifest, fs::perms::none);
    expect_passed_over(absl::StatusCode::kPermissionDenied, "MANIFEST.json: Permission denied");
    fs::permissions(manifest, fs::perms::owner_read | fs::perms::owner_write);
  }
  // A checkpoint name that is a link to itself.
  const std::string loop = Ckpt("nr/ckpt-000000000020");
  fs::create_symlink("ckpt-000000000020", loop);
  std::vector<absl::Status> damaged;
  auto list = embedding::ListCheckpoints(Ckpt("nr"), &damaged);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 2u);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_THAT(std::string(damaged[0].message()), HasSubstr("ckpt-000000000020"));
  EXPECT_TRUE(embedding::RemoveUncommitted(Ckpt("nr")).ok());
  auto resolved = embedding::ResolveCheckpoint(Ckpt("nr"));
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(fs::path(*resolved).filename(), "ckpt-000000000010");
}

// A manifest edited after its commit (a step changed by hand, a flipped digit) no longer matches
// its own CRC32C: it is passed over as damaged, naming the manifest. One without the checksum
// (written before it existed) still loads.
TEST_F(CheckpointTest, AManifestChangedAfterItsCommitIsDamaged) {
  common::JobSpec spec = Job("mc", 10, 5);
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  const std::string path = Ckpt("mc/ckpt-000000000010/MANIFEST.json");
  const std::string text = testing::ReadFile(path);
  ASSERT_TRUE(absl::StrContains(text, "\"step\": 10,")) << text;
  testing::WriteFile(path, absl::StrReplaceAll(text, {{"\"step\": 10,", "\"step\": 11,"}}));
  std::vector<absl::Status> damaged;
  auto list = embedding::ListCheckpoints(Ckpt("mc"), &damaged);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(damaged[0].message()),
              AllOf(HasSubstr("ckpt-000000000010/MANIFEST.json"), HasSubstr("manifest_crc32c")));
  auto resolved = embedding::ResolveCheckpoint(Ckpt("mc"));
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(fs::path(*resolved).filename(), "ckpt-000000000005");

  // The same manifest, unchanged but without its checksum line, as older builds wrote it.
  testing::WriteFile(path, text);
  EditManifest(path, {});
  auto old = embedding::ReadManifest(Ckpt("mc/ckpt-000000000010"));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->step, 10);

  // Without a checksum to catch them, values nothing writes are damage too, naming the value.
  for (const auto& [from, to, says] :
       {std::tuple<std::string, std::string, std::string>{"\"step\": 10,", "\"step\": -1,",
                                                          "step -1 is negative"},
        {"\"step\": 10,", "\"step\": 999,", "step 999 is not that of its name 'ckpt-000000000010'"},
        {"\"world_size\": 1", "\"world_size\": 0", "input.world_size 0 is not >= 1"},
        {"\"batches\": ", "\"batches\": -", "out of range for world_size 1"},
        {"\"dim\": ", "\"dim\": -", "out of range"}}) {
    testing::WriteFile(path, text);
    EditManifest(path, {{from, to}});
    auto edited = embedding::ReadManifest(Ckpt("mc/ckpt-000000000010"));
    EXPECT_EQ(edited.status().code(), absl::StatusCode::kDataLoss) << to;
    EXPECT_THAT(std::string(edited.status().message()), HasSubstr(says)) << to;
  }
}

// A checkpoint root is shared with folders that are not its checkpoints: another run's folder
// named like one (ckpt-run1) is neither loaded nor removed as an unfinished checkpoint, even when
// the run resumes from it; a manifest whose name is a path (../victim) is damaged, so retention
// never removes a folder outside the root; and a run resumed from a renamed checkpoint of its
// root (ckpt-final) writes a full checkpoint next, which loads, not one building on a name that
// is not there.
TEST_F(CheckpointTest, OnlyCheckpointNamedFoldersAreLoadedOrRemovedAndNamesAreNeverPaths) {
  common::JobSpec spec = Job("outer/ckpt-run1", 10, 5);
  spec.checkpoint.full_every = 1;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  common::JobSpec next = spec;
  next.checkpoint.dir = Ckpt("outer");
  next.max_steps = 12;
  auto resumed = TrainInProcess(next, Quiet(Ckpt("outer/ckpt-run1")));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(fs::exists(Ckpt("outer/ckpt-run1/ckpt-000000000010/MANIFEST.json")))
      << "another run's folder was taken for an unfinished checkpoint and removed";
  auto removed = embedding::RemoveUncommitted(Ckpt("outer"));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0);

  // A manifest naming a folder outside its root.
  fs::create_directories(Ckpt("victim"));
  testing::WriteFile(Ckpt("victim/data.txt"), "kept");
  EditManifest(Ckpt("outer/ckpt-000000000012/MANIFEST.json"),
               {{"\"name\": \"ckpt-000000000012\"", "\"name\": \"../victim\""}});
  auto bad = embedding::ReadManifest(Ckpt("outer/ckpt-000000000012"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'../victim'"));
  auto kept = embedding::ApplyRetention(Ckpt("outer"), 1);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(fs::exists(Ckpt("victim/data.txt")));

  // Resumed from a renamed checkpoint in its root.
  fs::rename(Ckpt("outer/ckpt-run1/ckpt-000000000010"), Ckpt("outer/ckpt-final"));
  fs::remove_all(Ckpt("outer/ckpt-000000000012"));
  next.max_steps = 15;
  resumed = TrainInProcess(next, Quiet(Ckpt("outer/ckpt-final")));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto latest = embedding::ReadManifest(Ckpt("outer/ckpt-000000000015"));
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->incremental) << "builds on " << latest->parent;
  EXPECT_TRUE(embedding::FindVerifiedCheckpoint(Ckpt("outer")).ok());
}

// A cluster job's recovery takes the newest checkpoint of its own in its folder: one another job
// wrote there (given the same checkpoint.dir) is passed over, and with none of its own there is
// nothing to take (the job starts again from its resume_from).
TEST_F(CheckpointTest, AFolderScanForAJobPassesOverOtherJobsCheckpoints) {
  common::JobSpec spec = Job("jobs", 10, 5);
  spec.checkpoint.full_every = 1;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  for (const auto& [name, job] : {std::pair<std::string, std::string>{"ckpt-000000000005", "job-2"},
                                  {"ckpt-000000000010", "job-3"}}) {
    EditManifest(Ckpt("jobs/" + name + "/MANIFEST.json"),
                 {{"\"id\": \"\"", "\"id\": \"" + job + "\""}});
  }
  auto own = FindValidCheckpoint(Ckpt("jobs"), "job-2");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(fs::path(own->dir).filename(), "ckpt-000000000005");
  auto newest = FindValidCheckpoint(Ckpt("jobs"));
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(fs::path(newest->dir).filename(), "ckpt-000000000010");
  auto none = FindValidCheckpoint(Ckpt("jobs"), "job-4");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no committed checkpoint of job job-4"));
}

// An incremental checkpoint whose parent was lost stays unloadable when a later run writes a
// checkpoint of the parent's name (its step): its changed rows on top of that one would be a
// model of neither run. Before, it verified again and a folder scan took it as the newest.
TEST_F(CheckpointTest, AChildOfALostParentDoesNotComeBackWhenAnotherRunWritesItsName) {
  common::JobSpec spec = Job("lost", 15, 5);
  spec.checkpoint.full_every = 3;
  spec.checkpoint.keep_last = 10;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  auto child = embedding::ReadManifest(Ckpt("lost/ckpt-000000000015"));
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_EQ(child->parent, "ckpt-000000000010");
  fs::remove_all(Ckpt("lost/ckpt-000000000010"));

  common::JobSpec again = spec;  // resumes from step 5, the newest that verifies
  again.max_steps = 12;
  again.dense_optimizer.learning_rate *= 2;
  ASSERT_TRUE(TrainInProcess(again, Quiet(Ckpt("lost"))).ok());
  ASSERT_TRUE(fs::exists(Ckpt("lost/ckpt-000000000010/MANIFEST.json")));
  auto chain = embedding::LoadChain(Ckpt("lost/ckpt-000000000015"));
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss) << chain.status();
  EXPECT_THAT(std::string(chain.status().message()), HasSubstr("(another run's)"));
  auto newest = embedding::ResolveCheckpoint(Ckpt("lost"));
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(fs::path(*newest).filename(), "ckpt-000000000012");
}

}  // namespace
}  // namespace dlrm::worker
