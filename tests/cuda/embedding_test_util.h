// Helpers of the CUDA embedding tests: random bags, deterministic stored rows, the CPU reference
// of a sparse step, and a fixture with the CPU (reference) and CUDA kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "embedding/cpu_kernels.h"
#include "embedding/cuda/cuda_kernels.h"
#include "embedding/kernels.h"
#include "embedding/sparse_optimizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace dlrm::cuda_test {

using embedding::EmbeddingKernels;
using embedding::PoolingMode;
using embedding::SparseOptimizerOptions;

// Random bags: sizes in [0, max_bag] (some empty), ids in [0, id_range).
struct Bags {
  std::vector<int64_t> ids;
  std::vector<int32_t> offsets;
};
inline Bags RandomBags(int batch, int max_bag, int64_t id_range, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bags bags;
  bags.offsets.push_back(0);
  for (int b = 0; b < batch; ++b) {
    const int size = static_cast<int>(rng() % (max_bag + 1));
    for (int j = 0; j < size; ++j) bags.ids.push_back(static_cast<int64_t>(rng() % id_range));
    bags.offsets.push_back(static_cast<int32_t>(bags.ids.size()));
  }
  return bags;
}

// The bags of several tables for `samples` samples, fused sample-major as worker/fused_bags.h
// lays them out (bag s * T + t is sample s's bag of table t), and each table's own bags (of the
// same ids). In every table sample 0's bag is empty, sample 1's has one id and the others
// 0..max_bag ids; table t's ids are in [ranges[t].first, ranges[t].second).
struct TableBags {
  Bags fused;
  std::vector<Bags> tables;
};
inline TableBags RandomTableBags(int samples, int max_bag,
                                 const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  TableBags bags;
  bags.tables.resize(ranges.size());
  bags.fused.offsets.push_back(0);
  for (Bags& t : bags.tables) t.offsets.push_back(0);
  for (int s = 0; s < samples; ++s) {
    for (size_t t = 0; t < ranges.size(); ++t) {
      const int size = s == 0 ? 0 : s == 1 ? 1 : static_cast<int>(rng() % (max_bag + 1));
      const int64_t span = ranges[t].second - ranges[t].first;
      for (int j = 0; j < size; ++j) {
        const int64_t id = ranges[t].first + static_cast<int64_t>(rng() % span);
        bags.tables[t].ids.push_back(id);
        bags.fused.ids.push_back(id);
      }
      bags.tables[t].offsets.push_back(static_cast<int32_t>(bags.tables[t].ids.size()));
      bags.fused.offsets.push_back(static_cast<int32_t>(bags.fused.ids.size()));
    }
  }
  return bags;
}

// The CPU reference of a per-table lookup: out[s * T * dim + t * dim + 0..dim) = table t's bag
// of sample s over `rows` (stride floats a row), pooled by modes[t].
inline void ReferenceTableGather(EmbeddingKernels& cpu, const float* rows, int64_t stride, int dim,
                                 const TableBags& bags, int samples,
                                 const std::vector<PoolingMode>& modes, float* out) {
  const int64_t tables = static_cast<int64_t>(bags.tables.size());
  for (int64_t t = 0; t < tables; ++t) {
    cpu.PooledGather(rows, stride, dim, bags.tables[t].ids.data(), bags.tables[t].offsets.data(),
                     samples, modes[t], out + t * dim, tables * dim);
  }
}

// The CPU reference of its backward: the sum over the tables of each one's PooledScatterGrad
// (by modes[t]) of dout (the lookup's layout) into `num_rows` x dim gradients.
inline std::vector<float> ReferenceTableScatter(EmbeddingKernels& cpu,
                                                const std::vector<float>& dout, int dim,
                                                const TableBags& bags, int samples,
                                                const std::vector<PoolingMode>& modes,
                                                int64_t num_rows) {
  const int64_t tables = static_cast<int64_t>(bags.tables.size());
  std::vector<float> sum(static_cast<size_t>(num_rows) * dim, 0.0f), one(sum.size());
  for (int64_t t = 0; t < tables; ++t) {
    cpu.PooledScatterGrad(dout.data() + t * dim, tables * dim, dim, bags.tables[t].ids.data(),
                          bags.tables[t].offsets.data(), samples, modes[t], num_rows, one.data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += one[i];
  }
  return sum;
}

class EmbeddingCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLRM_SKIP_WITHOUT_GPU();
    cpu_ = embedding::CreateCpuKernels();
    auto gpu = embedding::cuda::CreateCudaKernels(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }
  std::unique_ptr<EmbeddingKernels> cpu_;
  std::unique_ptr<EmbeddingKernels> gpu_;
};

// Row r's initial stored row: deterministic weights, the optimizer's initial state.
inline void FillRows(const SparseOptimizerOptions& opt, int dim, int64_t first, int64_t count,
                     float* out) {
  const int64_t stride = dim + embedding::SparseOptimizerStateFloats(opt.type, dim);
  for (int64_t r = 0; r < count; ++r) {
    float* row = out + r * stride;
    for (int i = 0; i < dim; ++i) row[i] = std::sin(0.37f * (first + r) + 0.11f * i + 0.05f);
    embedding::InitSparseOptimizerState(opt, dim, row + dim);
  }
}

// One optimizer step on each distinct id of `ids` with its row of `grad_rows` (id * dim..).
inline void ApplyReferenceRows(EmbeddingKernels& cpu, const SparseOptimizerOptions& optimizer,
                               int dim, int64_t stride, const std::vector<int64_t>& ids,
                               const std::vector<float>& grad_rows, std::vector<float>* host_rows) {
  std::vector<int64_t> touched = ids;
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  std::vector<float> touched_grads;
  for (int64_t id : touched) {
    touched_grads.insert(touched_grads.end(), grad_rows.begin() + id * dim,
                         grad_rows.begin() + (id + 1) * dim);
  }
  cpu.ApplySparseOptimizer(optimizer, host_rows->data(), stride, dim, touched.data(),
                           touched_grads.data(), static_cast<int64_t>(touched.size()));
}

// The reference of a table's sparse step: the pooled backward of `dout` (batch x dim) over the
// `rows` rows of `host_rows` (stride floats each), then one optimizer step on each distinct id of
// `bags` with its summed gradient.
inline void ApplyReferenceStep(EmbeddingKernels& cpu, const SparseOptimizerOptions& optimizer,
                               int dim, int64_t rows, int64_t stride, const Bags& bags, int batch,
                               PoolingMode mode, const std::vector<float>& dout,
                               std::vector<float>* host_rows) {
  std::vector<float> grad_rows(static_cast<size_t>(rows) * dim);
  cpu.PooledScatterGrad(dout.data(), dim, dim, bags.ids.data(), bags.offsets.data(), batch, mode,
                        rows, grad_rows.data());
  ApplyReferenceRows(cpu, optimizer, dim, stride, bags.ids, grad_rows, host_rows);
}

}  // namespace dlrm::cuda_test
