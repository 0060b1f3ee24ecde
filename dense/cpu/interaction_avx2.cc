// Compiled with -mavx2 -mfma. Uses no C++ library templates or inline functions shared with other
// translation units (only intrinsics, memcpy and code with internal linkage), so no AVX2 code can
// leak into callers on CPUs without it through a merged inline definition.
#include "dense/cpu/interaction_avx2.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

namespace dlrm::dense::cpu {
namespace {

inline int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// Dots of z_i with z_0 .. z_{8 NC - 1} (columns of zt, the [dim x npad] transpose of Z), stored
// to dst[0, 8 NC). Two accumulators per chunk (even and odd d) to halve the FMA dependency chains.
template <int NC>
inline void RowDots(const float* zi, const float* zt, int npad, int dim, float* dst) {
  __m256 even[NC], odd[NC];
  for (int c = 0; c < NC; ++c) {
    even[c] = _mm256_setzero_ps();
    odd[c] = _mm256_setzero_ps();
  }
  for (int d = 0; d < dim; d += 2) {
    const __m256 s0 = _mm256_broadcast_ss(zi + d);
    const __m256 s1 = _mm256_broadcast_ss(zi + d + 1);
    const float* r0 = zt + static_cast<size_t>(d) * npad;
    const float* r1 = r0 + npad;
    for (int c = 0; c < NC; ++c) {
      even[c] = _mm256_fmadd_ps(s0, _mm256_loadu_ps(r0 + 8 * c), even[c]);
      odd[c] = _mm256_fmadd_ps(s1, _mm256_loadu_ps(r1 + 8 * c), odd[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(dst + 8 * c, _mm256_add_ps(even[c], odd[c]));
}

// dZ rows i0 .. i0+3 = S[i0 .. i0+3, :] Z, for a width of 8 KC; s is [n4 x n] row-major.
template <int KC>
inline void FourRowsTimesZ(const float* s, int n, const float* const* z, float* const* dst) {
  __m256 acc[4][KC];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < KC; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int j = 0; j < n; ++j) {
    __m256 zj[KC];
    for (int c = 0; c < KC; ++c) zj[c] = _mm256_loadu_ps(z[j] + 8 * c);
    for (int r = 0; r < 4; ++r) {
      const __m256 sij = _mm256_broadcast_ss(s + r * n + j);
      for (int c = 0; c < KC; ++c) acc[r][c] = _mm256_fmadd_ps(sij, zj[c], acc[r][c]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    if (dst[r] == nullptr) continue;
    for (int c = 0; c < KC; ++c) {
      _mm256_storeu_ps(dst[r] + 8 * c, _mm256_add_ps(_mm256_loadu_ps(dst[r] + 8 * c), acc[r][c]));
    }
  }
}

// Columns are taken in blocks of 8 KC (at most 32: FourRowsTimesZ's 4 x KC sums and KC loads
// stay in the 16 registers); dim is a multiple of 8 KC. kWide: dim is runtime_dim, over one
// block; otherwise dim is the block, known at compile time (the per-sample copies and clears of
// a few dozen bytes are then inlined, not library calls).
template <int KC, bool kWide>
void BackwardImpl(const float* bottom, const float* emb, const float* dout, int batch,
                  int num_tables, int runtime_dim, float* dbottom, float* demb, float* scratch) {
  constexpr int kBlock = 8 * KC;
  const int dim = kWide ? runtime_dim : kBlock;
  const int n = num_tables + 1;
  const int n4 = RoundUp(n, 4);
  const int out_cols = dim + n * num_tables / 2;
  float* s = scratch;  // [n4 x n], symmetric in its first n rows, zero diagonal and padding rows
  std::memset(s, 0, sizeof(float) * n4 * n);
  const float* z[512];
  float* dst[512 + 4];
  const float* zc[512];
  float* dstc[512 + 4];
  for (int b = 0; b < batch; ++b) {
    const float* x = bottom + static_cast<size_t>(b) * dim;
    const float* e = emb + static_cast<size_t>(b) * num_tables * dim;
    const float* g = dout + static_cast<size_t>(b) * out_cols;
    const float* gp = g + dim;
    for (int i = 1; i < n; ++i) {
      const float* row = gp + i * (i - 1) / 2;
      std::memcpy(s + i * n, row, sizeof(float) * i);
      for (int j = 0; j < i; ++j) s[j * n + i] = row[j];
    }
    float* db = dbottom + static_cast<size_t>(b) * dim;
    float* de = demb + static_cast<size_t>(b) * num_tables * dim;
    z[0] = x;
    dst[0] = db;
    std::memcpy(db, g, sizeof(float) * dim);  // the bottom output passes straight through
    for (int t = 0; t < num_tables; ++t) {
      z[t + 1] = e + t * dim;
      dst[t + 1] = de + t * dim;
      std::memset(dst[t + 1], 0, sizeof(float) * dim);
    }
    for (int i = n; i < n4; ++i) dst[i] = nullptr;
    for (int c = 0; c < dim; c += kBlock) {
      const float* const* zb = z;
      float* const* dstb = dst;
      if (c > 0) {
        for (int i = 0; i < n; ++i) {
          zc[i] = z[i] + c;
          dstc[i] = dst[i] + c;
        }
        for (int i = n; i < n4; ++i) dstc[i] = nullptr;
        zb = zc;
        dstb = dstc;
      }
      for (int i0 = 0; i0 < n; i0 += 4) FourRowsTimesZ<KC>(s + i0 * n, n, zb, dstb + i0);
    }
  }
}

}  // namespace

bool CpuHasAvx2Fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

size_t Avx2InteractionScratchFloats(int num_tables, int dim) {
  const int n = num_tables + 1;
  const size_t forward = static_cast<size_t>(dim) * RoundUp(n, 8) + n * (n - 1) / 2 + 8;
  const size_t backward = static_cast<size_t>(RoundUp(n, 4)) * n;
  return forward > backward ? forward : backward;
}

void Avx2InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                            int dim, float* out, float* scratch) {
  const int n = num_tables + 1;
  const int npad = RoundUp(n, 8);
  const int num_pairs = n * num_tables / 2;
  const int out_cols = dim + num_pairs;
  float* zt = scratch;                                     // [dim x npad]
  float* tri = scratch + static_cast<size_t>(dim) * npad;  // num_pairs + 8 (rows overrun by < 8)
  std::memset(zt, 0, sizeof(float) * dim * npad);
  for (int b = 0; b < batch; ++b) {
    const float* x = bottom + static_cast<size_t>(b) * dim;
    const float* e = emb + static_cast<size_t>(b) * num_tables * dim;
    float* o = out + static_cast<size_t>(b) * out_cols;
    for (int d = 0; d < dim; ++d) zt[d * npad] = x[d];
    for (int t = 0; t < num_tables; ++t) {
      const float* et = e + t * dim;
      for (int d = 0; d < dim; ++d) zt[d * npad + t + 1] = et[d];
    }
    // Row i needs dots with z_0 .. z_{i-1}: ceil(i / 8) chunks. The chunks overrun into the next
    // row's slots, which that row then overwrites (rows go in increasing order).
    for (int i = 1; i < n; ++i) {
      const float* zi = e + (i - 1) * dim;
      float* dst = tri + i * (i - 1) / 2;
      int chunk = 0;
      const int chunks = (i + 7) / 8;
      for (; chunk + 4 <= chunks; chunk += 4)
        RowDots<4>(zi, zt + 8 * chunk, npad, dim, dst + 8 * chunk);
      switch (chunks - chunk) {
        case 3:
          RowDots<3>(zi, zt + 8 * chunk, npad, dim, dst + 8 * chunk);
          break;
        case 2:
          RowDots<2>(zi, zt + 8 * chunk, npad, dim, dst + 8 * chunk);
          break;
        case 1:
          RowDots<1>(zi, zt + 8 * chunk, npad, dim, dst + 8 * chunk);
          break;
        default:
          break;
      }
    }
    std::memcpy(o, x, sizeof(float) * dim);
    std::memcpy(o + dim, tri, sizeof(float) * num_pairs);
  }
}

void Avx2InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                             int num_tables, int dim, float* dbottom, float* demb, float* scratch) {
  switch (dim <= 32 ? dim / 8 : 0) {
    case 1:
      return BackwardImpl<1, false>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                    scratch);
    case 2:
      return BackwardImpl<2, false>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                    scratch);
    case 3:
      return BackwardImpl<3, false>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                    scratch);
    case 4:
      return BackwardImpl<4, false>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                    scratch);
    default:  // wider: blocks of 32 columns
      return BackwardImpl<4, true>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                   scratch);
  }
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
