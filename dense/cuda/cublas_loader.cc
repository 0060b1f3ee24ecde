#include "dense/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <type_traits>

#include "absl/strings/str_cat.h"

namespace dlrm::dense::cuda {
namespace {

// The entry point the macro of a name expands to: "cublasCreate_v2" for cublasCreate.
#define DLRM_CUBLAS_STR(x) #x
#define DLRM_CUBLAS_SYMBOL(x) DLRM_CUBLAS_STR(x)

// Fails to compile when the headers have no cublasGemmEx of this type.
static_assert(std::is_same_v<CublasGemmExFn, decltype(static_cast<CublasGemmExFn>(&cublasGemmEx))>);

template <typename Fn>
absl::Status Resolve(void* library, const char* symbol, Fn* fn) {
  dlerror();
  *fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*fn == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat(CublasLibraryName(), " has no ", symbol, ": ", why != nullptr ? why : "null"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CublasApi> Load() {
  const std::string name = CublasLibraryName();
  // Kept open for the life of the process, as a linked library would be.
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", name,
                     "), which the CUDA backend needs: ", why != nullptr ? why : "unknown error",
                     "; install it or add its folder to LD_LIBRARY_PATH"));
  }
  CublasApi api;
  for (absl::Status s : {
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasCreate), &api.create),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasDestroy), &api.destroy),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasSetStream), &api.set_stream),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasSetWorkspace), &api.set_workspace),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasGemmEx), &api.gemm_ex),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasGetStatusName), &api.status_name),
           Resolve(library, DLRM_CUBLAS_SYMBOL(cublasGetStatusString), &api.status_string),
       }) {
    if (!s.ok()) return s;
  }
  return api;
}

#undef DLRM_CUBLAS_SYMBOL
#undef DLRM_CUBLAS_STR

}  // namespace

std::string CublasLibraryName() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* const loaded = new absl::StatusOr<CublasApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

std::string CublasStatusText(cublasStatus_t status) {
  absl::StatusOr<const CublasApi*> api = Cublas();
  if (!api.ok()) return absl::StrCat("cuBLAS status ", static_cast<int>(status));
  return absl::StrCat((*api)->status_name(status), " (", (*api)->status_string(status), ")");
}

}  // namespace dlrm::dense::cuda
