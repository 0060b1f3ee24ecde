#include "dense/backend_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dense/cpu/cpu_backend.h"
#ifdef DLRM_WITH_CUDA
#include "dense/cuda/cuda_backend.h"
#endif

namespace dlrm::dense {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpu(const BackendOptions& options) {
  auto backend =
      CpuBackend::Create({.threads = options.cpu_threads, .math_mode = options.math_mode});
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(backend).value());
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCuda(const BackendOptions& options) {
#ifdef DLRM_WITH_CUDA
  if (options.device_ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda device ordinal must be >= 0, got ", options.device_ordinal));
  }
  const int count = cuda::DeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "device 'cuda' requested but no CUDA device is visible to this process");
  }
  if (options.device_ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda device ordinal ", options.device_ordinal, " >= device count ", count));
  }
  return cuda::CreateCudaBackend(options.math_mode, options.device_ordinal);
#else
  (void)options;
  return absl::FailedPreconditionError(
      "device 'cuda' requested but this binary was built without CUDA (configure with "
      "-DDLRM_WITH_CUDA=ON on a machine with nvcc)");
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.cpu_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads must be >= 0 (0 = all cores), got ", options.cpu_threads));
  }
  switch (options.kind) {
    case BackendOptions::Kind::kCpu:
      return CreateCpu(options);
    case BackendOptions::Kind::kCuda:
      return CreateCuda(options);
    case BackendOptions::Kind::kAuto:
#ifdef DLRM_WITH_CUDA
      if (cuda::DeviceCount() > 0) return CreateCuda(options);
#endif
      return CreateCpu(options);
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

absl::StatusOr<BackendOptions::Kind> ParseDeviceKind(const std::string& name) {
  if (name == "auto") return BackendOptions::Kind::kAuto;
  if (name == "cpu") return BackendOptions::Kind::kCpu;
  if (name == "cuda") return BackendOptions::Kind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (expected auto, cpu or cuda)"));
}

absl::StatusOr<MathMode> ParseMathMode(const std::string& name) {
  if (name == "fp32") return MathMode::kFp32;
  if (name == "tf32") return MathMode::kTf32;
  if (name == "bf16") return MathMode::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown math mode '", name, "' (expected fp32, tf32 or bf16)"));
}

int VisibleCudaDevices() {
#ifdef DLRM_WITH_CUDA
  return cuda::DeviceCount();
#else
  return 0;
#endif
}

bool BuiltWithCuda() {
#ifdef DLRM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace dlrm::dense
