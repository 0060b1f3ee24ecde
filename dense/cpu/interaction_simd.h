// The dot interaction's SIMD kernels, written once over a vector type and compiled in each ISA's
// own translation unit (interaction_avx2.cc with -mavx2 -mfma, interaction_avx512.cc with
// -mavx512f). Include it only there: everything here has internal linkage (an anonymous
// namespace), so no wide instruction can reach other files through a merged inline definition
// (tests/isa_objects_check.sh checks the objects).
//
// A vector type V provides: kWidth floats a register; Reg; Zero(), Set1(x), Load(p), Store(p, r),
// Fmadd(a, b, c) = a * b + c, Add(a, b); and RowsPerBlock(kc), the rows of dZ the backward takes
// at a time for kc registers a row (its sums and one row of loads must fit the register file).
#pragma once

#include <cstddef>
#include <cstring>

namespace dlrm::dense::cpu {
namespace {

inline int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// Dots of z_i with z_0 .. z_{W NC - 1} (columns of zt, the [dim x npad] transpose of Z), stored to
// dst[0, W NC). Two accumulators per chunk (even and odd d) to halve the FMA dependency chains.
template <class V, int NC>
inline void RowDots(const float* zi, const float* zt, int npad, int dim, float* dst) {
  typename V::Reg even[NC], odd[NC];
  for (int c = 0; c < NC; ++c) {
    even[c] = V::Zero();
    odd[c] = V::Zero();
  }
  for (int d = 0; d < dim; d += 2) {
    const typename V::Reg s0 = V::Set1(zi[d]);
    const typename V::Reg s1 = V::Set1(zi[d + 1]);
    const float* r0 = zt + static_cast<size_t>(d) * npad;
    const float* r1 = r0 + npad;
    for (int c = 0; c < NC; ++c) {
      even[c] = V::Fmadd(s0, V::Load(r0 + V::kWidth * c), even[c]);
      odd[c] = V::Fmadd(s1, V::Load(r1 + V::kWidth * c), odd[c]);
    }
  }
  for (int c = 0; c < NC; ++c) V::Store(dst + V::kWidth * c, V::Add(even[c], odd[c]));
}

// dZ rows i0 .. i0+R-1 += S[i0 .. i0+R-1, :] Z, for a width of W KC; s is the block's [R x n]
// rows of the padded S, row-major.
template <class V, int R, int KC>
inline void RowsTimesZ(const float* s, int n, const float* const* z, float* const* dst) {
  typename V::Reg acc[R][KC];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < KC; ++c) acc[r][c] = V::Zero();
  }
  for (int j = 0; j < n; ++j) {
    typename V::Reg zj[KC];
    for (int c = 0; c < KC; ++c) zj[c] = V::Load(z[j] + V::kWidth * c);
    for (int r = 0; r < R; ++r) {
      const typename V::Reg sij = V::Set1(s[r * n + j]);
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
  constexpr int kBlock = V::kWidth * KC;
  constexpr int R = V::RowsPerBlock(KC);
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
      for (int i0 = 0; i0 < n; i0 += R) RowsTimesZ<V, R, KC>(s + i0 * n, n, zb, dstb + i0);
    }
  }
}

// Floats of scratch the kernels need: the forward's transpose and triangle (rows overrun by less
// than a register), the backward's padded S.
template <class V>
size_t InteractionScratchFloatsFor(int num_tables, int dim) {
  const int n = num_tables + 1;
  const size_t forward =
      static_cast<size_t>(dim) * RoundUp(n, V::kWidth) + n * (n - 1) / 2 + V::kWidth;
  const size_t backward = static_cast<size_t>(RoundUp(n, V::RowsPerBlock(1))) * n;
  return forward > backward ? forward : backward;
}

template <class V>
void InteractionForwardFor(const float* bottom, const float* emb, int batch, int num_tables,
                           int dim, float* out, float* scratch) {
  constexpr int W = V::kWidth;
  const int n = num_tables + 1;
  const int npad = RoundUp(n, W);
  const int num_pairs = n * num_tables / 2;
  const int out_cols = dim + num_pairs;
  float* zt = scratch;                                     // [dim x npad]
  float* tri = scratch + static_cast<size_t>(dim) * npad;  // num_pairs + W
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
    // Row i needs dots with z_0 .. z_{i-1}: ceil(i / W) chunks. The chunks overrun into the next
    // row's slots, which that row then overwrites (rows go in increasing order).
    for (int i = 1; i < n; ++i) {
      const float* zi = e + (i - 1) * dim;
      float* dst = tri + i * (i - 1) / 2;
      int chunk = 0;
      const int chunks = (i + W - 1) / W;
      for (; chunk + 4 <= chunks; chunk += 4)
        RowDots<V, 4>(zi, zt + W * chunk, npad, dim, dst + W * chunk);
      switch (chunks - chunk) {
        case 3:
          RowDots<V, 3>(zi, zt + W * chunk, npad, dim, dst + W * chunk);
          break;
        case 2:
          RowDots<V, 2>(zi, zt + W * chunk, npad, dim, dst + W * chunk);
          break;
        case 1:
          RowDots<V, 1>(zi, zt + W * chunk, npad, dim, dst + W * chunk);
          break;
        default:
          break;
      }
    }
    std::memcpy(o, x, sizeof(float) * dim);
    std::memcpy(o + dim, tri, sizeof(float) * num_pairs);
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
