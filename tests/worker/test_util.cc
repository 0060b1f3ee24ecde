#include "tests/worker/test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dense/backend_factory.h"
#include "gtest/gtest.h"
#include "worker/input/synthetic.h"
#include "worker/trainer.h"

namespace dlrm::worker::testing {

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status GenerateCappedTsv(const std::string& path, int64_t rows, uint64_t seed,
                               int64_t max_rows) {
  GenDataOptions gen;
  gen.output = path;
  gen.num_rows = rows;
  gen.seed = seed;
  gen.cardinalities = CappedKaggleCardinalities(max_rows);
  return GenerateCriteoTsv(gen);
}

std::string CriteoSamplePath() {
  return std::string(DLRM_SOURCE_DIR) + "/tests/worker/data/criteo_sample.tsv";
}

common::JobSpec SmallGeneratedJob(const std::string& train_path, uint64_t seed) {
  common::JobSpec spec;
  spec.name = "test";
  spec.dense_features = 13;
  spec.bottom_mlp = {32, 8};
  spec.top_mlp = {32, 1};
  spec.embedding_dim = 8;
  for (int64_t rows : CappedKaggleCardinalities(1000)) {
    spec.tables.push_back({.name = absl::StrCat("C", spec.tables.size() + 1), .rows = rows});
  }
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.003};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.1};
  spec.batch_size = 256;
  spec.epochs = 2;
  spec.seed = seed;
  spec.train_paths = {train_path};
  spec.eval_fraction = 0.2;
  spec.device = "cpu";
  return spec;
}

std::unique_ptr<dense::Backend> CpuTestBackend() {
  auto backend = dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCpu,
                                       .math_mode = dense::MathMode::kFp32,
                                       .device_ordinal = 0,
                                       .cpu_threads = 1});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

std::unique_ptr<embedding::LocalEmbeddingStore> LocalStoreForSpec(const common::JobSpec& spec,
                                                                  int num_threads) {
  embedding::LocalStoreOptions so;
  so.tables = TableConfigsFromSpec(spec);
  so.seed = spec.seed;
  auto optimizer = SparseOptimizerFromSpec(spec);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (optimizer.ok()) so.optimizer = *optimizer;
  so.num_threads = num_threads;
  auto store = embedding::LocalEmbeddingStore::Create(so);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

void ExpectSameTraining(Trainer& a, const embedding::LocalEmbeddingStore& a_rows, Trainer& b,
                        const embedding::LocalEmbeddingStore& b_rows, const common::JobSpec& spec,
                        int steps, uint32_t first_seed) {
  for (int step = 0; step < steps; ++step) {
    const Batch batch = RandomBagBatch(spec, first_seed + step);
    auto la = a.Step(batch);
    auto lb = b.Step(batch);
    ASSERT_TRUE(la.ok()) << la.status();
    ASSERT_TRUE(lb.ok()) << lb.status();
    EXPECT_EQ(*la, *lb) << "loss of step " << step;
  }
  const size_t n = a.model().num_params();
  ASSERT_EQ(n, b.model().num_params());
  EXPECT_EQ(0, std::memcmp(a.model().params(), b.model().params(), n * sizeof(float)))
      << "dense params";
  for (int t = 0; t < static_cast<int>(spec.tables.size()); ++t) {
    const embedding::EmbeddingTable& ta = a_rows.table(t);
    const embedding::EmbeddingTable& tb = b_rows.table(t);
    const size_t floats = static_cast<size_t>(ta.rows()) * ta.row_stride();
    EXPECT_EQ(0, std::memcmp(ta.data(), tb.data(), floats * sizeof(float))) << "table " << t;
  }
}

Batch RandomBagBatch(const common::JobSpec& spec, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.size = spec.batch_size;
  b.num_dense = spec.dense_features;
  b.dense.resize(static_cast<size_t>(b.size) * b.num_dense);
  for (float& x : b.dense) x = static_cast<float>(rng() % 1000) / 250.0f;
  b.labels.resize(b.size);
  for (float& y : b.labels) y = static_cast<float>(rng() % 2);
  b.sparse.resize(spec.tables.size());
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    SparseFeature& f = b.sparse[t];
    f.offsets.push_back(0);
    for (int i = 0; i < b.size; ++i) {
      const int n = static_cast<int>(rng() % 7);
      for (int k = 0; k < n; ++k) {
        const int64_t r = static_cast<int64_t>(rng() % 1000);
        f.ids.push_back(r * r * 7919 % spec.tables[t].rows);
      }
      f.offsets.push_back(static_cast<int32_t>(f.ids.size()));
    }
  }
  return b;
}

}  // namespace dlrm::worker::testing
