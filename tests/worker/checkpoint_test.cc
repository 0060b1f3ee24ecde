// Checkpoints of `dlrm train` (worker/checkpoint.h over the format of
// embedding/checkpoint_manifest.h): resume gives a bit-identical model, incremental chains load,
// damaged or unfinished checkpoints are refused or removed, eval/predict use the saved model.
#include "worker/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "dense/backend_factory.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/checkpoint_internal.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// 12000 training samples: 47 steps per epoch.
common::JobSpec SmallJob(const std::string& train_path, const std::string& checkpoint_dir) {
  common::JobSpec spec = testing::SmallGeneratedJob(train_path, /*seed=*/5);
  spec.name = "ckpt-test";
  spec.checkpoint.dir = checkpoint_dir;
  return spec;
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
  EXPECT_TRUE(list->back().incremental) << "step 60 is the 2nd after the full one at 56";

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

TEST(CheckpointFilesTest, RowFileRoundTripsAndRejectsATruncatedFile) {
  testing::TempDir dir;
  const std::string path = dir.File("rows.bin");
  auto w = embedding::RowFileWriter::Create(path, 2, 3);
  ASSERT_TRUE(w.ok());
  const std::vector<int64_t> ids = {5, 9};
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE((*w)->Append(ids, rows.data()).ok());
  auto digest = (*w)->Close();
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->bytes,
            embedding::kRowFileHeaderBytes + 2 * (8 + 12) + embedding::kRowFileTrailerBytes);
  auto again = embedding::DigestFile(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->crc32c, digest->crc32c);
  // CRC32C check value of the standard test vector.
  EXPECT_EQ(embedding::Crc32c("123456789", 9), 0xe3069283u);
  std::vector<int64_t> got_ids;
  std::vector<float> got_rows;
  ASSERT_TRUE(embedding::ReadRowFile(path, 2, 3, [&](absl::Span<const int64_t> i, const float* r) {
                got_ids.insert(got_ids.end(), i.begin(), i.end());
                got_rows.insert(got_rows.end(), r, r + i.size() * 3);
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(got_ids, ids);
  EXPECT_EQ(got_rows, rows);
  auto wrong_table = embedding::ReadRowFile(
      path, 1, 3, [](absl::Span<const int64_t>, const float*) { return absl::OkStatus(); });
  EXPECT_EQ(wrong_table.code(), absl::StatusCode::kDataLoss);
  fs::resize_file(path, digest->bytes - 4);
  auto cut = embedding::ReadRowFile(
      path, 2, 3, [](absl::Span<const int64_t>, const float*) { return absl::OkStatus(); });
  EXPECT_EQ(cut.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(cut.message()), HasSubstr("rows.bin"));
  EXPECT_EQ(embedding::VerifyFile(path, *digest).code(), absl::StatusCode::kDataLoss);
}

// A table of bf16 weights writes version-2 row files: 2 bytes a weight, the state in fp32, read
// back widened to the same floats; a forged format is refused by name.
// CRC32C one bit at a time (reflected polynomial 0x82F63B78): the slow reference for the
// library's kernel.
uint32_t BitwiseCrc32c(const unsigned char* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(CheckpointFilesTest, Crc32cEqualsABitwiseReferenceAtEveryLengthAndAlignment) {
  std::mt19937 rng(11);
  std::vector<unsigned char> bytes(9 << 20);  // more than two of the writer's 4 MiB buffers
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
  // Every length up to 300 (the kernels' tails and their 8-, 64- and 256-byte blocks), at each
  // of 8 start offsets.
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n <= 300; ++n) {
      ASSERT_EQ(embedding::Crc32c(bytes.data() + offset, n),
                BitwiseCrc32c(bytes.data() + offset, n))
          << "offset " << offset << ", length " << n;
    }
  }
  // A file written in appends of odd sizes, across the writer's buffer flushes, and read back.
  const uint32_t whole = BitwiseCrc32c(bytes.data(), bytes.size());
  EXPECT_EQ(embedding::Crc32c(bytes.data(), bytes.size()), whole);
  testing::TempDir dir;
  const std::string path = dir.File("bytes.bin");
  auto w = embedding::ChecksummedWriter::Create(path);
  ASSERT_TRUE(w.ok());
  for (size_t done = 0, step = 1; done < bytes.size(); step = step * 3 % 1000003 + 1) {
    const size_t take = std::min(step, bytes.size() - done);
    ASSERT_TRUE((*w)->Append(bytes.data() + done, take).ok());
    done += take;
  }
  auto written = (*w)->Close();
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(written->crc32c, whole);
  auto read = embedding::DigestFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->crc32c, whole);
}

// A first checkpoint on a pre-copy (StartPreCopyIfNear: rows copied while training goes on,
// then only the rows changed since copied at the checkpoint) writes the files a checkpoint
// without one writes, byte for byte: steps push gradients while the pre-copy runs and after
// it, to rows it copied and to rows first touched after it listed them.
// A trainer on an in-process store with a TrainCheckpointer of its own (its folder `name` in
// `dir`), for the tests that drive checkpoints by hand; tables of at least 30,000 rows.
struct StoreRun {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<TrainCheckpointer> checkpointer;
};
StoreRun MakeStoreRun(testing::TempDir& dir, const std::string& name, int64_t every_steps,
                      int full_every = 1) {
  common::JobSpec spec = testing::SmallGeneratedJob(dir.File("unused.tsv"), /*seed=*/5);
  for (auto& t : spec.tables) t.rows = std::max<int64_t>(t.rows, 30000);
  spec.checkpoint.dir = dir.File(name);
  spec.checkpoint.every_steps = every_steps;
  spec.checkpoint.full_every = full_every;
  StoreRun run;
  dense::BackendOptions backend_options;
  backend_options.kind = dense::BackendOptions::Kind::kCpu;
  run.backend = *dense::CreateBackend(backend_options);
  embedding::LocalStoreOptions store_options;
  store_options.tables = TableConfigsFromSpec(spec);
  store_options.seed = 1;
  store_options.optimizer = *SparseOptimizerFromSpec(spec);
  run.store = *embedding::LocalEmbeddingStore::Create(store_options);
  TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = run.backend.get();
  trainer_options.store = run.store.get();
  run.trainer = *Trainer::Create(trainer_options);
  run.checkpointer = *TrainCheckpointer::Create(spec);
  return run;
}

// A gradient of step s for `count` distinct ids of table t, drawn from its first `span` rows.
embedding::TableRows StepGradient(const embedding::EmbeddingTable& table, int t, int64_t s,
                                  int64_t count, int64_t span) {
  std::mt19937_64 rng(static_cast<uint64_t>(s * 31 + t));
  span = std::min<int64_t>(table.rows(), span);
  std::set<int64_t> ids;
  while (static_cast<int64_t>(ids.size()) < std::min<int64_t>(count, span)) {
    ids.insert(static_cast<int64_t>(rng() % span));
  }
  embedding::TableRows g;
  g.table = t;
  g.ids.assign(ids.begin(), ids.end());
  for (size_t i = 0; i < g.ids.size() * table.dim(); ++i) {
    g.values.push_back(0.001f * static_cast<float>((i * 7 + s) % 13) - 0.006f);
  }
  return g;
}

// The row and dense files of the only checkpoint in each of two folders are byte-identical.
void ExpectSameCheckpointFiles(const std::string& folder_a, const std::string& folder_b) {
  auto only = [](const std::string& folder) {
    auto list = embedding::ListCheckpoints(folder);
    EXPECT_TRUE(list.ok() && list->size() == 1u) << folder;
    return folder + "/" + list->back().name;
  };
  const std::string a = only(folder_a), b = only(folder_b);
  auto manifest = embedding::ReadManifest(b);
  ASSERT_TRUE(manifest.ok());
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const auto& f : manifest->files) {
    EXPECT_TRUE(slurp(a + "/" + f.name) == slurp(b + "/" + f.name))
        << f.name << " of " << a << " differs from " << b;
  }
}

