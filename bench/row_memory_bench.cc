// row_memory_bench: what a parameter server's stored row really costs, by tables.dtype. One
// table of --rows rows written through TieredStore::WriteRows (every row resident with
// --tier memory; every row in RocksDB with --tier rocksdb, budget 0), then:
//   memory:  the process's resident set growth per row (from /proc/self/statm, so the hash map,
//            the slabs and the allocator's slack are all in it) and the store's accounted bytes
//            per row (MemoryRowMap::BytesPerRow: a formula, named so);
//   rocksdb: the database's files per row after a flush and a full compaction.
// Values are random normals with row-wise Adagrad's state (what a trained table holds; they do
// not compress). Run each dtype in its own process (bench/row_memory.sh does), so that one run's
// freed memory does not hide the next one's growth.
//
//   build/bin/row_memory_bench --dtype fp16 [--rows 2000000] [--dim 16] [--tier memory]
//
// Prints one JSON object to stdout.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "embedding/tiered_store.h"
#include "nlohmann/json.hpp"

namespace dlrm::bench {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t DirectoryBytes(const std::filesystem::path& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".sst") total += e.file_size();
  }
  return total;
}

int Main(int argc, char** argv) {
  CLI::App app{"stored bytes per embedding row by dtype"};
  std::string dtype_name = "fp32", tier = "memory";
  int64_t rows = 2'000'000;
  int dim = 16;
  app.add_option("--dtype", dtype_name, "fp32 | fp16 | bf16");
  app.add_option("--rows", rows, "rows written")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--dim", dim, "embedding dim")->check(CLI::Range(1, 4096));
  app.add_option("--tier", tier, "memory | rocksdb")->check(CLI::IsMember({"memory", "rocksdb"}));
  CLI11_PARSE(app, argc, argv);
  auto dtype = embedding::ParseRowDtype(dtype_name);
  if (!dtype.ok()) {
    std::cerr << dtype.status() << "\n";
    return 2;
  }

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("row_memory_bench." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  embedding::TieredStoreOptions options;
  options.tables = {{"T", rows, dim, *dtype}};
  options.optimizer.type = embedding::SparseOptimizerType::kRowWiseAdagrad;
  options.memory_budget_bytes = tier == "memory" ? int64_t{1} << 40 : 0;
  options.rocksdb.path = (dir / "db").string();
  options.rocksdb.disable_wal = true;
  auto store_or = embedding::TieredStore::Create(options);
  if (!store_or.ok()) {
    std::cerr << store_or.status() << "\n";
    return 1;
  }
  embedding::TieredStore& store = **store_or;
  const int width = store.row_floats(0);

  constexpr int64_t kChunk = 65536;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> values(kChunk * width);
  std::vector<int64_t> ids(kChunk);
  const int64_t before = ResidentBytes();
  for (int64_t begin = 0; begin < rows; begin += kChunk) {
    const int64_t n = std::min(kChunk, rows - begin);
    for (int64_t j = 0; j < n; ++j) {
      ids[j] = begin + j;
      for (int i = 0; i < width; ++i) values[j * width + i] = i < dim ? normal(rng) : 0.01f;
    }
    absl::Status s = store.WriteRows(0, absl::MakeConstSpan(ids.data(), n), values.data());
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  nlohmann::json out = {{"bench", "row_memory"},
                        {"dtype", dtype_name},
                        {"tier", tier},
                        {"rows", rows},
                        {"dim", dim},
                        {"row_floats", width},
                        {"stored_row_bytes_formula", store.codec(0).bytes()}};
  if (tier == "memory") {
    const int64_t grown = ResidentBytes() - before;
    const embedding::TieredStoreStats s = store.stats();
    out["memory_rows"] = s.memory_rows;
    out["rss_bytes_per_row"] = static_cast<double>(grown) / rows;
    out["accounted_bytes_per_row_formula"] = static_cast<double>(s.memory_bytes) / s.memory_rows;
    out["rows_per_gib_by_rss"] = static_cast<double>(int64_t{1} << 30) * rows / grown;
  } else {
    if (absl::Status s = store.Flush(); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    // A checkpoint is an openable, compacted-enough copy: measure the live files after a flush.
    const int64_t bytes = DirectoryBytes(dir / "db");
    out["sst_bytes_per_row"] = static_cast<double>(bytes) / rows;
  }
  store_or->reset();
  std::filesystem::remove_all(dir);
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace dlrm::bench

int main(int argc, char** argv) { return dlrm::bench::Main(argc, argv); }
