// Compiled with -mavx2 -mfma. Uses no C++ library templates or inline functions shared with other
// translation units (only intrinsics, memcpy and code with internal linkage), so no AVX2 code can
// leak into callers on CPUs without it through a merged inline definition.
#include "dense/cpu/interaction_avx2.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#include "dense/cpu/interaction_simd.h"

namespace dlrm::dense::cpu {
namespace {

// 8 floats a register; the backward takes 4 rows of dZ at a time (4 x 4 sums and 4 loads in the
// 16 registers).
struct Avx2 {
  static constexpr int kWidth = 8;
  using Reg = __m256;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float x) { return _mm256_set1_ps(x); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Reg r) { _mm256_storeu_ps(p, r); }
  static Reg Fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  // Lanes below k set (all bits), the others clear: the mask of maskload and maskstore.
  static __m256i FirstLanes(int k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Reg LoadFirst(const float* p, int k) { return _mm256_maskload_ps(p, FirstLanes(k)); }
  static void StoreFirst(float* p, Reg r, int k) { _mm256_maskstore_ps(p, FirstLanes(k), r); }
  static void Transpose(Reg r[8]) {
    Reg t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
      t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
      t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
      u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
      u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
      u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
      u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; ++k) {
      r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
      r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
  }
  static constexpr int RowsPerBlock(int) { return 4; }
};

}  // namespace

bool CpuHasAvx2Fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

size_t Avx2InteractionScratchFloats(int num_tables, int dim) {
  return InteractionScratchFloatsFor<Avx2>(num_tables, dim);
}

void Avx2InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                            int dim, float* out, float* scratch) {
  InteractionForwardFor<Avx2>(bottom, emb, batch, num_tables, dim, out, scratch);
}

void Avx2InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                             int num_tables, int dim, float* dbottom, float* demb, float* scratch) {
  InteractionBackwardFor<Avx2>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb, scratch);
}

}  // namespace dlrm::dense::cpu

#else  // not x86-64: no AVX2; the portable loops are always used.

namespace dlrm::dense::cpu {
bool CpuHasAvx2Fma() { return false; }
size_t Avx2InteractionScratchFloats(int, int) { return 0; }
void Avx2InteractionForward(const float*, const float*, int, int, int, float*, float*) {}
void Avx2InteractionBackward(const float*, const float*, const float*, int, int, int, float*,
                             float*, float*) {}
}  // namespace dlrm::dense::cpu

#endif