// With `checkpoint_at_once`, the checkpoint comes right after the pre-copy starts (one step
// later), so that it copies the rest of the pre-copy from the other end while the pre-copy's
// thread still copies.
void ExpectACheckpointOnAPreCopyEqualsOneTakenWithout(bool checkpoint_at_once) {
  testing::TempDir dir;
  using Run = StoreRun;
  auto make = [&](const std::string& name, int64_t every_steps) {
    return MakeStoreRun(dir, name, every_steps);
  };
  // Step s: a gradient for 600 ids of each table, drawn from the first (s + 1) * 300 rows, so
  // that each step also touches rows no step touched before.
  auto push = [](Run& run, int64_t s) {
    std::vector<embedding::TableRows> grads;
    for (int t = 0; t < static_cast<int>(run.store->tables().size()); ++t) {
      grads.push_back(StepGradient(run.store->table(t), t, s, 600, (s + 1) * 300));
    }
    ASSERT_TRUE(run.store->Push(s, grads).ok());
  };
  Run pre = make("pre", /*every_steps=*/10), plain = make("plain", /*every_steps=*/0);
  pre.checkpointer->PrepareSnapshotMemory(*pre.store);
  for (int64_t s = 1; s <= 9; ++s) {
    push(pre, s);
    push(plain, s);
    if (checkpoint_at_once) continue;
    // Steps of at least 20 ms (checkpoints at least 200 ms apart, more than twice the pre-copy's
    // estimate for these tables): the pre-copy starts once, one or two steps before step 10,
    // and runs while the next step pushes.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pre.checkpointer->StartPreCopyIfNear(*pre.trainer, *pre.store, s);
  }
  std::thread reader;
  if (checkpoint_at_once) {
    // Table 0 is read for 300 ms, so the pre-copy's thread waits for its lock at its first chunk
    // while the checkpoint copies every other chunk. Its first call (no pace yet) starts it at
    // the last step before the checkpoint.
    absl::Notification reading;
    reader = std::thread([&] {
      pre.store->ReadTable(0, [&](const embedding::EmbeddingTable&) {
        reading.Notify();
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      });
    });
    reading.WaitForNotification();
    pre.checkpointer->StartPreCopyIfNear(*pre.trainer, *pre.store, 9);
  }
  ASSERT_TRUE(pre.checkpointer->Write(*pre.trainer, *pre.store, {.step = 10}).ok());
  if (reader.joinable()) reader.join();
  ASSERT_TRUE(plain.checkpointer->Write(*plain.trainer, *plain.store, {.step = 10}).ok());
  EXPECT_GT(pre.checkpointer->precopy_seconds(), 0) << "no pre-copy was taken";
  if (checkpoint_at_once) {
    EXPECT_GT(pre.checkpointer->precopy_chunks_helped(), 0u) << "the checkpoint did not help";
  }
  ExpectSameCheckpointFiles(dir.File("pre"), dir.File("plain"));
}

