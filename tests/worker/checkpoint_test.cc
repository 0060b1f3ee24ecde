// Checkpoints of `dlrm train` (worker/checkpoint.h over the format of
// embedding/checkpoint_manifest.h) as a user sees them: resume gives a bit-identical model,
// incremental chains load, damaged or unfinished checkpoints are refused or removed, a folder is
// one run's, eval/predict use the saved model. The checkpointer driven by hand and the files it
// writes are in train_checkpointer_test.cc.
#include "worker/checkpoint.h"

#include <unistd.h>

#include <algorithm>
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
#include "tests/worker/test_util.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// 12000 training samples: 47 steps per epoch.
common::JobSpec SmallJob(const std::string& train_path, const std::string& checkpoint_dir) {
  common::JobSpec spec = testing::SmallGeneratedJob(train_path, /*seed=*/5);
  spec.name = "ckpt-test";
  spec.checkpoint.dir = checkpoint_dir;
  return spec;
}

// Rewrites the manifest at `path` without its checksum line (as builds before it wrote them, so
// that it loads unchecked), replacing each `from` with its `to`; each must be there.
void EditManifest(const std::string& path,
                  const std::vector<std::pair<std::string, std::string>>& replacements) {
  std::vector<std::string> lines = absl::StrSplit(testing::ReadFile(path), '\n');
  std::erase_if(lines,
                [](const std::string& l) { return absl::StrContains(l, "manifest_crc32c"); });
  std::string text = absl::StrJoin(lines, "\n");
  for (const auto& [from, to] : replacements) {
    EXPECT_TRUE(absl::StrContains(text, from)) << from << " in " << path;
    text = absl::StrReplaceAll(text, {{from, to}});
  }
  testing::WriteFile(path, text);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::GenerateCappedTsv(dir_.File("train.tsv"), 15000, /*seed=*/3, 1000).ok());
  }
  TrainRunOptions Quiet(const std::string& resume = "") {
    TrainRunOptions o;
    o.show_progress = false;
    o.threads = 1;
    o.resume_from = resume;
    return o;
  }
  std::string Ckpt(const std::string& name) { return dir_.File(name); }

  // Every float of the dense model and of every stored row (weights and optimizer state) equal,
  // bit for bit.
  static void ExpectBitIdentical(const TrainArtifacts& a, const TrainArtifacts& b) {
    ASSERT_EQ(a.dense_params.size(), b.dense_params.size());
    EXPECT_EQ(std::memcmp(a.dense_params.data(), b.dense_params.data(),
                          a.dense_params.size() * sizeof(float)),
              0)
        << "dense parameters differ";
    ASSERT_EQ(a.store->tables().size(), b.store->tables().size());
    for (size_t t = 0; t < a.store->tables().size(); ++t) {
      const embedding::EmbeddingTable& x = a.store->table(static_cast<int>(t));
      const embedding::EmbeddingTable& y = b.store->table(static_cast<int>(t));
      ASSERT_EQ(x.rows(), y.rows());
      const size_t floats = static_cast<size_t>(x.rows()) * x.row_stride();
      EXPECT_EQ(std::memcmp(x.data(), y.data(), floats * sizeof(float)), 0)
          << "table " << t << " differs";
    }
  }

  testing::TempDir dir_;
};

// 2N steps in one go, and N steps + checkpoint + resume + N steps: the same model, bit for bit.
// N = 60 lies in the second epoch, so the resumed run must also skip the right batches there.
// With checkpoints every 7 steps and a full one every 3, the resumed run loads a chain (full +
// incrementals) and continues the chain.
TEST_F(CheckpointTest, ResumedTrainingGivesTheBitIdenticalModel) {
  common::JobSpec straight = SmallJob(dir_.File("train.tsv"), Ckpt("straight"));
  straight.max_steps = 80;
  TrainArtifacts reference;
  ASSERT_TRUE(TrainInProcess(straight, Quiet(), &reference).ok());

  common::JobSpec first = SmallJob(dir_.File("train.tsv"), Ckpt("split"));
  first.max_steps = 60;
  first.checkpoint.every_steps = 7;
  first.checkpoint.full_every = 3;
  first.checkpoint.keep_last = 2;
  auto r1 = TrainInProcess(first, Quiet());
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto list = embedding::ListCheckpoints(Ckpt("split"));
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_FALSE(list->empty());
  EXPECT_EQ(list->back().step, 60) << "the end of training is always checkpointed";
  EXPECT_TRUE(list->back().incremental) << "step 60 is the 2nd after the full one at 49";

  common::JobSpec second = first;
  second.max_steps = 80;
  TrainArtifacts resumed;
  auto r2 = TrainInProcess(second, Quiet(Ckpt("split")), &resumed);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->steps, 80);
  ExpectBitIdentical(reference, resumed);
}

