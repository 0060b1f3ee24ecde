// The dot interaction's SIMD kernels, written once over a vector type and compiled in each ISA's
// own translation unit (interaction_avx2.cc with -mavx2 -mfma, interaction_avx512.cc with
// -mavx512f). Include it only there: everything here has internal linkage (an anonymous
// namespace), so no wide instruction can reach other files through a merged inline definition
// (tests/isa_objects_check.sh checks the objects).
//
// A vector type V provides: kWidth floats a register; Reg; Zero(), Set1(x), Load(p), Store(p, r),
// Fmadd(a, b, c) = a * b + c, Add(a, b); LoadFirst(p, k) and StoreFirst(p, r, k), which touch
// only the first k (0 < k <= kWidth) floats at p (the other lanes load as zeros); Transpose(r),
// which transposes kWidth registers in place (lane k of r[j] becomes lane j of r[k]); and
// RowsPerBlock(kc), the rows of dZ the backward takes at a time for kc registers a row (its sums
// and one row of loads must fit the register file; kWidth is a multiple of it).
#pragma once

#include <cstddef>
#include <cstring>

namespace dlrm::dense::cpu {
namespace {

inline int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// Dots of z_i with z_0 .. z_{W NC - 1} (columns of zt, the [dim x npad] transpose of Z), stored to
// dst[0, W (NC - 1) + last): the last chunk stores its first `last` floats only. kChains
// accumulators per chunk (d modulo kChains) shorten the FMA dependency chains; dim is a multiple of
// kChains.
template <class V, int NC>
inline void RowDots(const float* zi, const float* zt, int npad, int dim, float* dst, int last) {
  constexpr int kChains = NC <= 2 ? 4 : 2;
  typename V::Reg acc[kChains][NC];
  for (int k = 0; k < kChains; ++k) {
    for (int c = 0; c < NC; ++c) acc[k][c] = V::Zero();
  }
  for (int d = 0; d < dim; d += kChains) {
    for (int k = 0; k < kChains; ++k) {
      const typename V::Reg sk = V::Set1(zi[d + k]);
      const float* row = zt + static_cast<size_t>(d + k) * npad;
      for (int c = 0; c < NC; ++c)
        acc[k][c] = V::Fmadd(sk, V::Load(row + V::kWidth * c), acc[k][c]);
    }
  }
  typename V::Reg sum[NC];
  for (int c = 0; c < NC; ++c) {
    sum[c] = V::Add(acc[0][c], acc[1][c]);
    for (int k = 2; k < kChains; k += 2) sum[c] = V::Add(sum[c], V::Add(acc[k][c], acc[k + 1][c]));
  }
  for (int c = 0; c + 1 < NC; ++c) V::Store(dst + V::kWidth * c, sum[c]);
  float* tail_dst = dst + V::kWidth * (NC - 1);
  if (last == V::kWidth) {
    V::Store(tail_dst, sum[NC - 1]);
  } else {
    V::StoreFirst(tail_dst, sum[NC - 1], last);
  }
}

// dZ rows i0 .. i0+R-1 += S[i0 .. i0+R-1, :n] Z, for a width of W KC; s is the block's R rows of
// the padded S, row-major with ld floats a row.
template <class V, int R, int KC>
inline void RowsTimesZ(const float* s, int n, int ld, const float* const* z, float* const* dst) {
  typename V::Reg acc[R][KC];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < KC; ++c) acc[r][c] = V::Zero();
  }
  for (int j = 0; j < n; ++j) {
    typename V::Reg zj[KC];
    for (int c = 0; c < KC; ++c) zj[c] = V::Load(z[j] + V::kWidth * c);
    for (int r = 0; r < R; ++r) {
      const typename V::Reg sij = V::Set1(s[r * ld + j]);
      for (int c = 0; c < KC; ++c) acc[r][c] = V::Fmadd(sij, zj[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (dst[r] == nullptr) continue;
    for (int c = 0; c < KC; ++c) {
      float* p = dst[r] + V::kWidth * c;
      V::Store(p, V::Add(V::Load(p), acc[r][c]));
    }
  }
}

// Columns are taken in blocks of W KC; dim is a multiple of W KC. kWide: dim is runtime_dim,
// over one block at a time; otherwise dim is the block, known at compile time (the per-sample
// copies and clears of a few dozen bytes are then inlined, not library calls).
template <class V, int KC, bool kWide>
void InteractionBackwardBlocks(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int runtime_dim, float* dbottom, float* demb,
                               float* scratch) {
  constexpr int W = V::kWidth;
  constexpr int kBlock = W * KC;
  constexpr int R = V::RowsPerBlock(KC);
  static_assert(W % R == 0, "the padded S must cover the row blocks");
  const int dim = kWide ? runtime_dim : kBlock;
  const int n = num_tables + 1;
  const int npad = RoundUp(n, W);
  const int out_cols = dim + n * num_tables / 2;
  float* s = scratch;  // [npad x npad]: S, zero on the diagonal and past n
  const float* z[512];
  float* dst[512 + 8];
  const float* zc[512];
  float* dstc[512 + 8];
  for (int b = 0; b < batch; ++b) {
    const float* x = bottom + static_cast<size_t>(b) * dim;
    const float* e = emb + static_cast<size_t>(b) * num_tables * dim;
    const float* g = dout + static_cast<size_t>(b) * out_cols;
    const float* gp = g + dim;
    // S = L + L^T, with L the strictly lower triangle of the pair gradients (row i of L is
    // gp[i (i - 1) / 2, + i)), a W x W block at a time: each block of L is loaded once, stored
    // where it is and, transposed, where its mirror is.
    for (int i0 = 0; i0 < npad; i0 += W) {
      for (int j0 = 0; j0 <= i0; j0 += W) {
        typename V::Reg r[W];
#pragma GCC unroll 16
        for (int k = 0; k < W; ++k) {
          const int i = i0 + k;
          const int count = i < n ? i - j0 : 0;
          const float* row = gp + i * (i - 1) / 2 + j0;
          r[k] = count >= W ? V::Load(row) : count > 0 ? V::LoadFirst(row, count) : V::Zero();
        }
        float* lower = s + static_cast<size_t>(i0) * npad + j0;
        float* upper = s + static_cast<size_t>(j0) * npad + i0;
        if (j0 == i0) {  // a block on the diagonal is its own mirror: L + L^T
#pragma GCC unroll 16
          for (int k = 0; k < W; ++k) V::Store(lower + k * npad, r[k]);
          V::Transpose(r);
#pragma GCC unroll 16
          for (int k = 0; k < W; ++k) {
            V::Store(lower + k * npad, V::Add(V::Load(lower + k * npad), r[k]));
          }
        } else {
#pragma GCC unroll 16
          for (int k = 0; k < W; ++k) V::Store(lower + k * npad, r[k]);
          V::Transpose(r);
#pragma GCC unroll 16
          for (int k = 0; k < W; ++k) V::Store(upper + k * npad, r[k]);
        }
      }
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
    for (int i = n; i < RoundUp(n, R); ++i) dst[i] = nullptr;
    for (int c = 0; c < dim; c += kBlock) {
      const float* const* zb = z;
      float* const* dstb = dst;
      if (c > 0) {
        for (int i = 0; i < n; ++i) {
          zc[i] = z[i] + c;
          dstc[i] = dst[i] + c;
        }
        for (int i = n; i < RoundUp(n, R); ++i) dstc[i] = nullptr;
        zb = zc;
        dstb = dstc;
      }
      for (int i0 = 0; i0 < n; i0 += R) {
        RowsTimesZ<V, R, KC>(s + static_cast<size_t>(i0) * npad, n, npad, zb, dstb + i0);
      }
    }
  }
}

// Floats of scratch the kernels need: the forward's transpose of Z, the backward's padded S.
template <class V>
size_t InteractionScratchFloatsFor(int num_tables, int dim) {
  const size_t npad = static_cast<size_t>(RoundUp(num_tables + 1, V::kWidth));
  const size_t forward = static_cast<size_t>(dim) * npad;
  const size_t backward = npad * npad;
  return forward > backward ? forward : backward;
}

template <class V>
void InteractionForwardFor(const float* bottom, const float* emb, int batch, int num_tables,
                           int dim, float* out, float* scratch) {
  constexpr int W = V::kWidth;
  const int n = num_tables + 1;
  const int npad = RoundUp(n, W);
  const int out_cols = dim + n * num_tables / 2;
  float* zt = scratch;  // [dim x npad]: Z transposed, zero past column n
  for (int b = 0; b < batch; ++b) {
    const float* x = bottom + static_cast<size_t>(b) * dim;
    const float* e = emb + static_cast<size_t>(b) * num_tables * dim;
    float* o = out + static_cast<size_t>(b) * out_cols;
    // zt, a W x W block at a time: W rows of Z (z_0 = x, z_t = table t - 1's row, zeros past n)
    // transposed in registers.
    for (int j0 = 0; j0 < npad; j0 += W) {
      for (int d0 = 0; d0 < dim; d0 += W) {
        typename V::Reg r[W];
#pragma GCC unroll 16
        for (int k = 0; k < W; ++k) {
          const int j = j0 + k;
          r[k] = j == 0  ? V::Load(x + d0)
                 : j < n ? V::Load(e + static_cast<size_t>(j - 1) * dim + d0)
                         : V::Zero();
        }
        V::Transpose(r);
#pragma GCC unroll 16
        for (int k = 0; k < W; ++k) V::Store(zt + static_cast<size_t>(d0 + k) * npad + j0, r[k]);
      }
    }
    for (int d = 0; d < dim; d += W) V::Store(o + d, V::Load(x + d));
    // Row i of the triangle, the dots of z_i with z_0 .. z_{i-1}: ceil(i / W) chunks, the last
    // one stored only as far as the row goes.
    float* pairs = o + dim;
    for (int i = 1; i < n; ++i) {
      const float* zi = e + static_cast<size_t>(i - 1) * dim;
      float* dst = pairs + i * (i - 1) / 2;
      const int chunks = (i + W - 1) / W;
      const int last = i - W * (chunks - 1);
      int chunk = 0;
      for (; chunk + 4 < chunks; chunk += 4)
        RowDots<V, 4>(zi, zt + W * chunk, npad, dim, dst + W * chunk, W);
      switch (chunks - chunk) {
        case 4:
          RowDots<V, 4>(zi, zt + W * chunk, npad, dim, dst + W * chunk, last);
          break;
        case 3:
          RowDots<V, 3>(zi, zt + W * chunk, npad, dim, dst + W * chunk, last);
          break;
        case 2:
          RowDots<V, 2>(zi, zt + W * chunk, npad, dim, dst + W * chunk, last);
          break;
        default:
          RowDots<V, 1>(zi, zt + W * chunk, npad, dim, dst + W * chunk, last);
          break;
      }
    }
  }
}

// Widths of up to 4 registers run with the width known at compile time; wider ones in blocks of
// 4 registers.
template <class V>
void InteractionBackwardFor(const float* bottom, const float* emb, const float* dout, int batch,
                            int num_tables, int dim, float* dbottom, float* demb, float* scratch) {
  switch (dim <= 4 * V::kWidth ? dim / V::kWidth : 0) {
    case 1:
      return InteractionBackwardBlocks<V, 1, false>(bottom, emb, dout, batch, num_tables, dim,
                                                    dbottom, demb, scratch);
    case 2:
      return InteractionBackwardBlocks<V, 2, false>(bottom, emb, dout, batch, num_tables, dim,
                                                    dbottom, demb, scratch);
    case 3:
      return InteractionBackwardBlocks<V, 3, false>(bottom, emb, dout, batch, num_tables, dim,
                                                    dbottom, demb, scratch);
    case 4:
      return InteractionBackwardBlocks<V, 4, false>(bottom, emb, dout, batch, num_tables, dim,
                                                    dbottom, demb, scratch);
    default:  // wider: blocks of 4 registers
      return InteractionBackwardBlocks<V, 4, true>(bottom, emb, dout, batch, num_tables, dim,
                                                   dbottom, demb, scratch);
  }
}

}  // namespace
}  // namespace dlrm::dense::cpu
