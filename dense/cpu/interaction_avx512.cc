// Compiled with -mavx512f. Uses no C++ library templates or inline functions shared with other
// translation units (only intrinsics, memcpy and code with internal linkage), so no AVX-512 code
// can leak into callers on CPUs without it through a merged inline definition
// (tests/isa_objects_check.sh checks the object).
#include "dense/cpu/interaction_avx512.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

namespace dlrm::dense::cpu {
namespace {

inline int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// Dots of z_i with z_0 .. z_{16 NC - 1} (columns of zt, the [dim x npad] transpose of Z), stored
// to dst[0, 16 NC). Two accumulators per chunk (even and odd d) to halve the FMA dependency chains.
template <int NC>
inline void RowDots(const float* zi, const float* zt, int npad, int dim, float* dst) {
  __m512 even[NC], odd[NC];
  for (int c = 0; c < NC; ++c) {
    even[c] = _mm512_setzero_ps();
    odd[c] = _mm512_setzero_ps();
  }
  for (int d = 0; d < dim; d += 2) {
    const __m512 s0 = _mm512_set1_ps(zi[d]);
    const __m512 s1 = _mm512_set1_ps(zi[d + 1]);
    const float* r0 = zt + static_cast<size_t>(d) * npad;
    const float* r1 = r0 + npad;
    for (int c = 0; c < NC; ++c) {
      even[c] = _mm512_fmadd_ps(s0, _mm512_loadu_ps(r0 + 16 * c), even[c]);
      odd[c] = _mm512_fmadd_ps(s1, _mm512_loadu_ps(r1 + 16 * c), odd[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm512_storeu_ps(dst + 16 * c, _mm512_add_ps(even[c], odd[c]));
}

// dZ rows i0 .. i0+R-1 += S[i0 .. i0+R-1, :] Z, for a width of 16 KC; s is [R x n] row-major
// (the block's rows of the padded S).
template <int R, int KC>
inline void RowsTimesZ(const float* s, int n, const float* const* z, float* const* dst) {
  __m512 acc[R][KC];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < KC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int j = 0; j < n; ++j) {
    __m512 zj[KC];
    for (int c = 0; c < KC; ++c) zj[c] = _mm512_loadu_ps(z[j] + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 sij = _mm512_set1_ps(s[r * n + j]);
      for (int c = 0; c < KC; ++c) acc[r][c] = _mm512_fmadd_ps(sij, zj[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (dst[r] == nullptr) continue;
    for (int c = 0; c < KC; ++c) {
      _mm512_storeu_ps(dst[r] + 16 * c, _mm512_add_ps(_mm512_loadu_ps(dst[r] + 16 * c), acc[r][c]));
    }
  }
}

// Rows of dZ taken R at a time: 8 when the block is one or two registers wide, else 4 (R x KC
// sums and KC loads stay in the 32 registers).
constexpr int RowsPerBlock(int kc) { return kc <= 2 ? 8 : 4; }

// Columns are taken in blocks of 16 KC (at most 64); dim is a multiple of 16 KC. kWide: dim is
// runtime_dim, over one block at a time; otherwise dim is the block, known at compile time.
template <int KC, bool kWide>
void BackwardImpl(const float* bottom, const float* emb, const float* dout, int batch,
                  int num_tables, int runtime_dim, float* dbottom, float* demb, float* scratch) {
  constexpr int kBlock = 16 * KC;
  constexpr int R = RowsPerBlock(KC);
  const int dim = kWide ? runtime_dim : kBlock;
  const int n = num_tables + 1;
  const int nr = RoundUp(n, R);
  const int out_cols = dim + n * num_tables / 2;
  float* s = scratch;  // [nr x n], symmetric in its first n rows, zero diagonal and padding rows
  std::memset(s, 0, sizeof(float) * nr * n);
  const float* z[512];
  float* dst[512 + 8];
  const float* zc[512];
  float* dstc[512 + 8];
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
    for (int i = n; i < nr; ++i) dst[i] = nullptr;
    for (int c = 0; c < dim; c += kBlock) {
      const float* const* zb = z;
      float* const* dstb = dst;
      if (c > 0) {
        for (int i = 0; i < n; ++i) {
          zc[i] = z[i] + c;
          dstc[i] = dst[i] + c;
        }
        for (int i = n; i < nr; ++i) dstc[i] = nullptr;
        zb = zc;
        dstb = dstc;
      }
      for (int i0 = 0; i0 < n; i0 += R) RowsTimesZ<R, KC>(s + i0 * n, n, zb, dstb + i0);
    }
  }
}

}  // namespace

bool CpuHasAvx512F() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

size_t Avx512InteractionScratchFloats(int num_tables, int dim) {
  const int n = num_tables + 1;
  const size_t forward = static_cast<size_t>(dim) * RoundUp(n, 16) + n * (n - 1) / 2 + 16;
  const size_t backward = static_cast<size_t>(RoundUp(n, 8)) * n;
  return forward > backward ? forward : backward;
}

void Avx512InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                              int dim, float* out, float* scratch) {
  const int n = num_tables + 1;
  const int npad = RoundUp(n, 16);
  const int num_pairs = n * num_tables / 2;
  const int out_cols = dim + num_pairs;
  float* zt = scratch;                                     // [dim x npad]
  float* tri = scratch + static_cast<size_t>(dim) * npad;  // num_pairs + 16 (rows overrun by < 16)
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
    // Row i needs dots with z_0 .. z_{i-1}: ceil(i / 16) chunks. The chunks overrun into the next
    // row's slots, which that row then overwrites (rows go in increasing order).
    for (int i = 1; i < n; ++i) {
      const float* zi = e + (i - 1) * dim;
      float* dst = tri + i * (i - 1) / 2;
      int chunk = 0;
      const int chunks = (i + 15) / 16;
      for (; chunk + 4 <= chunks; chunk += 4)
        RowDots<4>(zi, zt + 16 * chunk, npad, dim, dst + 16 * chunk);
      switch (chunks - chunk) {
        case 3:
          RowDots<3>(zi, zt + 16 * chunk, npad, dim, dst + 16 * chunk);
          break;
        case 2:
          RowDots<2>(zi, zt + 16 * chunk, npad, dim, dst + 16 * chunk);
          break;
        case 1:
          RowDots<1>(zi, zt + 16 * chunk, npad, dim, dst + 16 * chunk);
          break;
        default:
          break;
      }
    }
    std::memcpy(o, x, sizeof(float) * dim);
    std::memcpy(o + dim, tri, sizeof(float) * num_pairs);
  }
}

void Avx512InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int dim, float* dbottom, float* demb,
                               float* scratch) {
  switch (dim <= 64 ? dim / 16 : 0) {
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
    default:  // wider: blocks of 64 columns
      return BackwardImpl<4, true>(bottom, emb, dout, batch, num_tables, dim, dbottom, demb,
                                   scratch);
  }
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
