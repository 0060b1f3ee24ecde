// Creates a dense Backend by kind: the CPU reference backend or, in builds with CUDA
// (DLRM_WITH_CUDA defined), the CUDA backend.
//
//   DLRM_ASSIGN_OR_RETURN(auto kind, dense::ParseDeviceKind(flags.device));
//   DLRM_ASSIGN_OR_RETURN(std::unique_ptr<dense::Backend> backend,
//                         dense::CreateBackend({.kind = kind}));
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dense/backend.h"

namespace dlrm::dense {

struct BackendOptions {
  enum class Kind { kAuto, kCpu, kCuda };
  // kAuto: CUDA when this build has it and a device is visible, otherwise the CPU.
  Kind kind = Kind::kAuto;
  // GEMM precision: CUDA's fp32, TF32 or bf16; the CPU backend's fp32 or bf16 (on CPUs with
  // AVX512_BF16 or AMX; tf32 runs as fp32 there).
  MathMode math_mode = MathMode::kFp32;
  // CUDA device; must be in [0, cuda::DeviceCount()).
  int device_ordinal = 0;
  // GEMM threads of the CPU backend (oneDNN's and OpenBLAS's); 0 = all cores (see
  // CpuBackendOptions::threads).
  int cpu_threads = 0;
};

// kCuda in a build without CUDA, or with no visible device, or with device_ordinal out of range
// is FAILED_PRECONDITION (INVALID_ARGUMENT for a negative ordinal or cpu_threads), with a message
// that says which.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// "auto", "cpu", "cuda" (lower case); anything else is INVALID_ARGUMENT naming it.
absl::StatusOr<BackendOptions::Kind> ParseDeviceKind(const std::string& name);

// "fp32", "tf32", "bf16"; anything else is INVALID_ARGUMENT naming it. MathModeName (in
// dense/backend.h) writes them.
absl::StatusOr<MathMode> ParseMathMode(const std::string& name);

// True when this binary was built with the CUDA backend (whether or not a device is present).
bool BuiltWithCuda();
// The CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 in a build without CUDA.
int VisibleCudaDevices();

}  // namespace dlrm::dense
