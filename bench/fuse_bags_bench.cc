// Host cost of laying a batch's bags out for the GPU tables (worker/fused_bags.h FuseBags: the
// checks and the sample-major layout a GPU step does before its first kernel), on a `dlrm bench`
// shape's bag sizes, with the worker's pool and on one thread. Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/shapes.h"
#include "common/parallel.h"
#include "nlohmann/json.hpp"
#include "worker/fused_bags.h"

namespace dlrm {
namespace {

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  CLI::App app{"Host cost of FuseBags (the GPU tables' layout of a batch's bags; prints JSON)"};
  std::string shape_name = "kaggle-shape";
  int batch_size = 16384;
  int iterations = 20;
  int threads = 0;
  app.add_option("--shape", shape_name, "kaggle-shape, model1 or mlperf-dcnv2");
  app.add_option("--batch-size", batch_size, "Samples per batch")->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "Timed layouts of each kind")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "Pool threads incl. the caller (0: hardware threads)");
  CLI11_PARSE(app, argc, argv);
  auto shape = bench::GetBenchShape(shape_name);
  if (!shape.ok()) {
    std::cerr << shape.status() << "\n";
    return 2;
  }
  std::vector<embedding::TableConfig> tables;
  for (const auto& t : shape->spec.tables) {
    embedding::TableConfig c;
    c.name = t.name;
    c.rows = t.rows;
    c.dim = shape->spec.embedding_dim;
    tables.push_back(c);
  }
  // Uniform ids: the layout's cost depends on the bag sizes, not on which rows they name.
  worker::Batch batch;
  batch.size = batch_size;
  batch.sparse.resize(tables.size());
  std::mt19937_64 rng(1);
  for (size_t t = 0; t < tables.size(); ++t) {
    const int bag = shape->bag(t);
    worker::SparseFeature& f = batch.sparse[t];
    f.ids.resize(static_cast<size_t>(batch_size) * bag);
    f.offsets.resize(batch_size + 1);
    for (int b = 0; b <= batch_size; ++b) f.offsets[b] = b * bag;
    for (int64_t& id : f.ids) id = static_cast<int64_t>(rng() % tables[t].rows);
  }
  const std::vector<int64_t> bases = worker::FusedBases(tables);
  const int pool_threads =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  common::ParallelPool pool(pool_threads - 1);
  worker::FusedBags out;
  auto time = [&](common::ParallelPool* p) -> std::vector<double> {
    std::vector<double> ms;
    for (int i = 0; i < iterations + 2; ++i) {  // two untimed: buffers grown, caches warm
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status s = worker::FuseBags(batch, tables, bases, &out, p);
      const auto t1 = std::chrono::steady_clock::now();
      if (!s.ok()) {
        std::cerr << s << "\n";
        std::exit(1);
      }
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return ms;
  };
  const double pooled = MedianMs(time(&pool));
  const double serial = MedianMs(time(nullptr));
  const double ids = static_cast<double>(out.ids.size());
  nlohmann::json j;
  j["shape"] = shape_name;
  j["batch_size"] = batch_size;
  j["ids"] = out.ids.size();
  j["threads"] = pool_threads;
  j["fuse_ms_median"] = pooled;
  j["fuse_ns_per_id"] = pooled * 1e6 / ids;
  j["fuse_one_thread_ms_median"] = serial;
  j["fuse_one_thread_ns_per_id"] = serial * 1e6 / ids;
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace dlrm

int main(int argc, char** argv) { return dlrm::Run(argc, argv); }
