// Checkpoint write speed (docs/BENCHMARKS.md "Checkpoints"), every figure a ratio within one run:
//
//   full_vs_sequential_write  a full checkpoint of kaggle-shape tables (capped at --max-rows,
//                             every row changed, so every row is written) against writing the
//                             same number of bytes with write() in 4 MiB blocks, each block's
//                             write-back started at once (sync_file_range), and a final fsync
//                             (dd-like), timed in the same run just before the checkpoint and
//                             just after it: the faster time(dd) / time(checkpoint).
//   incremental_vs_full       after steps that changed --touched-fraction of the rows: the
//                             incremental checkpoint's time and bytes over the full one's.
//   stall_vs_full_write       how long `dlrm train` waits per full checkpoint (the in-memory
//                             snapshot TrainCheckpointer::Start takes) over the whole full write
//                             (snapshot to committed manifest), for a later full checkpoint after
//                             --touched-fraction of the rows changed since the one before (a later
//                             snapshot copies only the rows changed since the last, into the
//                             memory it keeps); all_changed_stall_vs_full_write: the same after
//                             every row changed (the most a later one copies);
//                             first_stall_vs_full_write: the first one's, which copies every row
//                             into the memory PrepareSnapshotMemory readied while training went on
//                             (prepare_seconds, off the training path), as `dlrm train` does for a
//                             job with periodic checkpoints; unprepared_first_stall_vs_full_write:
//                             a first one into fresh memory (a job without them), taken before.
//                             last_stall_vs_full_write: the checkpoint at the end of a run,
//                             written from the tables themselves (no copy).
//                             precopy_first_stall_vs_full_write: a first one of a job with
//                             every_steps, on a pre-copy taken two steps before it (no pace yet)
//                             (precopy_seconds, off the training path), with --touched-fraction
//                             of the rows changed between the two, right after the changes;
//                             precopy_done_*: the same once the pre-copy has ended.
//
//   ps_cut_vs_write           a parameter server's part of a cluster checkpoint, on the same
//                             tables in one TieredStore (every row changed and held in its memory
//                             tier, as on a server whose budget holds its shard): the cut
//                             (TieredStore::TakeSnapshot, every table locked: what training
//                             waits for) over the write of the row files from that snapshot
//                             (WriteRowFilesFromSnapshot, while training goes on). The cluster's
//                             cut adds its barriers, the dense copy and the hot rows. This first
//                             cut copies into memory TieredStore::PrepareSnapshot readied before
//                             (as a server does for a job with periodic checkpoints; its time is
//                             ps_prepare_seconds, off the training path);
//                             ps_unprepared_cut_vs_write: the same cut into fresh memory (a job
//                             without them), taken before. ps_incremental_vs_full_time/_bytes: the
//                             incremental write after 1 % of the rows changed over the full one.
//                             ps_later_cut_vs_full_write: the second cut (before the incremental
//                             write; it reuses the first one's buffers and copies only the rows
//                             changed since, as a server's later checkpoints do) over the full
//                             write. ps_flush_cut_seconds: the cut of the other code path
//                             (CreateCheckpoint: every resident row written to RocksDB under the
//                             locks, as servers cut before TakeSnapshot), taken last.
//
//   crc32c_gb_per_s           the CRC32C that checksums every checkpoint file (ISA-L) over 256
//                             MiB, against RocksDB's (rocksdb_crc32c_gb_per_s: the library used
//                             before, built by Debian for baseline x86-64); best of 3 each.
//
//   build/bin/checkpoint_bench --dir /tmp/ckbench [--max-rows 1000000] [--touched-fraction 0.01]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/allocator.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/checkpoint_snapshot.h"
#include "embedding/tiered_store.h"
#include "nlohmann/json.hpp"
#include "rocksdb/file_checksum.h"
#include "worker/checkpoint.h"
#include "worker/input/synthetic.h"
#include "worker/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Writes `bytes` to `path` in 4 MiB write() calls and fsyncs: the sequential-write baseline.
double SequentialWrite(const std::string& path, int64_t bytes) {
  std::vector<char> block(4 << 20, 'x');
  const auto start = Clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  // Each block's write-back started as soon as it is written (as the checkpoint writer starts
  // each file's), so that the disk works while the next block is copied: the most this machine
  // writes, not a page cache filled first and flushed by the final fsync.
  for (int64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(bytes - done, block.size()));
    if (write(fd, block.data(), n) != static_cast<ssize_t>(n)) return -1;
    (void)sync_file_range(fd, done, static_cast<off_t>(n), SYNC_FILE_RANGE_WRITE);
    done += static_cast<int64_t>(n);
  }
  fsync(fd);
  close(fd);
  return Since(start);
}