// A run resumed in its own folder continues the chain it resumed from: its first checkpoint
// builds on that one, and full_every counts the links before it.
TEST_F(CheckpointTest, ResumeInItsFolderContinuesTheChain) {
  common::JobSpec first = SmallJob(dir_.File("train.tsv"), Ckpt("chain"));
  first.max_steps = 14;
  first.checkpoint.every_steps = 7;
  first.checkpoint.full_every = 3;
  first.checkpoint.keep_last = 10;
  auto r1 = TrainInProcess(first, Quiet());
  ASSERT_TRUE(r1.ok()) << r1.status();
  common::JobSpec second = first;
  second.max_steps = 28;
  auto r2 = TrainInProcess(second, Quiet(Ckpt("chain")));
  ASSERT_TRUE(r2.ok()) << r2.status();
  auto list = embedding::ListCheckpoints(Ckpt("chain"));
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> chain;
  for (const embedding::CheckpointManifest& m : *list) {
    chain.push_back(absl::StrCat(m.step, m.incremental ? " on " + m.parent : " full"));
  }
  EXPECT_THAT(chain, ::testing::ElementsAre("7 full", "14 on ckpt-000000000007",
                                            "21 on ckpt-000000000014", "28 full"));
}

// dlrm train on the CPU keeps fp32 tables in process: a half dtype is refused by name, not
// ignored (only the CUDA device's GPU tables store half rows).
TEST_F(CheckpointTest, DlrmTrainRefusesHalfPrecisionTablesOnTheCpu) {
  for (const char* dtype : {"fp16", "bf16"}) {
    common::JobSpec spec = SmallJob(dir_.File("train.tsv"), "");
    ASSERT_EQ(spec.device, "cpu");
    spec.tables[2].name = "C3";
    spec.tables[2].dtype = dtype;
    auto report = TrainInProcess(spec, Quiet());
    ASSERT_FALSE(report.ok()) << dtype;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(report.status().message()),
                HasSubstr(absl::StrCat("table C3: dtype ", dtype, ": dlrm train on the CPU")));
    EXPECT_THAT(std::string(report.status().message()), HasSubstr("stored by the CUDA device"));
  }
}

TEST_F(CheckpointTest, FlippedByteIsRefusedNamingTheFileAndTheFolderFallsBackToThePrevious) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("c"));
  spec.max_steps = 20;
  spec.checkpoint.every_steps = 10;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  auto list = embedding::ListCheckpoints(Ckpt("c"));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  const std::string newest = Ckpt("c/" + list->back().name);
  const std::string victim = newest + "/rows-t3-p0.bin";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c ^= 0x10;
    f.write(&c, 1);
  }
  TrainArtifacts unused;
  common::JobSpec more = spec;
  more.max_steps = 30;
  more.checkpoint.dir = Ckpt("other");
  // The damaged checkpoint named directly: refused, the file named.
  auto direct = TrainInProcess(more, Quiet(newest));
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(direct.status().message()), HasSubstr("rows-t3-p0.bin"));
  // The folder: the previous checkpoint (step 10) is used.
  auto fallback = TrainInProcess(more, Quiet(Ckpt("c")));
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->train_samples, 20 * 256) << "resumed at step 10, trained to 30";
}

TEST_F(CheckpointTest, AnUnfinishedCheckpointDoesNotExistAndIsRemoved) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("u"));
  spec.max_steps = 10;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  // A write that died before its manifest: files, no MANIFEST.json.
  fs::create_directories(Ckpt("u/ckpt-000000000015"));
  testing::WriteFile(Ckpt("u/ckpt-000000000015/dense.bin"), "partial");
  auto resolved = embedding::ResolveCheckpoint(Ckpt("u"));
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(fs::path(*resolved).filename(), "ckpt-000000000010");
  auto removed = embedding::RemoveUncommitted(Ckpt("u"));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(fs::exists(Ckpt("u/ckpt-000000000015")));
  EXPECT_TRUE(fs::exists(Ckpt("u/ckpt-000000000010/MANIFEST.json")));
}

