#include "dense/cpu/blas_env.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dlrm::dense {

void ReexecWithBlasDefaults(char** argv) {
  const bool timeout_set = std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr;
  const bool wait_set = std::getenv("OMP_WAIT_POLICY") != nullptr;
  if (timeout_set && wait_set) return;
  if (!timeout_set && setenv("OPENBLAS_THREAD_TIMEOUT", kDefaultBlasThreadTimeout, 0) != 0) return;
  if (!wait_set && setenv("OMP_WAIT_POLICY", kDefaultOmpWaitPolicy, 0) != 0) return;
  std::fflush(nullptr);  // nothing buffered is written twice
  execv("/proc/self/exe", argv);
  // Still here: no /proc. Go on with the libraries' default spin; the variables are left set so
  // that child processes start with them.
  std::fprintf(stderr,
               "warning: could not restart with OPENBLAS_THREAD_TIMEOUT=%s and "
               "OMP_WAIT_POLICY=%s (%s)\n",
               kDefaultBlasThreadTimeout, kDefaultOmpWaitPolicy, std::strerror(errno));
}

std::string BlasThreadTimeout() {
  const char* value = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  return value == nullptr ? "" : value;
}

std::string OmpWaitPolicy() {
  const char* value = std::getenv("OMP_WAIT_POLICY");
  return value == nullptr ? "" : value;
}

std::string OneDnnIsaName() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa " + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
  }
}

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

}  // namespace dlrm::dense
