#include "dense/cpu/blas_env.h"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dlrm::dense {

void ReexecWithBlasDefaults(char** argv) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;
  if (setenv("OPENBLAS_THREAD_TIMEOUT", kDefaultBlasThreadTimeout, /*overwrite=*/0) != 0) return;
  std::fflush(nullptr);  // nothing buffered is written twice
  execv("/proc/self/exe", argv);
  // Still here: no /proc. Go on with the library's default spin; the variable is left set so
  // that child processes start with it.
  std::fprintf(stderr, "warning: could not restart with OPENBLAS_THREAD_TIMEOUT=%s (%s)\n",
               kDefaultBlasThreadTimeout, std::strerror(errno));
}

std::string BlasThreadTimeout() {
  const char* value = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  return value == nullptr ? "" : value;
}

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

}  // namespace dlrm::dense