TEST_F(CheckpointTest, AModelOfAnotherShapeIsRefusedNamingTheDifference) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("s"));
  spec.max_steps = 5;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  common::JobSpec wider = spec;
  wider.embedding_dim = 16;
  wider.bottom_mlp = {32, 16};
  wider.checkpoint.dir = "";
  auto r = TrainInProcess(wider, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 0"));

  // The same tables under another interaction: refused, naming both architectures.
  common::JobSpec dcn = spec;
  dcn.interaction = "dcnv2";
  dcn.checkpoint.dir = "";
  r = TrainInProcess(dcn, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("interaction dot, top MLP [32, 1]; the job spec's has 13 dense features, "
                        "bottom MLP [32, 8], interaction dcnv2 (3 cross layers of rank 512)"));

  // The same shapes pooled another way (mean for sum, the model's or one table's): refused.
  common::JobSpec mean = spec;
  mean.pooling = "mean";
  mean.checkpoint.dir = "";
  r = TrainInProcess(mean, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("table 0 (C) was trained with sum pooling; the job spec's is mean"));
  common::JobSpec one_table = spec;
  one_table.tables[3].pooling = "mean";
  one_table.checkpoint.dir = "";
  r = TrainInProcess(one_table, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 3 (C) was trained with sum"));
}

TEST_F(CheckpointTest, IncrementalCheckpointsHoldOnlyTheChangedRows) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("i"));
  spec.max_steps = 12;
  spec.checkpoint.every_steps = 6;
  spec.checkpoint.full_every = 10;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  auto list = embedding::ListCheckpoints(Ckpt("i"));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  const auto& full = list->front();
  const auto& inc = list->back();
  EXPECT_FALSE(full.incremental);
  EXPECT_TRUE(inc.incremental);
  EXPECT_EQ(inc.parent, full.name);
  int64_t full_rows = 0, inc_rows = 0;
  for (const auto& f : full.files) full_rows += f.rows;
  for (const auto& f : inc.files) inc_rows += f.rows;
  // 6 steps of 256 samples touch at most 6 * 256 ids per table; the full one holds every row
  // touched so far, a superset.
  EXPECT_GT(inc_rows, 0);
  EXPECT_LE(inc_rows, 26 * 6 * 256);
  EXPECT_LE(inc_rows, full_rows + 26 * 6 * 256);
}

// A checkpoint after the first copies only the rows changed since the last one into the
// snapshot it keeps (new rows apart, merged after the write). Checkpoints every 3 steps against
// one taken afresh at the end of the same training: the same row files and dense file, byte for
// byte, whether the checkpoints between were full or incremental; and the chain that ends with
// an incremental one at step 18 loads to the model a fresh checkpoint at 18 holds.
TEST_F(CheckpointTest, CheckpointsFromTheKeptSnapshotEqualOneTakenAfresh) {
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto fresh_at = [&](int steps) {
    common::JobSpec fresh = SmallJob(dir_.File("train.tsv"), Ckpt(absl::StrCat("fresh", steps)));
    fresh.max_steps = steps;
    EXPECT_TRUE(TrainInProcess(fresh, Quiet()).ok());
    auto list = embedding::ListCheckpoints(fresh.checkpoint.dir);
    EXPECT_TRUE(list.ok() && list->size() == 1u);
    return fresh.checkpoint.dir + "/" + list->back().name;
  };
  const std::string fresh20 = fresh_at(20);
  auto fresh_manifest = embedding::ReadManifest(fresh20);
  ASSERT_TRUE(fresh_manifest.ok());
  for (int full_every : {1, 3}) {
    SCOPED_TRACE(full_every);
    const std::string name = absl::StrCat("kept", full_every);
    common::JobSpec kept = SmallJob(dir_.File("train.tsv"), Ckpt(name));
    kept.max_steps = 20;
    kept.checkpoint.every_steps = 3;
    kept.checkpoint.full_every = full_every;
    kept.checkpoint.keep_last = 20;
    ASSERT_TRUE(TrainInProcess(kept, Quiet()).ok());
    auto list = embedding::ListCheckpoints(Ckpt(name));
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 7u);             // steps 3, 6, ..., 18 and the end, 20
    EXPECT_FALSE(list->back().incremental);  // 20: full (full_every 3: full at 3, 12 and 20)
    const std::string last = Ckpt(name) + "/" + list->back().name;
    for (const auto& f : fresh_manifest->files) {
      EXPECT_TRUE(slurp(last + "/" + f.name) == slurp(fresh20 + "/" + f.name))
          << f.name << " differs from the one taken afresh";
    }
    if (full_every == 1) continue;
    const auto& at18 = (*list)[list->size() - 2];
    ASSERT_EQ(at18.step, 18);
    ASSERT_TRUE(at18.incremental);
    TrainArtifacts from_chain, from_fresh;
    common::JobSpec load = SmallJob(dir_.File("train.tsv"), Ckpt("load-chain"));
    load.max_steps = 18;  // nothing left to train: the loaded state is the model
    ASSERT_TRUE(TrainInProcess(load, Quiet(Ckpt(name) + "/" + at18.name), &from_chain).ok());
    load.checkpoint.dir = Ckpt("load-fresh");
    ASSERT_TRUE(TrainInProcess(load, Quiet(fresh_at(18)), &from_fresh).ok());
    ExpectBitIdentical(from_fresh, from_chain);
  }
}