// GB/s of embedding::Crc32c and of RocksDB's CRC32C over the same 256 MiB, best of 3 each.
nlohmann::json CrcThroughput() {
  std::vector<char> bytes(256 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + (i >> 13));
  double ours = 1e9, theirs = 1e9;
  uint32_t a = 0, b = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    a = dlrm::embedding::Crc32c(bytes.data(), bytes.size());
    ours = std::min(ours, Since(start));
    start = Clock::now();
    auto gen = rocksdb::GetFileChecksumGenCrc32cFactory()->CreateFileChecksumGenerator(
        rocksdb::FileChecksumGenContext{});
    gen->Update(bytes.data(), bytes.size());
    gen->Finalize();
    theirs = std::min(theirs, Since(start));
    b = 0;
    for (unsigned char c : gen->GetChecksum()) b = (b << 8) | c;
  }
  if (a != b) std::fprintf(stderr, "CRC32C differs: %08x against RocksDB's %08x\n", a, b);
  const double gb = static_cast<double>(bytes.size()) / 1e9;
  return {{"crc32c_gb_per_s", gb / ours},
          {"rocksdb_crc32c_gb_per_s", gb / theirs},
          {"crc32c_equal", a == b}};
}

// The parameter-server figures (ps_* keys): a full cut and write of every table of `spec`, then
// an incremental one after `touched_fraction` of the rows changed.
nlohmann::json PsCheckpoint(const dlrm::common::JobSpec& spec, const std::string& dir,
                            double touched_fraction) {
  using namespace dlrm;
  embedding::TieredStoreOptions options;
  options.tables = worker::TableConfigsFromSpec(spec);
  options.optimizer = *worker::SparseOptimizerFromSpec(spec);
  options.seed = 1;
  options.memory_budget_bytes = int64_t{4} << 30;  // the whole shard resident
  options.rocksdb.path = dir + "/ps-db";
  options.rocksdb.disable_wal = true;
  auto store = embedding::TieredStore::Create(options);
  if (!store.ok()) return {{"ps_error", std::string(store.status().message())}};
  std::vector<embedding::RowCodec> codecs;
  std::mt19937_64 rng(11);
  std::vector<std::vector<int64_t>> sample(spec.tables.size());
  for (int t = 0; t < static_cast<int>(spec.tables.size()); ++t) {
    codecs.push_back((*store)->codec(t));
    const int64_t rows = spec.tables[t].rows;
    constexpr int64_t kChunk = 65536;
    std::vector<int64_t> ids;
    std::vector<float> grads(kChunk * spec.embedding_dim, 0.01f);
    for (int64_t begin = 0; begin < rows; begin += kChunk) {
      ids.clear();
      for (int64_t i = begin; i < std::min(rows, begin + kChunk); ++i) ids.push_back(i);
      if (!(*store)->ApplyGradients(t, ids, grads.data()).ok()) return {{"ps_error", "update"}};
    }
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(rows * touched_fraction));
    std::vector<int64_t> all(rows);
    for (int64_t i = 0; i < rows; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    sample[t].assign(all.begin(), all.begin() + n);
  }
  // One object for both cuts: the second reuses the first one's buffers, as a server does.
  embedding::StoreSnapshot snapshot;
  auto checkpoint = [&](const std::string& name, bool incremental, double* cut, double* write,
                        int64_t* bytes) -> absl::Status {
    std::vector<std::vector<int64_t>> changed;
    auto start = Clock::now();
    DLRM_RETURN_IF_ERROR((*store)->TakeSnapshot(dir + "/snap-" + name, &snapshot, &changed));
    *cut = Since(start);
    const std::string out = dir + "/ps-" + name;
    fs::create_directories(out);
    start = Clock::now();
    DLRM_ASSIGN_OR_RETURN(auto files,
                          embedding::WriteRowFilesFromSnapshot(snapshot, codecs, out, 0,
                                                               incremental ? &changed : nullptr));
    *write = Since(start);
    *bytes = 0;
    for (const auto& f : files) *bytes += f.bytes;
    fs::remove_all(dir + "/snap-" + name);
    return absl::OkStatus();
  };
  // The first cut into fresh memory (changes not taken, so the cuts below are as without it).
  double unprepared_cut = 0;
  {
    embedding::StoreSnapshot fresh;
    const auto start = Clock::now();
    const absl::Status cut = (*store)->TakeSnapshot(dir + "/snap-fresh", &fresh);
    unprepared_cut = Since(start);
    if (!cut.ok()) return {{"ps_error", std::string(cut.message())}};
    fs::remove_all(dir + "/snap-fresh");
  }
  auto prepare_start = Clock::now();
  absl::Status status = (*store)->PrepareSnapshot(&snapshot);
  const double prepare = Since(prepare_start);
  double full_cut = 0, full_write = 0, inc_cut = 0, inc_write = 0;
  int64_t full_bytes = 0, inc_bytes = 0;
  if (status.ok()) status = checkpoint("full", false, &full_cut, &full_write, &full_bytes);
  for (int t = 0; status.ok() && t < static_cast<int>(spec.tables.size()); ++t) {
    std::vector<float> grads(sample[t].size() * spec.embedding_dim, 0.01f);
    status = (*store)->ApplyGradients(t, sample[t], grads.data());
  }
  if (status.ok()) status = checkpoint("inc", true, &inc_cut, &inc_write, &inc_bytes);
  // The other code path, last since it changes what RocksDB holds: the cut as it was before
  // TakeSnapshot, every resident row written to RocksDB under the locks (CreateCheckpoint).
  double flush_cut = 0;
  if (status.ok()) {
    const auto start = Clock::now();
    status = (*store)->CreateCheckpoint(dir + "/snap-flush");
    flush_cut = Since(start);
  }
  if (!status.ok()) return {{"ps_error", std::string(status.message())}};
  return {{"ps_resident_rows", (*store)->stats().memory_rows},
          {"ps_full_bytes", full_bytes},
          {"ps_full_cut_seconds", full_cut},
          {"ps_full_write_seconds", full_write},
          {"ps_cut_vs_write", full_cut / full_write},
          {"ps_prepare_seconds", prepare},
          {"ps_unprepared_cut_seconds", unprepared_cut},
          {"ps_unprepared_cut_vs_write", unprepared_cut / full_write},
          {"ps_later_cut_vs_full_write", inc_cut / full_write},
          {"ps_incremental_bytes", inc_bytes},
          {"ps_incremental_cut_seconds", inc_cut},
          {"ps_incremental_write_seconds", inc_write},
          {"ps_incremental_vs_full_time", inc_write / full_write},
          {"ps_incremental_vs_full_bytes", static_cast<double>(inc_bytes) / full_bytes},
          {"ps_flush_cut_seconds", flush_cut},
          {"ps_flush_cut_over_later_cut", flush_cut / inc_cut}};
}

}  // namespace

