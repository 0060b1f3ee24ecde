// TrainCheckpointer driven by hand on an in-process store (StoreRun), and the files it writes:
// row files and CRC32C against a reference, a first checkpoint on a pre-copy and later full ones
// from the kept snapshot give the files of a checkpoint taken afresh, byte for byte, and a rank
// the writer did not have resumes where the others do. `dlrm train`'s checkpoints as a user sees
// them (resume, damage, refusals, eval/predict) are in checkpoint_test.cc.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "dense/backend_factory.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/local_store.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/checkpoint.h"
#include "worker/checkpoint_internal.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

// A first checkpoint on a pre-copy (StartPreCopyIfNear: rows copied while training goes on,
// then only the rows changed since copied at the checkpoint) writes the files a checkpoint
// without one writes, byte for byte: steps push gradients while the pre-copy runs and after
// it, to rows it copied and to rows first touched after it listed them.
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

// A table of bf16 weights writes version-2 row files: 2 bytes a weight, the state in fp32, read
// back widened to the same floats; a forged format is refused by name.
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