TEST(CheckpointPreCopyTest, AFirstCheckpointOnAPreCopyEqualsOneTakenWithout) {
  ExpectACheckpointOnAPreCopyEqualsOneTakenWithout(/*checkpoint_at_once=*/false);
}

TEST(CheckpointPreCopyTest, ACheckpointThatHelpsItsPreCopyFinishEqualsOneTakenWithout) {
  ExpectACheckpointOnAPreCopyEqualsOneTakenWithout(/*checkpoint_at_once=*/true);
}

// A later full checkpoint copies the rows changed since the last one: side by side when they are
// few (merged with the kept snapshot's as it writes), over their old values when they are many
// (more than an eighth of a table), and rows never changed before go in either way. Both give the
// files of a checkpoint taken afresh.
TEST(CheckpointSnapshotTest, LaterFullCheckpointsEqualOnesTakenAfresh) {
  testing::TempDir dir;
  StoreRun run = MakeStoreRun(dir, "kept", /*every_steps=*/0, /*full_every=*/1);
  auto push = [&](int64_t s, int64_t few, int64_t many) {
    std::vector<embedding::TableRows> grads;
    for (int t = 0; t < static_cast<int>(run.store->tables().size()); ++t) {
      const embedding::EmbeddingTable& table = run.store->table(t);
      // Even tables: a few rows, about half of them new; odd ones: most of the rows touched so
      // far and a few hundred new ones.
      grads.push_back(t % 2 == 0 ? StepGradient(table, t, s, few, 4000 + (s - 1) * 4000)
                                 : StepGradient(table, t, s, many, 4000 + (s - 1) * 300));
    }
    ASSERT_TRUE(run.store->Push(s, grads).ok());
  };
  push(1, 3000, 3000);
  ASSERT_TRUE(run.checkpointer->Write(*run.trainer, *run.store, {.step = 1}).ok());
  for (int64_t s = 2; s <= 3; ++s) {
    SCOPED_TRACE(s);
    push(s, 40, 3000);
    ASSERT_TRUE(run.checkpointer->Write(*run.trainer, *run.store, {.step = s}).ok());
    // Afresh: a checkpointer of its own, whose first checkpoint copies every touched row.
    common::JobSpec spec = run.trainer->spec();
    spec.checkpoint.dir = dir.File(absl::StrCat("fresh", s));
    auto fresh = TrainCheckpointer::Create(spec);
    ASSERT_TRUE(fresh.ok());
    ASSERT_TRUE((*fresh)->Write(*run.trainer, *run.store, {.step = s}).ok());
    const std::string kept = dir.File(absl::StrCat("kept-at", s));
    std::filesystem::create_directories(kept);
    auto list = embedding::ListCheckpoints(dir.File("kept"));
    ASSERT_TRUE(list.ok());
    std::filesystem::copy(dir.File("kept") + "/" + list->back().name,
                          kept + "/" + list->back().name);
    ExpectSameCheckpointFiles(kept, spec.checkpoint.dir);
  }
}