TEST_F(CheckpointTest, PredictScoresEqualEvalsOnTheSameRows) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("p"));
  spec.max_steps = 30;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  CheckpointModelOptions o;
  o.checkpoint = Ckpt("p");
  o.data = {dir_.File("train.tsv")};
  o.threads = 1;
  auto eval = RunEvalCommand(o, dir_.File("eval.json"));
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_TRUE(RunPredictCommand(o, dir_.File("scores.tsv")).ok());
  // Scores and labels from the files, AUC recomputed independently of the trainer.
  std::ifstream scores_in(dir_.File("scores.tsv"));
  std::vector<float> scores;
  for (float s; scores_in >> s;) scores.push_back(s);
  std::ifstream data_in(dir_.File("train.tsv"));
  std::vector<float> labels;
  for (std::string line; std::getline(data_in, line);) labels.push_back(line[0] == '1' ? 1 : 0);
  ASSERT_EQ(scores.size(), labels.size()) << "one score per input line";
  EXPECT_EQ(static_cast<int64_t>(scores.size()), eval->samples);
  // Mann-Whitney AUC over the written scores.
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0, pos = 0;
  for (size_t r = 0; r < order.size();) {
    size_t e = r;
    while (e < order.size() && scores[order[e]] == scores[order[r]]) ++e;
    const double mid = (r + e + 1) / 2.0;
    for (size_t k = r; k < e; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += mid;
        ++pos;
      }
    }
    r = e;
  }
  const double neg = scores.size() - pos;
  const double auc = (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
  EXPECT_NEAR(auc, eval->auc, 1e-6);
}

// A run from the start into a folder that holds another run's checkpoints would mix the two:
// refused before anything is written, naming the newest. Resuming from the newest continues the
// folder; resuming from an older one while newer ones exist is refused; a newer checkpoint that
// does not verify (nothing can load it) does not stand in the way.
TEST_F(CheckpointTest, ARunRefusesAFolderHoldingNewerCheckpointsOfAnotherRun) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("mix"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
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

// A checkpoint loads from the directory given, however it is spelled: with a trailing slash, as
// "." from inside it, or renamed (next to the checkpoint it builds on).
TEST_F(CheckpointTest, ACheckpointLoadsFromTheDirectoryGivenHoweverItIsSpelled) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("spell"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
  spec.checkpoint.full_every = 2;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  const std::string canonical = Ckpt("spell/ckpt-000000000010");
  auto manifest = embedding::ReadManifest(canonical);
  ASSERT_TRUE(manifest.ok());
  ASSERT_TRUE(manifest->incremental) << "the renamed one must find its parent by name";

  common::JobSpec load = spec;  // nothing left to train: the loaded state is the model
  load.checkpoint.dir = "";
  TrainArtifacts reference;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(TrainInProcess(load, Quiet(canonical), &reference).ok());
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("resumed at step 10 (epoch 1), where training.max_steps 10 and "
                        "training.epochs 2 leave nothing to train: the model is the checkpoint's"));
  auto expect_loads = [&](const std::string& path) {
    SCOPED_TRACE(path);
    TrainArtifacts loaded;
    auto r = TrainInProcess(load, Quiet(path), &loaded);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectBitIdentical(reference, loaded);
  };
  expect_loads(canonical + "/");
  expect_loads(canonical + "/.");
  const fs::path cwd = fs::current_path();
  fs::current_path(canonical);
  expect_loads(".");
  fs::current_path(cwd);
  fs::rename(canonical, Ckpt("spell/best"));
  expect_loads(Ckpt("spell/best"));
}

