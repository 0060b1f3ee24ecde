// Checkpoints of `dlrm train` (worker/checkpoint.h over the format of
// embedding/checkpoint_manifest.h) as a user sees them: resume gives a bit-identical model,
// incremental chains load, damaged or unfinished checkpoints are refused or removed, eval/predict
// use the saved model. What a folder holds and who may use it is checkpoint_folder_test.cc's, the
// fixture checkpoint_fixture.h; the checkpointer driven by hand and the files it writes are in
// train_checkpointer_test.cc.
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
#include "tests/worker/checkpoint_fixture.h"
#include "tests/worker/test_util.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// 2N steps in one go, and N steps + checkpoint + resume + N steps: the same model, bit for bit.
// N = 60 lies in the second epoch, so the resumed run must also skip the right batches there.
// With checkpoints every 7 steps and a full one every 3, the resumed run loads a chain (full +
// incrementals) and continues the chain.
TEST_F(CheckpointTest, ResumedTrainingGivesTheBitIdenticalModel) {
  common::JobSpec straight = Job("straight", 80);
  TrainArtifacts reference;
  ASSERT_TRUE(TrainInProcess(straight, Quiet(), &reference).ok());

  common::JobSpec first = Job("split", 60, 7);
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
  common::JobSpec first = Job("chain", 14, 7);
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
  common::JobSpec spec = Job("c", 20, 10);
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
  common::JobSpec spec = Job("u", 10);
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
  common::JobSpec spec = Job("s", 5);
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
              HasSubstr("table 0 (C1) was trained with sum pooling; the job spec's is mean"));
  common::JobSpec one_table = spec;
  one_table.tables[3].pooling = "mean";
  one_table.checkpoint.dir = "";
  r = TrainInProcess(one_table, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 3 (C4) was trained with sum"));

  // Another sparse optimizer stores another number of floats per row: named as the optimizer, not
  // as a row size.
  common::JobSpec adagrad = spec;
  adagrad.sparse_optimizer.type = "adagrad";
  adagrad.checkpoint.dir = "";
  r = TrainInProcess(adagrad, Quiet(Ckpt("s")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("sparse optimizer rowwise_adagrad, the job spec's adagrad"));
}

TEST_F(CheckpointTest, IncrementalCheckpointsHoldOnlyTheChangedRows) {
  common::JobSpec spec = Job("i", 12, 6);
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
    common::JobSpec kept = Job(name, 20, 3);
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
    common::JobSpec load =
        Job("load-chain", 18);  // nothing left to train: the loaded state is the model
    ASSERT_TRUE(TrainInProcess(load, Quiet(Ckpt(name) + "/" + at18.name), &from_chain).ok());
    load.checkpoint.dir = Ckpt("load-fresh");
    ASSERT_TRUE(TrainInProcess(load, Quiet(fresh_at(18)), &from_fresh).ok());
    ExpectBitIdentical(from_fresh, from_chain);
  }
}

TEST_F(CheckpointTest, PredictScoresEqualEvalsOnTheSameRows) {
  common::JobSpec spec = Job("p", 30);
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

// A checkpoint loads from the directory given, however it is spelled: with a trailing slash, as
// "." from inside it, or renamed (next to the checkpoint it builds on).
TEST_F(CheckpointTest, ACheckpointLoadsFromTheDirectoryGivenHoweverItIsSpelled) {
  common::JobSpec spec = Job("spell", 10, 5);
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
  common::JobSpec spec = Job("bs", 10);
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
