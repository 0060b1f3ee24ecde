// The 64-bit finalizer of splitmix64 (Steele, Lea and Flood, 2014): a cheap bijection on uint64
// with full avalanche, the one mix the project hashes with (shard placement, feature hashing,
// row initialisation, the random bits of stochastic rounding on the GPU). Host and CUDA device
// code alike.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DLRM_MIX64_INLINE __host__ __device__ inline
#else
#define DLRM_MIX64_INLINE inline
#endif

namespace dlrm::common {

// The finalizer alone.
DLRM_MIX64_INLINE uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// One step of the splitmix64 generator from state x: the golden-ratio increment, then the mix.
DLRM_MIX64_INLINE uint64_t SplitMix64(uint64_t x) { return Mix64(x + 0x9e3779b97f4a7c15ULL); }

}  // namespace dlrm::common