// A newest checkpoint whose manifest does not parse is passed over like one whose files do not
// verify: the folder resolves to the one before, and the listing reports the damaged one.
TEST_F(CheckpointTest, AFolderPassesOverACheckpointWithADamagedManifest) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("dm"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
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

// A manifest edited after its commit (a step changed by hand, a flipped digit) no longer matches
// its own CRC32C: it is passed over as damaged, naming the manifest. One without the checksum
// (written before it existed) still loads.
TEST_F(CheckpointTest, AManifestChangedAfterItsCommitIsDamaged) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("mc"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
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
}

// A checkpoint root is shared with folders that are not its checkpoints: another run's folder
// named like one (ckpt-run1) is neither loaded nor removed as an unfinished checkpoint, even when
// the run resumes from it; a manifest whose name is a path (../victim) is damaged, so retention
// never removes a folder outside the root; and a run resumed from a renamed checkpoint of its
// root (ckpt-final) writes a full checkpoint next, which loads, not one building on a name that
// is not there.
TEST_F(CheckpointTest, OnlyCheckpointNamedFoldersAreLoadedOrRemovedAndNamesAreNeverPaths) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("outer/ckpt-run1"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
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
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("jobs"));
  spec.max_steps = 10;
  spec.checkpoint.every_steps = 5;
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
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("lost"));
  spec.max_steps = 15;
  spec.checkpoint.every_steps = 5;
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

// A run that ends with its epoch checkpoints "epoch done" (the next epoch, none of it read), so a
// resume with another batch size starts the next epoch whole. It recorded every batch of the
// epoch, the last one short (12000 samples are 46 batches of 256 and one of 224), and a resume
// with batch 512 was refused for 47 x 256 = 12032 samples that 512 does not divide.
TEST_F(CheckpointTest, AnEpochsEndResumesWithAnyBatchSize) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("end"));
  spec.epochs = 1;
  spec.max_steps = 0;
  auto first = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->steps, 47);
  auto end = embedding::ReadManifest(Ckpt("end/ckpt-000000000047"));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->ranks.size(), 1u);
  EXPECT_EQ(end->ranks[0].epoch, 1);
  EXPECT_EQ(end->ranks[0].batches, 0);

  common::JobSpec wider = spec;
  wider.epochs = 2;
  wider.batch_size = 512;
  wider.checkpoint.dir = Ckpt("end-512");
  auto second = TrainInProcess(wider, Quiet(Ckpt("end")));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->train_samples, 12000) << "the second epoch, whole";
}

// The input position is counted in batches: a run resumed with another batch size skips the
// same samples in its own batches (10 of 256 = 5 of 512), and is refused naming both sizes when
// they do not divide (2,560 samples are not a whole number of batches of 384).
TEST_F(CheckpointTest, ResumingWithAnotherBatchSizeSkipsTheSameSamples) {
  common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt("bs"));
  spec.max_steps = 10;
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());

  common::JobSpec wider = spec;
  wider.batch_size = 384;
  wider.max_steps = 20;
  wider.checkpoint.dir = Ckpt("bs-384");
  auto r = TrainInProcess(wider, Quiet(Ckpt("bs")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("stopped 10 batch(es) of training.batch_size 256 (2560 samples) into its "
                        "epoch; this run's batch_size 384 does not divide those samples"));

  // 12,000 samples an epoch: 2,560 trained, 9,440 left, in 19 batches of 512 (the last of 224).
  wider.batch_size = 512;
  wider.max_steps = 0;
  wider.epochs = 1;
  wider.checkpoint.dir = Ckpt("bs-512");
  auto resumed = TrainInProcess(wider, Quiet(Ckpt("bs")));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->train_samples, 12000 - 2560);
}

}  // namespace
}  // namespace dlrm::worker
