#include "bench/shapes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/input/synthetic.h"

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
  } else if (name == "mlperf-dcnv2") {
    // MLPerf Training v3.0+ DLRM-DCNv2 (Criteo 1TB, multi-hot), tables capped at 1M rows so that
    // they fit one machine (7.1M rows of dim 128: 3.7 GB with row-wise Adagrad's state).
    const int64_t cards[] = {40000000, 39060,    17295,    7424,     20265,  3,     7122, 1543, 63,
                             40000000, 3067956,  405282,   10,       2209,   11938, 155,  4,    976,
                             14,       40000000, 40000000, 40000000, 590152, 12973, 108,  36};
    s.dense_features = 13;
    s.bottom_mlp = {512, 256, 128};
    s.top_mlp = {1024, 1024, 512, 256, 1};
    s.embedding_dim = 128;
    s.pooling = "sum";
    s.interaction = "dcnv2";
    s.cross_layers = 3;
    s.low_rank = 512;
    s.dense_optimizer = {.type = "adagrad", .learning_rate = 0.004};
    s.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.004};
    const worker::BagSizes bags = worker::MlperfDlrmV2BagSizes();
    for (size_t i = 0; i < std::size(cards); ++i) {
      s.tables.push_back(
          {.name = absl::StrCat("C", i + 1), .rows = std::min<int64_t>(cards[i], 1000000)});
      shape.bags.push_back(bags[i]);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown shape '", name, "' (kaggle-shape, model1 or mlperf-dcnv2)"));
  }
  return shape;
}

}  // namespace dlrm::bench
