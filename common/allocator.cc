#include "common/allocator.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dlrm::common {

void ConfigureAllocatorForLargeBuffers() {
  const char* skip = std::getenv("DLRM_DEFAULT_MALLOC");
  if (skip != nullptr && std::strcmp(skip, "1") == 0) return;
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // blocks up to 256 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);    // and the heap's free top is kept up to 1 GiB
#endif
}

}  // namespace dlrm::common
