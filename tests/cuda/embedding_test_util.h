// Helpers of the CUDA embedding tests: random bags, deterministic stored rows, the CPU reference
// of a sparse step, and a fixture with the CPU (reference) and CUDA kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
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
  std::vector<int64_t> touched = bags.ids;
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

}  // namespace dlrm::cuda_test
