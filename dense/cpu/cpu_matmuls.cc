// The CPU backend's oneDNN matmuls (CpuBackend::Matmuls): the GEMMs of math_mode bf16 and the
// linear layers' forward with the bias and ReLU fused, and the choice between that and the GEMM
// then the bias pass (CpuLinearForward). The rest of the backend is in cpu_backend.cc.
#include "dense/cpu/cpu_matmuls.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "common/logging.h"
#include "dense/cpu/cpu_backend.h"

namespace dlrm::dense {
namespace {

// bf16 of each float, rounded to nearest even (the upper 16 bits of the rounded float; NaN inputs
// are not expected in a GEMM's operands).
void RoundToBf16(const float* __restrict src, uint16_t* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof(u));
    u += 0x7FFFu + ((u >> 16) & 1u);
    dst[i] = static_cast<uint16_t>(u >> 16);
  }
}

}  // namespace

void CpuBackend::GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, const float* b, float beta, float* c, const float* bias,
                          bool relu) {
  using dnnl::memory;
  Matmuls& g = *matmuls_;
  const bool with_bias = bias != nullptr;
  const bool with_relu = with_bias && relu;
  const auto key = std::make_tuple(trans_a, trans_b, m, n, k, alpha, beta, with_bias, with_relu);
  // Row-major operands: A is [m x k] (stored [k x m] when transposed), B [k x n] (stored [n x k]).
  const memory::desc a_md({m, k}, memory::data_type::bf16,
                          trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc b_md({k, n}, memory::data_type::bf16,
                          trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
  auto it = g.bf16.find(key);
  if (it == g.bf16.end()) {
    it = g.bf16.emplace(key, g.Make(a_md, b_md, c_md, with_bias, with_relu, alpha, beta)).first;
  }
  const int64_t a_count = static_cast<int64_t>(m) * k;
  const int64_t b_count = static_cast<int64_t>(k) * n;
  if (g.a.size() < static_cast<size_t>(a_count)) g.a.resize(a_count);
  if (g.b.size() < static_cast<size_t>(b_count)) g.b.resize(b_count);
  uint16_t* a16 = g.a.data();
  uint16_t* b16 = g.b.data();
  ForParts(a_count, kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    RoundToBf16(a + first, a16 + first, last - first);
  });
  ForParts(b_count, kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    RoundToBf16(b + first, b16 + first, last - first);
  });
  UseOmpThreads();
  g.Run(it->second, memory(a_md, g.engine, a16), memory(b_md, g.engine, b16),
        memory(c_md, g.engine, c), bias);
}

void CpuBackend::LinearForward(const float* x, const float* w, const float* bias, int batch, int in,
                               int out, bool relu, float* y) {
  bool fused = false;
  if (matmuls_ != nullptr && batch > 0) {
    switch (linear_forward_) {
      case CpuLinearForward::kFusedMatmul:
        fused = true;
        break;
      case CpuLinearForward::kGemmThenBias:
        break;
      case CpuLinearForward::kAuto: {
        if (bias != nullptr) {  // training: a rule of the shape, so every process agrees
          fused = out >= kMinFusedOutputs && in <= kMaxFusedInputs;
          break;
        }
        // The GEMM-only bound (no bias) changes no model: it takes the plain GEMM measured the
        // faster on its first call with each shape.
        auto& known = matmuls_->plain_matmul_is_faster;
        const auto shape = std::make_tuple(batch, in, out);
        auto it = known.find(shape);
        if (it == known.end()) {
          it = known.emplace(shape, PlainMatmulIsFaster(x, w, batch, in, out, y)).first;
        }
        fused = it->second;
        break;
      }
    }
  }
  if (fused) {
    FusedLinearForward(x, w, bias, batch, in, out, relu, y);
  } else {
    Backend::LinearForward(x, w, bias, batch, in, out, relu, y);
  }
}

bool CpuBackend::PlainMatmulIsFaster(const float* x, const float* w, int batch, int in, int out,
                                     float* y) {
  using Clock = std::chrono::steady_clock;
  // A first call of each (the matmul's kernel is generated then), then three alternating timed
  // calls of each; the least times are compared.
  Backend::LinearForward(x, w, nullptr, batch, in, out, false, y);
  FusedLinearForward(x, w, nullptr, batch, in, out, false, y);
  double gemm = 1e30, matmul = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    Backend::LinearForward(x, w, nullptr, batch, in, out, false, y);
    auto t1 = Clock::now();
    FusedLinearForward(x, w, nullptr, batch, in, out, false, y);
    auto t2 = Clock::now();
    gemm = std::min(gemm, std::chrono::duration<double>(t1 - t0).count());
    matmul = std::min(matmul, std::chrono::duration<double>(t2 - t1).count());
  }
  const char* name = bf16_ ? "the bf16 GEMM" : "dnnl_sgemm";
  DLRM_LOG(DEBUG) << "GEMM-only bound, " << batch << " x " << in << " -> " << out
                  << ": matmul primitive " << matmul * 1e3 << " ms, " << name << " " << gemm * 1e3
                  << " ms; keeping the " << (matmul < gemm ? "matmul primitive" : name);
  return matmul < gemm;
}

void CpuBackend::FusedLinearForward(const float* x, const float* w, const float* bias, int batch,
                                    int in, int out, bool relu, float* y) {
  if (bf16_) {
    GemmBf16(/*trans_a=*/false, /*trans_b=*/true, batch, out, in, 1.0f, x, w, 0.0f, y, bias, relu);
    return;
  }
  using dnnl::memory;
  Matmuls& g = *matmuls_;
  const bool with_bias = bias != nullptr;
  const bool with_relu = with_bias && relu;
  // x [batch x in] row-major; w is stored [out x in], the [in x out] weights transposed.
  const memory::desc x_md({batch, in}, memory::data_type::f32, memory::dims{in, 1});
  const memory::desc w_md({in, out}, memory::data_type::f32, memory::dims{1, in});
  const memory::desc y_md({batch, out}, memory::data_type::f32, memory::dims{out, 1});
  const auto key = std::make_tuple(batch, in, out, with_bias, with_relu);
  auto it = g.linear.find(key);
  if (it == g.linear.end()) {
    it = g.linear.emplace(key, g.Make(x_md, w_md, y_md, with_bias, with_relu)).first;
  }
  UseOmpThreads();
  g.Run(it->second, memory(x_md, g.engine, const_cast<float*>(x)),
        memory(w_md, g.engine, const_cast<float*>(w)), memory(y_md, g.engine, y), bias);
}

}  // namespace dlrm::dense
