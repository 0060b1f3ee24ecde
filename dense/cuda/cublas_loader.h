// cuBLAS opened with dlopen on first use instead of linked. libcublas.so pulls in libcublasLt,
// whose static initialisers cost every process that links it 0.4-0.9 s of CPU at start-up, GPU or
// not: `dlrm --help`, each child of `dlrm local`, each test. Only a CudaBackend needs cuBLAS, so
// only its Init() opens it. The library is found the way a linked one would be (the binary's
// RUNPATH, LD_LIBRARY_PATH, the loader's cache), as PyTorch and TensorFlow open their optional
// CUDA libraries.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "absl/status/statusor.h"
#include "common/logging.h"

// Aborts with the failing cuBLAS call (same contract as DLRM_CUDA_CHECK).
#define DLRM_CUBLAS_CHECK(expr)                                                     \
  do {                                                                              \
    cublasStatus_t dlrm_cublas_st_ = (expr);                                        \
    DLRM_CHECK(dlrm_cublas_st_ == CUBLAS_STATUS_SUCCESS)                            \
        << #expr << ": " << ::dlrm::dense::cuda::CublasStatusText(dlrm_cublas_st_); \
  } while (0)

namespace dlrm::dense::cuda {

// cublasGemmEx has a C++ overload taking a cudaDataType compute type; this is the C entry point.
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const void*, const void*, cudaDataType, int,
                                          const void*, cudaDataType, int, const void*, void*,
                                          cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

// The cuBLAS entry points the CUDA backend calls. The types come from the headers built against
// (cublasCreate is the macro for cublasCreate_v2: the symbols are looked up by the names the
// macros expand to).
struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  CublasGemmExFn gemm_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// "libcublas.so.<major>" of the headers built against (libcublas.so.13 for CUDA 13).
std::string CublasLibraryName();

// Opens cuBLAS and resolves every entry point, once per process (thread-safe; later calls return
// the first result). FAILED_PRECONDITION naming the library and dlerror() when it cannot.
absl::StatusOr<const CublasApi*> Cublas();

// "CUBLAS_STATUS_X (its description)" through the loaded library, or the number before it loads.
std::string CublasStatusText(cublasStatus_t status);

}  // namespace dlrm::dense::cuda
