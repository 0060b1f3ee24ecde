// How the bags of one launch of the CUDA embedding kernels are pooled (embedding_kernels.h), in a
// header without CUDA types, so that the GPU table and hot rows can keep it in their state.
#pragma once

#include <cstdint>

#include "embedding/kernels.h"

namespace dlrm::embedding::cuda {

// How the bags of one launch are pooled. With table_means == nullptr every bag is pooled one way,
// by `mean`, and the kernels read nothing for it (the fast path). Otherwise the bags are those of
// `num_tables` tables laid out sample-major (worker/fused_bags.h: bag s * T + t is sample s's bag
// of table t) and bag b is mean-pooled iff table_means[b % num_tables] != 0 (device memory,
// num_tables bytes). As in the CPU kernels, a mean bag's sum is multiplied by 1 / length (an
// empty bag gives zeros) and its backward scales the bag's output gradient by 1 / length.
struct BagPooling {
  bool mean = false;
  const uint8_t* table_means = nullptr;
  int num_tables = 1;

  static BagPooling All(PoolingMode mode) {
    BagPooling p;
    p.mean = mode == PoolingMode::kMean;
    return p;
  }
  static BagPooling PerTable(const uint8_t* table_means, int num_tables) {
    BagPooling p;
    p.table_means = table_means;
    p.num_tables = num_tables;
    return p;
  }
};

}  // namespace dlrm::embedding::cuda
