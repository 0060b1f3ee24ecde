// Helpers of the CUDA tests: random inputs, device buffers, tolerance checks.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dense/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace dlrm::cuda_test {

#define DLRM_SKIP_WITHOUT_GPU()                           \
  do {                                                    \
    if (::dlrm::dense::cuda::DeviceCount() == 0) {        \
      GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
    }                                                     \
  } while (0)

// Uniform in [lo, hi), never exactly zero (a zero input hides missing terms).
inline std::vector<float> RandomVector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = dist(rng);
    } while (x == 0.0f);
  }
  return v;
}

// Device memory for the embedding tests (the dense tests use Backend::Allocate).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, sizeof(T) * (size_ > 0 ? size_ : 1)), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), sizeof(T) * size_, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // cudaMemcpy from pageable memory may return before the DMA reached the device, and the
    // kernels under test run on non-blocking streams that do not wait for the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() { return static_cast<T*>(ptr_); }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, sizeof(T) * size_, cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t size_;
};

// Element-wise |got - want| <= rtol * scale[i] + atol, scale defaulting to |want|.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        double atol, const char* what, const std::vector<float>* scale = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = scale != nullptr ? (*scale)[i] : std::fabs(want[i]);
    const double bound = rtol * s + atol;
    if (!(std::fabs(double{got[i]} - want[i]) <= bound)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (bound "
                    << bound << ")";
      if (++reported >= 5) return;
    }
  }
}

}  // namespace dlrm::cuda_test
