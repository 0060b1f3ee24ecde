// Compiled with -mavx512f. Uses no C++ library templates or inline functions shared with other
// translation units (only intrinsics, memcpy and code with internal linkage), so no AVX-512 code
// can leak into callers on CPUs without it through a merged inline definition
// (tests/isa_objects_check.sh checks the object).
#include "dense/cpu/interaction_avx512.h"

#include <cstring>

#if defined(__x86_64__)
#include "common/avx512.h"
#include "dense/cpu/interaction_simd.h"

namespace dlrm::dense::cpu {
namespace {

// 16 floats a register; the backward takes 8 rows of dZ at a time when a row is one or two
// registers wide, else 4 (the sums and one row of loads stay in the 32 registers).
struct Avx512 {
  static constexpr int kWidth = 16;
  using Reg = __m512;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float x) { return _mm512_set1_ps(x); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Reg r) { _mm512_storeu_ps(p, r); }
  static Reg Fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static __mmask16 FirstLanes(int k) { return static_cast<__mmask16>((1u << k) - 1); }
  static Reg LoadFirst(const float* p, int k) { return _mm512_maskz_loadu_ps(FirstLanes(k), p); }
  static void StoreFirst(float* p, Reg r, int k) { _mm512_mask_storeu_ps(p, FirstLanes(k), r); }
  static void Transpose(Reg r[16]) { simd::Transpose16(r); }
  static constexpr int RowsPerBlock(int kc) { return kc <= 2 ? 8 : 4; }
};

}  // namespace

bool CpuHasAvx512F() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

size_t Avx512InteractionScratchFloats(int num_tables, int dim) {
  return InteractionScratchFloatsFor<Avx512>(num_tables, dim);
}

void Avx512InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                              int dim, float* out, float* scratch) {
  InteractionForwardFor<Avx512>(bottom, emb, batch, num_tables, dim, out, scratch);
}

void Avx512InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int dim, float* dbottom, float* demb,
                               float* scratch) {
  InteractionBackwardFor<Avx512>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb, scratch);
}

}  // namespace dlrm::dense::cpu

#else  // not x86-64: no AVX-512; the other kernels are used.

namespace dlrm::dense::cpu {
bool CpuHasAvx512F() { return false; }
size_t Avx512InteractionScratchFloats(int, int) { return 0; }
void Avx512InteractionForward(const float*, const float*, int, int, int, float*, float*) {}
void Avx512InteractionBackward(const float*, const float*, const float*, int, int, int, float*,
                               float*, float*) {}
}  // namespace dlrm::dense::cpu

#endif
