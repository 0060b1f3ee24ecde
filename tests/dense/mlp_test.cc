// Linear and Mlp: forward against a host reference, backward against central finite differences
// (tolerances stated per test), parameter layout in the shared buffer, initialisation.
#include "dense/mlp.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dense/parameter_buffer.h"
#include "dense/tensor.h"
#include "gtest/gtest.h"
#include "tests/dense/backend_test_util.h"
#include "tests/dense/finite_difference.h"

namespace dlrm::dense::testing {
namespace {

template <typename Factory>
using MlpTest = BackendTest<Factory>;
TYPED_TEST_SUITE(MlpTest, BackendFactories, BackendFactoryNames);

TYPED_TEST(MlpTest, LinearForwardIsXWTransposePlusBias) {
  const int in = 4, out = 3, batch = 2;
  ParameterBuffer buffer(this->backend(), Linear::NumParams(in, out));
  std::mt19937_64 rng(1);
  const std::vector<float> params = RandomVector(buffer.size(), rng);
  buffer.ParamsFromHost(params);
  Linear linear(this->backend(), in, out, /*relu=*/false, batch, buffer.Slice(0, buffer.size()));
  const std::vector<float> x = RandomVector(batch * in, rng);
  Tensor dx = this->Upload(x, batch, in);
  const std::vector<float> y = this->Download(linear.Forward(dx.data(), batch), batch * out);
  for (int b = 0; b < batch; ++b) {
    for (int o = 0; o < out; ++o) {
      double expected = params[out * in + o];  // bias after W [out x in]
      for (int i = 0; i < in; ++i)
        expected += static_cast<double>(x[b * in + i]) * params[o * in + i];
      EXPECT_NEAR(y[b * out + o], expected, 1e-5);
    }
  }
}

// J = sum(Mlp(x) * r). Checked: every input and (up to 60 sampled) parameters per MLP, h = 1e-2,
// tolerance 2e-3 + 1e-3 |analytic| (float forward passes; ReLU flips skipped, at most a few).
void CheckMlpGradients(Backend* backend, const MlpOptions& options, int batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t num_params = Mlp::NumParams(options);
  ParameterBuffer buffer(backend, num_params);
  auto mlp_or = Mlp::Create(backend, options, batch, buffer.Slice(0, num_params));
  ASSERT_TRUE(mlp_or.ok()) << mlp_or.status();
  Mlp& mlp = **mlp_or;
  mlp.Initialize(rng);
  const int out_width = mlp.output_width();
  const std::vector<float> r = RandomVector(static_cast<size_t>(batch) * out_width, rng);
  Tensor x(backend, batch, options.input_width);
  x.CopyFromHost(RandomVector(x.size(), rng));
  Tensor dy(backend, batch, out_width);
  Tensor dx(backend, batch, options.input_width);

  mlp.Forward(x.data(), batch);
  dy.CopyFromHost(r);
  buffer.ZeroGrads();
  mlp.Backward(dy.data(), batch, dx.data());
  const std::vector<float> grads = buffer.GradsToHost(), dx_host = dx.ToHost();
  double grad_norm = 0.0;
  for (float g : grads) grad_norm += std::fabs(g);
  ASSERT_GT(grad_norm, 0.0);

  auto objective = [&]() {
    Evaluation e;
    const float* y = mlp.Forward(x.data(), batch);
    std::vector<float> host(static_cast<size_t>(batch) * out_width);
    backend->CopyToHost(y, host.data(), host.size());
    backend->Synchronize();
    for (size_t i = 0; i < host.size(); ++i) e.value += static_cast<double>(host[i]) * r[i];
    for (int l = 0; l < mlp.num_layers(); ++l) {
      if (!mlp.layer(l).relu()) continue;
      std::vector<float> act(static_cast<size_t>(batch) * mlp.layer(l).out());
      backend->CopyToHost(mlp.layer(l).output(), act.data(), act.size());
      backend->Synchronize();
      for (float a : act) e.relu_pattern.push_back(a > 0.0f);
    }
    return e;
  };
  FiniteDifferenceResult in_result =
      CheckFiniteDifferences(backend, x.data(), SampleIndices(x.size(), 1000), dx_host, 1e-2f, 2e-3,
                             1e-3, objective, "dx");
  FiniteDifferenceResult p_result =
      CheckFiniteDifferences(backend, buffer.params(), SampleIndices(num_params, 60), grads, 1e-2f,
                             2e-3, 1e-3, objective, "dparams");
  EXPECT_LE(in_result.skipped + p_result.skipped, (in_result.checked + p_result.checked) / 5);
  EXPECT_GE(p_result.checked, static_cast<int>(std::min<size_t>(num_params, 60)) * 4 / 5);
}

TYPED_TEST(MlpTest, LinearBackwardMatchesFiniteDifferences) {
  CheckMlpGradients(this->backend(), {.input_width = 5, .widths = {4}, .relu_on_last = false}, 3,
                    11);
}

TYPED_TEST(MlpTest, LinearReluBackwardMatchesFiniteDifferences) {
  CheckMlpGradients(this->backend(), {.input_width = 5, .widths = {6}, .relu_on_last = true}, 3,
                    12);
}

TYPED_TEST(MlpTest, MlpBackwardMatchesFiniteDifferences) {
  CheckMlpGradients(this->backend(), {.input_width = 6, .widths = {8, 7, 3}, .relu_on_last = false},
                    4, 13);
  CheckMlpGradients(this->backend(), {.input_width = 3, .widths = {9, 4}, .relu_on_last = true}, 5,
                    14);
}

TYPED_TEST(MlpTest, BackwardOverwritesGradientsAndSkipsInputWhenNull) {
  const MlpOptions options{.input_width = 3, .widths = {4, 2}, .relu_on_last = false};
  ParameterBuffer buffer(this->backend(), Mlp::NumParams(options));
  auto mlp = Mlp::Create(this->backend(), options, 8, buffer.Slice(0, buffer.size()));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::mt19937_64 rng(3);
  (*mlp)->Initialize(rng);
  Tensor x = this->Upload(RandomVector(8 * 3, rng), 8, 3);
  const std::vector<float> dy_host = RandomVector(8 * 2, rng);
  Tensor dy = this->Upload(dy_host, 8, 2);
  (*mlp)->Forward(x.data(), 8);
  (*mlp)->Backward(dy.data(), 8, nullptr);
  const std::vector<float> first = buffer.GradsToHost();
  dy.CopyFromHost(dy_host);
  (*mlp)->Forward(x.data(), 8);
  (*mlp)->Backward(dy.data(), 8, nullptr);
  // Same batch, same gradients: nothing accumulated (accumulating would double them).
  const std::vector<float> second = buffer.GradsToHost();
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_NEAR(second[i], first[i], 1e-6 + 1e-5 * std::fabs(first[i])) << i;
  }
}

TYPED_TEST(MlpTest, LayersTakeConsecutiveSlicesOfOneBuffer) {
  const MlpOptions options{.input_width = 13, .widths = {512, 256, 64, 16}, .relu_on_last = true};
  EXPECT_EQ(Mlp::NumParams(options),
            13u * 512 + 512 + 512 * 256 + 256 + 256 * 64 + 64 + 64 * 16 + 16);
  ParameterBuffer buffer(this->backend(), Mlp::NumParams(options) + 10);
  auto mlp = Mlp::Create(this->backend(), options, 4, buffer.Slice(10, Mlp::NumParams(options)));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ((*mlp)->layer(0).weights(), buffer.params() + 10);
  EXPECT_EQ((*mlp)->layer(0).bias(), buffer.params() + 10 + 13 * 512);
  EXPECT_EQ((*mlp)->layer(1).weights(), buffer.params() + 10 + 13 * 512 + 512);
  EXPECT_EQ((*mlp)->layer(3).bias_grads(), buffer.grads() + buffer.size() - 16);
}

TYPED_TEST(MlpTest, InitialisationIsSeededWithDlrmScales) {
  const MlpOptions options{.input_width = 300, .widths = {500}, .relu_on_last = true};
  const size_t n = Mlp::NumParams(options);
  auto init = [&](uint64_t seed) {
    ParameterBuffer buffer(this->backend(), n);
    auto mlp = Mlp::Create(this->backend(), options, 1, buffer.Slice(0, n));
    EXPECT_TRUE(mlp.ok());
    std::mt19937_64 rng(seed);
    (*mlp)->Initialize(rng);
    return buffer.ParamsToHost();
  };
  const std::vector<float> a = init(7), b = init(7), c = init(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double w_sq = 0.0, b_sq = 0.0;
  for (size_t i = 0; i < 300 * 500; ++i) w_sq += a[i] * a[i];
  for (size_t i = 300 * 500; i < n; ++i) b_sq += a[i] * a[i];
  EXPECT_NEAR(std::sqrt(w_sq / (300 * 500)), std::sqrt(2.0 / 800.0), 0.002);
  EXPECT_NEAR(std::sqrt(b_sq / 500), std::sqrt(1.0 / 500.0), 0.006);
}

TEST(MlpCreateTest, RejectsBadShapesWithClearErrors) {
  auto backend = CpuBackendFactory::Create();
  ASSERT_TRUE(backend.ok());
  ParameterBuffer buffer(backend->get(), 100);
  auto empty = Mlp::Create(backend->get(), {.input_width = 3, .widths = {}}, 4, buffer.Slice(0, 0));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto zero =
      Mlp::Create(backend->get(), {.input_width = 3, .widths = {4, 0}}, 4, buffer.Slice(0, 16));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("layer 1 width must be positive, got 0"),
            std::string::npos)
      << zero.status();
  auto wrong_slice =
      Mlp::Create(backend->get(), {.input_width = 3, .widths = {4}}, 4, buffer.Slice(0, 15));
  EXPECT_NE(wrong_slice.status().message().find("15"), std::string::npos) << wrong_slice.status();
}

}  // namespace
}  // namespace dlrm::dense::testing
