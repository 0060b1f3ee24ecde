// Shared helpers of the dense tests: the list of backend factories that the typed tests run over,
// and a fixture that creates the backend or skips.
//
// Every backend-facing test is a TYPED_TEST over BackendFactories. The CUDA factory is part of
// the list in builds with CUDA (DLRM_WITH_CUDA) and skips when no device is visible, so the same
// bodies check the CUDA backend against the same references as the CPU one. The CPU backend runs
// twice: with its default GEMMs (oneDNN) and with OpenBLAS's.
#pragma once

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/backend.h"
#include "dense/backend_factory.h"
#include "dense/cpu/cpu_backend.h"
#include "dense/tensor.h"
#include "gtest/gtest.h"
#ifdef DLRM_WITH_CUDA
#include "dense/cuda/cuda_backend.h"
#endif

namespace dlrm::dense::testing {

struct CpuBackendFactory {
  static constexpr const char* kName = "Cpu";
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    return CreateBackend({.kind = BackendOptions::Kind::kCpu});
  }
};

struct OpenBlasCpuBackendFactory {
  static constexpr const char* kName = "CpuOpenBlas";
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    auto backend = CpuBackend::Create({.gemm = CpuGemmLibrary::kOpenBlas});
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(backend).value());
  }
};

#ifdef DLRM_WITH_CUDA
struct CudaBackendFactory {
  static constexpr const char* kName = "Cuda";
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    if (cuda::DeviceCount() == 0) return absl::UnavailableError("no CUDA device visible");
    return cuda::CreateCudaBackend(MathMode::kFp32, 0);
  }
};
using BackendFactories =
    ::testing::Types<CpuBackendFactory, OpenBlasCpuBackendFactory, CudaBackendFactory>;
#else
using BackendFactories = ::testing::Types<CpuBackendFactory, OpenBlasCpuBackendFactory>;
#endif

struct BackendFactoryNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

inline std::vector<float> RandomVector(size_t n, std::mt19937_64& rng, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename Factory>
class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = Factory::Create();
    if (!backend.ok()) GTEST_SKIP() << Factory::kName << " backend: " << backend.status();
    backend_ = std::move(backend).value();
  }

  Backend* backend() { return backend_.get(); }

  // A [rows x cols] tensor holding `values` (rows * cols of them).
  Tensor Upload(const std::vector<float>& values, int rows, int cols) {
    Tensor t(backend_.get(), rows, cols);
    t.CopyFromHost(values);
    return t;
  }
  Tensor Upload(const std::vector<float>& values) {
    return Upload(values, 1, static_cast<int>(values.size()));
  }
  std::vector<float> Download(const float* ptr, size_t count) {
    std::vector<float> host(count);
    backend_->CopyToHost(ptr, host.data(), count);
    backend_->Synchronize();
    return host;
  }
  float Get(const float* ptr, size_t index) { return Download(ptr + index, 1)[0]; }
  void Set(float* ptr, size_t index, float value) {
    backend_->CopyFromHost(&value, ptr + index, 1);
  }

  std::unique_ptr<Backend> backend_;
};

}  // namespace dlrm::dense::testing
