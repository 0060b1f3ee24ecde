#include "bench/shapes.h"

#include "absl/strings/str_cat.h"

namespace dlrm::bench {

absl::StatusOr<BenchShape> GetBenchShape(const std::string& name) {
  BenchShape shape;
  common::JobSpec& s = shape.spec;
  s.name = name;
  s.batch_size = 2048;
  s.seed = 1;
  s.dense_optimizer = {.type = "adam", .learning_rate = 0.001};
  s.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  if (name == "kaggle-shape") {
    const int64_t cards[] = {1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
                             93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
                             2173,  4,    7046547,  18,      15,  286181, 105,     142572};
    s.dense_features = 13;
    s.bottom_mlp = {512, 256, 64, 16};
    s.top_mlp = {512, 256, 1};
    s.embedding_dim = 16;
    s.pooling = "sum";
    for (size_t i = 0; i < std::size(cards); ++i) {
      s.tables.push_back({.name = absl::StrCat("C", i + 1), .rows = cards[i]});
    }
    shape.ids_per_lookup = 1;
  } else if (name == "model1") {
    s.dense_features = 512;
    s.bottom_mlp = {512, 64};
    s.top_mlp = {1024, 1024, 1024, 1};
    s.embedding_dim = 64;
    s.pooling = "sum";
    for (int i = 0; i < 8; ++i) {
      s.tables.push_back({.name = absl::StrCat("T", i + 1), .rows = 1000000});
    }
    shape.ids_per_lookup = 100;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown shape '", name, "' (kaggle-shape or model1)"));
  }
  return shape;
}

}  // namespace dlrm::bench
