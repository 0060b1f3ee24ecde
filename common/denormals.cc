#include "common/denormals.h"

#include <cstdint>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace dlrm::common {
namespace {

#if defined(__SSE2__)
constexpr unsigned kFlushBits = 0x8040;  // MXCSR FTZ (bit 15) | DAZ (bit 6)
#elif defined(__aarch64__)
constexpr uint64_t kFlushBits = uint64_t{1} << 24;  // FPCR.FZ
#endif

}  // namespace

void FlushDenormalsInThisThread() {
#if defined(__SSE2__)
  _mm_setcsr(_mm_getcsr() | kFlushBits);
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | kFlushBits));
#endif
}

bool DenormalsFlushedInThisThread() {
#if defined(__SSE2__)
  return (_mm_getcsr() & kFlushBits) == kFlushBits;
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr & kFlushBits) != 0;
#else
  return false;
#endif
}

}  // namespace dlrm::common
