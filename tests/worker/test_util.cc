#include "tests/worker/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "worker/input/synthetic.h"

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
    spec.tables.push_back({.name = "C", .rows = rows});
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

}  // namespace dlrm::worker::testing