int main(int argc, char** argv) {
  dlrm::common::ConfigureAllocatorForLargeBuffers();  // as the dlrm processes
  CLI::App app{"checkpoint write speed against a sequential write of the same bytes"};
  std::string dir = "/tmp/dlrm-checkpoint-bench";
  int64_t max_rows = 1000000;
  double touched_fraction = 0.01;
  app.add_option("--dir", dir, "Scratch folder (removed at the end)");
  app.add_option("--max-rows", max_rows, "Cap on each kaggle-shape table");
  app.add_option("--touched-fraction", touched_fraction, "Rows changed before the incremental");
  CLI11_PARSE(app, argc, argv);
  using namespace dlrm;

  common::JobSpec spec;
  spec.name = "checkpoint-bench";
  spec.embedding_dim = 16;
  spec.bottom_mlp = {64, 16};
  spec.top_mlp = {64, 1};
  for (int64_t rows : worker::CappedKaggleCardinalities(max_rows)) {
    spec.tables.push_back({.name = absl::StrCat("C", spec.tables.size() + 1), .rows = rows});
  }
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.001};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  spec.batch_size = 16;
  spec.checkpoint.dir = dir + "/ckpt";
  spec.checkpoint.full_every = 2;
  spec.checkpoint.keep_last = 10;
  fs::remove_all(dir);
  fs::create_directories(dir);

  dense::BackendOptions backend_options;
  backend_options.kind = dense::BackendOptions::Kind::kCpu;
  auto backend = dense::CreateBackend(backend_options);
  embedding::LocalStoreOptions store_options;
  store_options.tables = worker::TableConfigsFromSpec(spec);
  store_options.seed = 1;
  store_options.optimizer = *worker::SparseOptimizerFromSpec(spec);
  auto store = embedding::LocalEmbeddingStore::Create(store_options);
  if (!backend.ok() || !store.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  worker::TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = backend->get();
  trainer_options.store = store->get();
  auto trainer = worker::Trainer::Create(trainer_options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }

  // Every row changed (a gradient step on each), so a full checkpoint writes every row.
  int64_t total_rows = 0;
  auto change_all = [&](int64_t step) {
    total_rows = 0;
    for (int t = 0; t < static_cast<int>(spec.tables.size()); ++t) {
      embedding::TableRows g;
      g.table = t;
      g.ids.resize(spec.tables[t].rows);
      for (int64_t i = 0; i < spec.tables[t].rows; ++i) g.ids[i] = i;
      g.values.assign(g.ids.size() * spec.embedding_dim, 0.01f);
      if (!(*store)->Push(step, {&g, 1}).ok()) return false;
      total_rows += spec.tables[t].rows;
    }
    return true;
  };
  if (!change_all(0)) return 1;
  // Steps that changed a fraction of the rows (drawn uniformly per table), or every row.
  std::mt19937_64 rng(7);
  auto change = [&](double fraction, int64_t step) -> int64_t {
    int64_t changed = 0;
    for (int t = 0; t < static_cast<int>(spec.tables.size()); ++t) {
      embedding::TableRows g;
      g.table = t;
      const int64_t rows = spec.tables[t].rows;
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(rows * fraction));
      std::vector<int64_t> ids(rows);
      for (int64_t i = 0; i < rows; ++i) ids[i] = i;
      std::shuffle(ids.begin(), ids.end(), rng);  // pushed in no order, as training's are
      g.ids.assign(ids.begin(), ids.begin() + n);
      g.values.assign(g.ids.size() * spec.embedding_dim, 0.01f);
      if (!(*store)->Push(step, {&g, 1}).ok()) return -1;
      changed += n;
    }
    return changed;
  };
  // A checkpoint at `step` by a checkpointer of its own in folder `name` (removed after), with
  // `every_steps`; `before` runs between the checkpointer's creation and its Start (changes, a
  // pre-copy) and says whether to go on.
  struct OwnCheckpoint {
    double stall = 0, seconds = 0, precopy_seconds = 0;
    int64_t bytes = 0;
  };
  auto own_checkpoint = [&](const std::string& name, int64_t every_steps, int64_t step, bool last,
                            const std::function<bool(worker::TrainCheckpointer&)>& before)
      -> std::optional<OwnCheckpoint> {
    common::JobSpec other = spec;
    other.checkpoint.dir = dir + "/" + name;
    other.checkpoint.every_steps = every_steps;
    auto c = worker::TrainCheckpointer::Create(other);
    if (!c.ok() || (before && !before(**c))) return std::nullopt;
    auto s = (*c)->Start(**trainer, **store, {.step = step}, last);
    auto w = s.ok() ? (*c)->Finish() : s.status();
    if (!w.ok()) {
      std::fprintf(stderr, "%s checkpoint: %s\n", name.c_str(),
                   std::string(w.status().message()).c_str());
      return std::nullopt;
    }
    OwnCheckpoint out{.stall = *s,
                      .seconds = w->seconds,
                      .precopy_seconds = (*c)->precopy_seconds(),
                      .bytes = w->manifest.total_bytes()};
    c->reset();
    fs::remove_all(other.checkpoint.dir);
    return out;
  };
  // The first full checkpoint into fresh memory (a job without periodic checkpoints).
  const std::optional<OwnCheckpoint> unprepared =
      own_checkpoint("unprepared", 0, 1, /*last=*/false, nullptr);
  // The checkpoint at the end of a run (`last`: written from the tables themselves, no copy).
  const std::optional<OwnCheckpoint> last = own_checkpoint(
      "last", 0, 1, /*last=*/true, [&](worker::TrainCheckpointer&) { return change_all(2); });
  if (!unprepared || !last) return 1;
  // The baseline, written just before the full checkpoint and again just after it: this VM's
  // disk takes a burst of writes faster than the writes that follow it (sequential_write_before
  // and _after_seconds differ up to fivefold), so the faster of the two is the one to beat.
  const double dd_before = SequentialWrite(dir + "/sequential.bin", unprepared->bytes);
  fs::remove(dir + "/sequential.bin");
  // A job with every_steps: its first checkpoint on a pre-copy (StartPreCopyIfNear, two steps
  // before it, copies every changed row while training goes on), then --touched-fraction of the
  // rows changed by the steps after it, then the checkpoint: its stall copies only those, after
  // waiting for what is left of the pre-copy. Twice: with the checkpoint right after the
  // changes (the pre-copy, slowed by them, may still run: precopy_*), and once the pre-copy
  // has ended (as when its steps took longer than it: precopy_done_*).
  std::optional<OwnCheckpoint> precopied[2];
  for (int done = 0; done < 2; ++done) {
    precopied[done] =
        own_checkpoint("precopy", 10, 10, /*last=*/false, [&](worker::TrainCheckpointer& c) {
          c.PrepareSnapshotMemory(**store);
          c.StartPreCopyIfNear(**trainer, **store, /*step=*/8);
          if (change(touched_fraction, 9) < 0) return false;
          while (done == 1 && c.precopy_seconds() <= 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          return true;
        });
    if (!precopied[done] || precopied[done]->precopy_seconds <= 0) {
      std::fprintf(stderr, "pre-copied checkpoint: failed or no pre-copy\n");
      return 1;
    }
  }
  // Then a job with periodic checkpoints: its checkpointer readies the snapshot's memory while
  // training goes on (here: every row changed again), and the first full checkpoint copies into
  // it. Start returns once the snapshot is taken (what training waits for); Finish once the files
  // are written and the manifest committed.
  auto checkpointer = worker::TrainCheckpointer::Create(spec);
  if (!checkpointer.ok()) return 1;
  (*checkpointer)->PrepareSnapshotMemory(**store);
  if (!change_all(1)) return 1;
  auto stall = (*checkpointer)->Start(**trainer, **store, {.step = 1});
  if (!stall.ok()) {
    std::fprintf(stderr, "full checkpoint: %s\n", std::string(stall.status().message()).c_str());
    return 1;
  }
  auto full = (*checkpointer)->Finish();
  if (!full.ok()) {
    std::fprintf(stderr, "full checkpoint: %s\n", std::string(full.status().message()).c_str());
    return 1;
  }
  const int64_t full_bytes = full->manifest.total_bytes();
  const double dd_after = SequentialWrite(dir + "/sequential.bin", full_bytes);
  fs::remove(dir + "/sequential.bin");
  const double dd_seconds = std::min(dd_before, dd_after);

  const int64_t touched = change(touched_fraction, 1);
  if (touched < 0) return 1;
  auto inc = (*checkpointer)->Write(**trainer, **store, {.step = 2});
  if (!inc.ok() || !inc->manifest.incremental) {
    std::fprintf(stderr, "incremental checkpoint failed\n");
    return 1;
  }
  // A second full checkpoint (full_every 2), after as many rows changed again.
  if (change(touched_fraction, 2) < 0) return 1;
  auto warm_stall = (*checkpointer)->Start(**trainer, **store, {.step = 3});
  if (!warm_stall.ok()) return 1;
  auto warm = (*checkpointer)->Finish();
  if (!warm.ok() || warm->manifest.incremental) {
    std::fprintf(stderr, "second full checkpoint failed\n");
    return 1;
  }
  // An incremental one with nothing changed, then every row changed and a third full one.
  if (!(*checkpointer)->Write(**trainer, **store, {.step = 4}).ok()) return 1;
  if (change(1.0, 3) < 0) return 1;
  auto all_stall = (*checkpointer)->Start(**trainer, **store, {.step = 5});
  if (!all_stall.ok()) return 1;
  auto all = (*checkpointer)->Finish();
  if (!all.ok() || all->manifest.incremental) {
    std::fprintf(stderr, "third full checkpoint failed\n");
    return 1;
  }
  nlohmann::json out = {
      {"rows", total_rows},
      {"full_bytes", full_bytes},
      {"full_seconds", full->seconds},
      {"sequential_write_seconds", dd_seconds},
      {"sequential_write_before_seconds", dd_before},
      {"sequential_write_after_seconds", dd_after},
      {"full_vs_sequential_write", dd_seconds / full->seconds},
      {"touched_rows", touched},
      {"incremental_bytes", inc->manifest.total_bytes()},
      {"incremental_seconds", inc->seconds},
      {"incremental_vs_full_bytes", static_cast<double>(inc->manifest.total_bytes()) / full_bytes},
      {"incremental_vs_full_time", inc->seconds / full->seconds},
      {"first_full_stall_seconds", *stall},
      {"first_stall_vs_full_write", *stall / full->seconds},
      {"prepare_seconds", (*checkpointer)->prepare_seconds()},
      {"unprepared_first_stall_seconds", unprepared->stall},
      {"unprepared_first_full_seconds", unprepared->seconds},
      {"unprepared_first_stall_vs_full_write", unprepared->stall / unprepared->seconds},
      {"last_stall_seconds", last->stall},
      {"last_full_seconds", last->seconds},
      {"last_stall_vs_full_write", last->stall / last->seconds},
      {"precopy_seconds", precopied[0]->precopy_seconds},
      {"precopy_first_stall_seconds", precopied[0]->stall},
      {"precopy_first_full_seconds", precopied[0]->seconds},
      {"precopy_first_stall_vs_full_write", precopied[0]->stall / precopied[0]->seconds},
      {"precopy_done_seconds", precopied[1]->precopy_seconds},
      {"precopy_done_first_stall_seconds", precopied[1]->stall},
      {"precopy_done_first_full_seconds", precopied[1]->seconds},
      {"precopy_done_first_stall_vs_full_write", precopied[1]->stall / precopied[1]->seconds},
      {"full_stall_seconds", *warm_stall},
      {"full2_seconds", warm->seconds},
      {"stall_vs_full_write", *warm_stall / warm->seconds},
      {"all_changed_stall_seconds", *all_stall},
      {"full3_seconds", all->seconds},
      {"all_changed_stall_vs_full_write", *all_stall / all->seconds}};
  // The in-process store's memory goes before the parameter server's part.
  checkpointer->reset();
  trainer->reset();
  store->reset();
  out.update(PsCheckpoint(spec, dir, touched_fraction));
  out.update(CrcThroughput());
  std::printf("%s\n", out.dump().c_str());
  fs::remove_all(dir);
  return 0;
}
