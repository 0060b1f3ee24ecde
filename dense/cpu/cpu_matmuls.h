// CpuBackend::Matmuls, private to the CPU backend (cpu_backend.cc makes it, cpu_matmuls.cc runs
// it): the oneDNN matmul primitives of the fused linear forward and of math_mode bf16.
#pragma once

#include <cstdint>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dense/cpu/cpu_backend.h"

namespace dlrm::dense {

// oneDNN matmul primitives, made once per shape (a training step repeats a few dozen shapes): the
// linear layers' forward GEMMs with their bias and ReLU fused, and with math_mode bf16 every GEMM,
// on inputs rounded to bf16.
struct CpuBackend::Matmuls {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // (batch, in, out, bias, relu)
  std::map<std::tuple<int, int, int, bool, bool>, dnnl::matmul> linear;
  // (batch, in, out): whether the plain matmul was measured faster than the GEMM (CpuLinearForward)
  std::map<std::tuple<int, int, int>, bool> plain_matmul_is_faster;
  // (trans_a, trans_b, m, n, k, alpha, beta, bias, relu)
  std::map<std::tuple<bool, bool, int, int, int, float, float, bool, bool>, dnnl::matmul> bf16;
  std::vector<uint16_t> a, b;

  // A matmul c = act(alpha a b + beta c + bias): the bias (a [1 x n] row) when with_bias, the
  // ReLU when relu, beta's sum post-op when beta != 0.
  dnnl::matmul Make(const dnnl::memory::desc& a_md, const dnnl::memory::desc& b_md,
                    const dnnl::memory::desc& c_md, bool with_bias, bool relu, float alpha = 1.0f,
                    float beta = 0.0f) const {
    const int64_t n = c_md.dims()[1];
    const dnnl::memory::desc bias_md({1, n}, dnnl::memory::data_type::f32,
                                     dnnl::memory::dims{n, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    dnnl::post_ops ops;
    if (beta != 0.0f) ops.append_sum(beta);
    if (relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
    const dnnl::matmul::desc desc = with_bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md)
                                              : dnnl::matmul::desc(a_md, b_md, c_md);
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine));
  }
  // Runs `m` (made by Make) on the operands, with the bias when not null, and waits.
  void Run(const dnnl::matmul& m, const dnnl::memory& a, const dnnl::memory& b,
           const dnnl::memory& c, const float* bias) {
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (bias != nullptr) {
      const int64_t n = c.get_desc().dims()[1];
      const dnnl::memory::desc bias_md({1, n}, dnnl::memory::data_type::f32,
                                       dnnl::memory::dims{n, 1});
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine, const_cast<float*>(bias)));
    }
    m.execute(stream, args);
    stream.wait();
  }
};

}  // namespace dlrm::dense