// Close in two halves (what a writer of many files does): the same file and digest as Close;
// nothing may be appended after Finish, and Sync needs Finish first.
TEST(CheckpointFilesTest, FinishThenSyncWritesWhatCloseWrites) {
  testing::TempDir dir;
  const std::vector<int64_t> ids = {4, 8, 15};
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};
  auto closed = embedding::RowFileWriter::Create(dir.File("closed.bin"), 1, 2);
  auto halves = embedding::RowFileWriter::Create(dir.File("halves.bin"), 1, 2);
  ASSERT_TRUE(closed.ok() && halves.ok());
  ASSERT_TRUE((*closed)->Append(absl::MakeSpan(ids).subspan(0, 3), rows.data()).ok());
  ASSERT_TRUE((*halves)->Append(absl::MakeSpan(ids).subspan(0, 3), rows.data()).ok());
  auto a = (*closed)->Close();
  EXPECT_THAT((*halves)->Sync().message(), HasSubstr("Sync before Finish"));
  auto b = (*halves)->Finish();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->bytes, a->bytes);
  EXPECT_EQ(b->crc32c, a->crc32c);
  EXPECT_THAT((*halves)->AppendRow(16, rows.data()).message(), HasSubstr("already closed"));
  ASSERT_TRUE((*halves)->Sync().ok());
  EXPECT_THAT((*halves)->Sync().message(), HasSubstr("already closed"));
  auto on_disk = embedding::DigestFile(dir.File("halves.bin"));
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(on_disk->bytes, a->bytes);
  EXPECT_EQ(on_disk->crc32c, a->crc32c);
}

// SeekSorted against std::lower_bound, on the shapes a snapshot's ids take: every row, evenly
// spread, bunched at the ends (where the guess is far off) and a few.
TEST(CheckpointSnapshotTest, SeekSortedFindsWhatLowerBoundFinds) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> dense(5000);
  for (int64_t i = 0; i < 5000; ++i) dense[i] = i + 3;
  shapes.push_back(dense);
  std::vector<int64_t> spread, bunched;
  for (int64_t i = 0; i < 200000; ++i) {
    if (rng() % 37 == 0) spread.push_back(i);
  }
  for (int64_t i = 0; i < 3000; ++i) bunched.push_back(i);  // a dense run at the start,
  for (int64_t i = 0; i < 40; ++i) bunched.push_back(1000000 + i * 9973);        // a sparse middle,
  for (int64_t i = 0; i < 3000; ++i) bunched.push_back((int64_t{1} << 40) + i);  // a far run
  shapes.push_back(spread);
  shapes.push_back(bunched);
  shapes.push_back({7});
  shapes.push_back({2, 9});
  shapes.push_back({});
  for (const std::vector<int64_t>& sorted : shapes) {
    std::vector<int64_t> probes = {-1, 0, std::numeric_limits<int64_t>::max()};
    for (int64_t id : sorted) {
      probes.push_back(id - 1);
      probes.push_back(id);
      probes.push_back(id + 1);
    }
    for (int k = 0; k < 2000; ++k) {
      probes.push_back(static_cast<int64_t>(rng() % ((int64_t{1} << 40) + 4000)));
    }
    for (int64_t id : probes) {
      const size_t want = std::lower_bound(sorted.begin(), sorted.end(), id) - sorted.begin();
      // From the start, and from every `from` a caller may pass: the answer or before it.
      for (size_t from : {size_t{0}, want / 2, want}) {
        ASSERT_EQ(checkpoint_internal::SeekSorted(sorted, from, id), want)
            << "id " << id << " from " << from << " in " << sorted.size() << " ids";
      }
    }
  }
}

TEST(CheckpointFilesTest, HalfPrecisionRowFilesKeepHalfTheWeightBytes) {
  testing::TempDir dir;
  const std::string path = dir.File("half.bin");
  const embedding::RowCodec codec{embedding::RowDtype::kBf16, 5, 1};
  auto w = embedding::RowFileWriter::Create(path, 4, codec);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<int64_t> ids = {3, 1, 8};
  // Weights bf16 holds exactly; the state (last of each row) any float.
  const std::vector<float> rows = {0.5f,  -1.25f, 2, 0.0078125f, -3, 0.333333f,
                                   1,     2,      3, 4,          5,  1e-7f,
                                   -0.5f, 0,      0, 0,          8,  12345.678f};
  ASSERT_TRUE((*w)->Append(ids, rows.data()).ok());
  auto digest = (*w)->Close();
  ASSERT_TRUE(digest.ok());
  // Per row: the id, 5 weights x 2 bytes padded to 12, the state's 4 (24 bytes in fp32).
  EXPECT_EQ(digest->bytes,
            embedding::kRowFileHeaderBytes + 3 * (8 + 12 + 4) + embedding::kRowFileTrailerBytes);
  std::vector<int64_t> got_ids;
  std::vector<float> got_rows;
  ASSERT_TRUE(embedding::ReadRowFile(path, 4, 6, [&](absl::Span<const int64_t> i, const float* r) {
                got_ids.insert(got_ids.end(), i.begin(), i.end());
                got_rows.insert(got_rows.end(), r, r + i.size() * 6);
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(got_ids, ids);
  EXPECT_EQ(got_rows, rows);
  // A format word naming no half dtype.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[20] = 7;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto forged = embedding::ReadRowFile(
      path, 4, 6, [](absl::Span<const int64_t>, const float*) { return absl::OkStatus(); });
  EXPECT_EQ(forged.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(forged.message()), HasSubstr("half-precision row format"));
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
  ASSERT_TRUE(TrainInProcess(load, Quiet(canonical), &reference).ok());
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

// A job resumed on more workers than wrote the checkpoint: a rank the writer did not have
// starts at the same epoch and batch as the others (each skips that many batches of its shard).
TEST(CheckpointRanksTest, ARankTheWriterDidNotHaveStartsWhereTheOthersDo) {
  testing::TempDir dir;
  StoreRun run = MakeStoreRun(dir, "ranks", /*every_steps=*/0);
  auto written = run.checkpointer->Write(*run.trainer, *run.store,
                                         {.step = 60, .samples = 15360, .epoch = 1, .batches = 13});
  ASSERT_TRUE(written.ok()) << written.status();
  run.checkpointer.reset();
  common::JobSpec spec = run.trainer->spec();
  spec.batch_size /= 2;  // the same global batch over two workers
  TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = run.backend.get();
  trainer_options.store = run.store.get();
  auto trainer = Trainer::Create(trainer_options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto restored = RestoreCheckpoint(written->dir, {.rank = 1, .world_size = 2, .load_rows = false},
                                    trainer->get(), run.store.get());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->position.step, 60);
  EXPECT_EQ(restored->position.epoch, 1);
  EXPECT_EQ(restored->position.batches, 13);
  EXPECT_EQ(restored->position.samples, 15360 / 2);
}

}  // namespace
}  // namespace dlrm::worker
