// The Backend operations against slow host references (double precision) and, for the
// backward passes, against central finite differences. Runs on every backend in
// BackendFactories.
#include "dense/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dense/cpu/cpu_backend.h"
#include "dense/optimizer_options.h"
#include "dense/tensor.h"
#include "gtest/gtest.h"
#include "tests/dense/backend_test_util.h"

namespace dlrm::dense::testing {
namespace {

template <typename Factory>
using BackendOpsTest = BackendTest<Factory>;
TYPED_TEST_SUITE(BackendOpsTest, BackendFactories, BackendFactoryNames);

// c = alpha op(a) op(b) + beta c, all four transpose combinations, against a triple loop.
TYPED_TEST(BackendOpsTest, GemmMatchesNaiveForAllTransposes) {
  std::mt19937_64 rng(1);
  const int m = 7, n = 5, k = 9;
  const float alpha = 0.75f, beta = -0.5f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const std::vector<float> a = RandomVector(m * k, rng);
      const std::vector<float> b = RandomVector(k * n, rng);
      const std::vector<float> c0 = RandomVector(m * n, rng);
      Tensor da = this->Upload(a), db = this->Upload(b), dc = this->Upload(c0);
      this->backend()->Gemm(ta, tb, m, n, k, alpha, da.data(), db.data(), beta, dc.data());
      const std::vector<float> c = dc.ToHost();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double expected = beta * static_cast<double>(c0[i * n + j]);
          for (int p = 0; p < k; ++p) {
            const double av = ta ? a[p * m + i] : a[i * k + p];  // a stored k x m when ta
            const double bv = tb ? b[j * k + p] : b[p * n + j];  // b stored n x k when tb
            expected += alpha * av * bv;
          }
          EXPECT_NEAR(c[i * n + j], expected, 1e-5) << "c[" << i << "][" << j << "]";
        }
      }
    }
  }
}

// A linear layer's forward, y = act(x w^T + b) (fused into the GEMM where the backend can), and
// its GEMM alone (no bias), against a double-precision loop; shapes wider than a register block
// and a batch that is not a multiple of one. A second batch size reuses nothing of the first.
TYPED_TEST(BackendOpsTest, LinearForwardMatchesTheGemmThenTheBiasAndReLU) {
  std::mt19937_64 rng(21);
  const int in = 37, out = 70;
  const std::vector<float> w = RandomVector(out * in, rng);
  const std::vector<float> bias = RandomVector(out, rng);
  Tensor dw = this->Upload(w), dbias = this->Upload(bias);
  for (int batch : {67, 5}) {
    const std::vector<float> x = RandomVector(batch * in, rng);
    Tensor dx = this->Upload(x);
    for (int mode = 0; mode < 3; ++mode) {  // GEMM only; bias; bias and ReLU
      SCOPED_TRACE(::testing::Message() << "batch=" << batch << " mode=" << mode);
      Tensor dy = this->Upload(std::vector<float>(batch * out, 123.0f));
      this->backend()->LinearForward(dx.data(), dw.data(), mode > 0 ? dbias.data() : nullptr, batch,
                                     in, out, /*relu=*/mode == 2, dy.data());
      const std::vector<float> y = dy.ToHost();
      int clipped = 0;
      for (int r = 0; r < batch; ++r) {
        for (int c = 0; c < out; ++c) {
          double expected = mode > 0 ? bias[c] : 0.0;
          for (int p = 0; p < in; ++p) {
            expected += static_cast<double>(x[r * in + p]) * w[c * in + p];
          }
          if (mode == 2 && expected < 0) {
            expected = 0;
            ++clipped;
          }
          ASSERT_NEAR(y[r * out + c], expected, 1e-4) << "y[" << r << "][" << c << "]";
        }
      }
      if (mode == 2) {
        EXPECT_GT(clipped, batch * out / 4);  // the ReLU had work to do
      }
    }
  }
}

TYPED_TEST(BackendOpsTest, BiasActivationReluBackwardColumnSum) {
  std::mt19937_64 rng(2);
  const int rows = 6, cols = 11;
  const std::vector<float> y0 = RandomVector(rows * cols, rng);
  const std::vector<float> bias = RandomVector(cols, rng, -0.5f, 0.5f);
  for (bool relu : {false, true}) {
    Tensor y = this->Upload(y0, rows, cols), b = this->Upload(bias);
    this->backend()->BiasActivation(y.data(), b.data(), rows, cols, relu);
    const std::vector<float> out = y.ToHost();
    int zeros = 0;
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        float expected = y0[r * cols + c] + bias[c];
        if (relu) expected = std::max(expected, 0.0f);
        zeros += out[r * cols + c] == 0.0f;
        EXPECT_FLOAT_EQ(out[r * cols + c], expected);
      }
    }
    if (relu) {
      EXPECT_GT(zeros, 0);  // the data exercises both sides of the ReLU
    }

    // ReluBackward masks by the ReLU output.
    const std::vector<float> g0 = RandomVector(rows * cols, rng);
    Tensor g = this->Upload(g0, rows, cols);
    this->backend()->ReluBackward(y.data(), g.data(), rows * cols);
    const std::vector<float> masked = g.ToHost();
    for (int i = 0; i < rows * cols; ++i) {
      EXPECT_EQ(masked[i], out[i] > 0.0f ? g0[i] : 0.0f) << i;
    }
  }
  // ColumnSum overwrites db.
  const std::vector<float> dy = RandomVector(rows * cols, rng);
  Tensor ddy = this->Upload(dy, rows, cols);
  Tensor db = this->Upload(std::vector<float>(cols, 123.0f));
  this->backend()->ColumnSum(ddy.data(), rows, cols, db.data());
  const std::vector<float> sums = db.ToHost();
  for (int c = 0; c < cols; ++c) {
    double expected = 0.0;
    for (int r = 0; r < rows; ++r) expected += dy[r * cols + c];
    EXPECT_NEAR(sums[c], expected, 1e-5) << c;
  }
}

// The fused ReLU backward and bias gradient equals the two calls, bit for bit, with enough rows
// for several of the CPU backend's row blocks.
TYPED_TEST(BackendOpsTest, ReluBackwardColumnSumEqualsTheTwoCalls) {
  std::mt19937_64 rng(22);
  const int rows = 300, cols = 37;
  const std::vector<float> y = RandomVector(rows * cols, rng);  // about half negative
  const std::vector<float> g0 = RandomVector(rows * cols, rng);
  Tensor dy = this->Upload(y, rows, cols);
  Tensor fused_g = this->Upload(g0, rows, cols), split_g = this->Upload(g0, rows, cols);
  Tensor fused_db = this->Upload(std::vector<float>(cols, 7.0f));
  Tensor split_db = this->Upload(std::vector<float>(cols, 7.0f));
  this->backend()->ReluBackwardColumnSum(dy.data(), fused_g.data(), rows, cols, fused_db.data());
  this->backend()->ReluBackward(dy.data(), split_g.data(), rows * cols);
  this->backend()->ColumnSum(split_g.data(), rows, cols, split_db.data());
  EXPECT_EQ(fused_g.ToHost(), split_g.ToHost());
  const std::vector<float> db = fused_db.ToHost();
  EXPECT_EQ(db, split_db.ToHost());
  for (int c = 0; c < cols; ++c) {
    double expected = 0.0;
    for (int r = 0; r < rows; ++r) {
      if (y[r * cols + c] > 0.0f) expected += g0[r * cols + c];
    }
    EXPECT_NEAR(db[c], expected, 1e-4) << c;
  }
}

// Reference interaction in double: [bottom, dot(z_i, z_j) for i > j].
std::vector<double> ReferenceInteraction(const std::vector<float>& bottom,
                                         const std::vector<float>& emb, int batch, int tables,
                                         int dim) {
  const int width = dim + (tables + 1) * tables / 2;
  std::vector<double> out(static_cast<size_t>(batch) * width);
  for (int b = 0; b < batch; ++b) {
    auto z = [&](int i, int d) -> double {
      return i == 0 ? bottom[b * dim + d]
                    : emb[(static_cast<size_t>(b) * tables + i - 1) * dim + d];
    };
    double* o = out.data() + static_cast<size_t>(b) * width;
    for (int d = 0; d < dim; ++d) o[d] = z(0, d);
    int p = dim;
    for (int i = 1; i <= tables; ++i) {
      for (int j = 0; j < i; ++j) {
        double s = 0.0;
        for (int d = 0; d < dim; ++d) s += z(i, d) * z(j, d);
        o[p++] = s;
      }
    }
  }
  return out;
}

// d(sum(out * r)) / d(bottom, emb) in double: dz_i = r_i(bottom part when i = 0) +
// sum_{j != i} r_{pair(i, j)} z_j.
void ReferenceInteractionBackward(const std::vector<float>& bottom, const std::vector<float>& emb,
                                  const std::vector<float>& dout, int batch, int tables, int dim,
                                  std::vector<double>* dbottom, std::vector<double>* demb) {
  const int width = dim + (tables + 1) * tables / 2;
  dbottom->assign(static_cast<size_t>(batch) * dim, 0.0);
  demb->assign(static_cast<size_t>(batch) * tables * dim, 0.0);
  for (int b = 0; b < batch; ++b) {
    auto z = [&](int i, int d) -> double {
      return i == 0 ? bottom[b * dim + d]
                    : emb[(static_cast<size_t>(b) * tables + i - 1) * dim + d];
    };
    auto dz = [&](int i, int d) -> double& {
      return i == 0 ? (*dbottom)[b * dim + d]
                    : (*demb)[(static_cast<size_t>(b) * tables + i - 1) * dim + d];
    };
    const float* g = dout.data() + static_cast<size_t>(b) * width;
    for (int d = 0; d < dim; ++d) dz(0, d) += g[d];
    int p = dim;
    for (int i = 1; i <= tables; ++i) {
      for (int j = 0; j < i; ++j, ++p) {
        for (int d = 0; d < dim; ++d) {
          dz(i, d) += g[p] * z(j, d);
          dz(j, d) += g[p] * z(i, d);
        }
      }
    }
  }
}

// Every kernel variant of the CPU backend (AVX2 widths 8..32 with 1..6 column chunks, the
// specialised portable widths, the generic width) against the double references; 1e-4 absolute.
TYPED_TEST(BackendOpsTest, InteractionMatchesReferenceOverManyShapes) {
  std::mt19937_64 rng(7);
  for (int dim : {8, 16, 24, 32, 64, 3}) {
    for (int tables : {0, 1, 7, 8, 26, 33, 47}) {
      SCOPED_TRACE(::testing::Message() << "dim=" << dim << " tables=" << tables);
      const int batch = 3;
      const int width = dim + (tables + 1) * tables / 2;
      const std::vector<float> bottom = RandomVector(batch * dim, rng);
      const std::vector<float> emb = RandomVector(batch * tables * dim, rng);
      const std::vector<float> dout = RandomVector(batch * width, rng);
      Tensor t_bottom = this->Upload(bottom), t_emb = this->Upload(emb),
             t_dout = this->Upload(dout);
      Tensor out(this->backend(), batch, width);
      Tensor dbottom(this->backend(), batch, dim), demb(this->backend(), batch, tables * dim);
      demb.Fill(9.0f);
      this->backend()->InteractionForward(t_bottom.data(), t_emb.data(), batch, tables, dim,
                                          out.data());
      this->backend()->InteractionBackward(t_bottom.data(), t_emb.data(), t_dout.data(), batch,
                                           tables, dim, dbottom.data(), demb.data());
      const std::vector<double> expected = ReferenceInteraction(bottom, emb, batch, tables, dim);
      const std::vector<float> got = out.ToHost();
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-4) << i;
      std::vector<double> ref_dbottom, ref_demb;
      ReferenceInteractionBackward(bottom, emb, dout, batch, tables, dim, &ref_dbottom, &ref_demb);
      const std::vector<float> got_dbottom = dbottom.ToHost(), got_demb = demb.ToHost();
      for (size_t i = 0; i < got_dbottom.size(); ++i) {
        ASSERT_NEAR(got_dbottom[i], ref_dbottom[i], 1e-4) << "dbottom " << i;
      }
      for (size_t i = 0; i < got_demb.size(); ++i) {
        ASSERT_NEAR(got_demb[i], ref_demb[i], 1e-4) << "demb " << i;
      }
    }
  }
}

// Widths: 16 is the Criteo width (a specialised kernel on the CPU), 5 the generic path.
TYPED_TEST(BackendOpsTest, InteractionForwardMatchesReference) {
  for (int dim : {16, 5}) {
    SCOPED_TRACE(::testing::Message() << "dim=" << dim);
    std::mt19937_64 rng(3);
    const int batch = 3, tables = 7;
    const int width = dim + (tables + 1) * tables / 2;
    const std::vector<float> bottom = RandomVector(batch * dim, rng);
    const std::vector<float> emb = RandomVector(batch * tables * dim, rng);
    Tensor dbottom = this->Upload(bottom), demb = this->Upload(emb);
    Tensor out(this->backend(), batch, width);
    this->backend()->InteractionForward(dbottom.data(), demb.data(), batch, tables, dim,
                                        out.data());
    const std::vector<float> got = out.ToHost();
    const std::vector<double> expected = ReferenceInteraction(bottom, emb, batch, tables, dim);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
  }
}

// J = sum(out * r); the interaction is bilinear, so central differences are exact up to float
// rounding of the outputs: |analytic - numeric| <= 2e-3 + 1e-3 |analytic| with h = 0.05.
TYPED_TEST(BackendOpsTest, InteractionBackwardMatchesFiniteDifferences) {
  for (int dim : {16, 5}) {
    SCOPED_TRACE(::testing::Message() << "dim=" << dim);
    std::mt19937_64 rng(4);
    const int batch = 2, tables = 6;
    const int width = dim + (tables + 1) * tables / 2;
    const std::vector<float> r = RandomVector(batch * width, rng);
    Tensor bottom = this->Upload(RandomVector(batch * dim, rng));
    Tensor emb = this->Upload(RandomVector(batch * tables * dim, rng));
    Tensor out(this->backend(), batch, width);
    Tensor dout = this->Upload(r);
    Tensor dbottom = this->Upload(std::vector<float>(batch * dim, 7.0f));  // overwritten
    Tensor demb = this->Upload(std::vector<float>(batch * tables * dim, 7.0f));
    this->backend()->InteractionBackward(bottom.data(), emb.data(), dout.data(), batch, tables, dim,
                                         dbottom.data(), demb.data());
    const std::vector<float> g_bottom = dbottom.ToHost(), g_emb = demb.ToHost();

    auto objective = [&]() {
      this->backend()->InteractionForward(bottom.data(), emb.data(), batch, tables, dim,
                                          out.data());
      const std::vector<float> o = out.ToHost();
      double j = 0.0;
      for (size_t i = 0; i < o.size(); ++i) j += static_cast<double>(o[i]) * r[i];
      return j;
    };
    const float h = 0.05f;
    auto check = [&](Tensor& x, const std::vector<float>& analytic, const char* what) {
      for (size_t i = 0; i < x.size(); ++i) {
        const float x0 = this->Get(x.data(), i);
        this->Set(x.data(), i, x0 + h);
        const double plus = objective();
        this->Set(x.data(), i, x0 - h);
        const double minus = objective();
        this->Set(x.data(), i, x0);
        const double numeric = (plus - minus) / (2.0 * h);
        EXPECT_NEAR(analytic[i], numeric, 2e-3 + 1e-3 * std::fabs(analytic[i])) << what << i;
      }
    };
    check(bottom, g_bottom, "dbottom ");
    check(emb, g_emb, "demb ");
  }
}

// probs, the summed loss (a double reference) and dlogits (finite differences of the mean loss),
// including saturated logits where a naive formula overflows.
TYPED_TEST(BackendOpsTest, SigmoidBinaryCrossEntropy) {
  const std::vector<float> logits = {-3.0f, -0.2f, 0.0f, 0.7f, 2.5f, 100.0f, -100.0f, 40.0f};
  const std::vector<float> labels = {0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  const int batch = static_cast<int>(logits.size());
  Tensor x = this->Upload(logits), y = this->Upload(labels);
  Tensor probs(this->backend(), 1, batch), dlogits(this->backend(), 1, batch);
  const double loss = this->backend()->SigmoidBinaryCrossEntropy(x.data(), y.data(), batch,
                                                                 probs.data(), dlogits.data());
  double expected_loss = 0.0;
  const std::vector<float> p = probs.ToHost(), g = dlogits.ToHost();
  for (int i = 0; i < batch; ++i) {
    const double xi = logits[i];
    const double pi = 1.0 / (1.0 + std::exp(-xi));
    EXPECT_NEAR(p[i], pi, 1e-6) << i;
    expected_loss += std::max(xi, 0.0) - xi * labels[i] + std::log1p(std::exp(-std::fabs(xi)));
    EXPECT_NEAR(g[i], (pi - labels[i]) / batch, 1e-7) << i;
  }
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, expected_loss, 1e-4);

  // d(mean loss)/d logit_i by central differences, tolerance 1e-4.
  Tensor scratch_p(this->backend(), 1, batch), scratch_g(this->backend(), 1, batch);
  const float h = 1e-2f;
  for (int i = 0; i < 5; ++i) {
    auto mean_loss = [&](float xi) {
      this->Set(x.data(), i, xi);
      return this->backend()->SigmoidBinaryCrossEntropy(x.data(), y.data(), batch, scratch_p.data(),
                                                        scratch_g.data()) /
             batch;
    };
    const double numeric = (mean_loss(logits[i] + h) - mean_loss(logits[i] - h)) / (2.0 * h);
    mean_loss(logits[i]);
    EXPECT_NEAR(g[i], numeric, 1e-4) << i;
  }
}

// The optimizer step against a scalar double reference written here, five steps with fresh
// gradients each, weight decay on. Tolerance: 1e-5 relative + 1e-6.
struct OptimizerCase {
  DenseOptimizerType type;
  float weight_decay;
};

void ReferenceStep(const DenseOptimizerOptions& o, int64_t step, std::vector<double>& p,
                   const std::vector<float>& g, std::vector<double>& s1, std::vector<double>& s2) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] + static_cast<double>(o.weight_decay) * p[i];
    switch (o.type) {
      case DenseOptimizerType::kSgd:
        p[i] -= o.learning_rate * gi;
        break;
      case DenseOptimizerType::kAdagrad:
        s1[i] += gi * gi;
        p[i] -= o.learning_rate * gi / (std::sqrt(s1[i]) + o.epsilon);
        break;
      case DenseOptimizerType::kAdam: {
        s1[i] = o.beta1 * s1[i] + (1.0 - o.beta1) * gi;
        s2[i] = o.beta2 * s2[i] + (1.0 - o.beta2) * gi * gi;
        const double m_hat = s1[i] / (1.0 - std::pow(static_cast<double>(o.beta1), step));
        const double v_hat = s2[i] / (1.0 - std::pow(static_cast<double>(o.beta2), step));
        p[i] -= o.learning_rate * m_hat / (std::sqrt(v_hat) + o.epsilon);
        break;
      }
    }
  }
}

TYPED_TEST(BackendOpsTest, OptimizerStepsMatchScalarReference) {
  for (DenseOptimizerType type :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    for (float wd : {0.0f, 0.01f}) {
      SCOPED_TRACE(::testing::Message() << DenseOptimizerTypeName(type) << " wd=" << wd);
      DenseOptimizerOptions o{.type = type,
                              .learning_rate = 0.05f,
                              .beta1 = 0.8f,
                              .beta2 = 0.95f,
                              .epsilon = 1e-6f,
                              .weight_decay = wd};
      std::mt19937_64 rng(5);
      const size_t count = 37;
      const std::vector<float> p0 = RandomVector(count, rng);
      std::vector<double> p(p0.begin(), p0.end()), s1(count, 0.0), s2(count, 0.0);
      Tensor params = this->Upload(p0);
      Tensor grads(this->backend(), 1, count);
      Tensor state(this->backend(), 1, DenseOptimizerStateFloats(type) * count);
      for (int64_t step = 1; step <= 5; ++step) {
        const std::vector<float> g = RandomVector(count, rng);
        grads.CopyFromHost(g);
        this->backend()->OptimizerStep(o, step, params.data(), grads.data(), state.data(), count);
        ReferenceStep(o, step, p, g, s1, s2);
      }
      const std::vector<float> got = params.ToHost();
      for (size_t i = 0; i < count; ++i) {
        EXPECT_NEAR(got[i], p[i], 1e-6 + 1e-5 * std::fabs(p[i])) << i;
        EXPECT_GT(std::fabs(got[i] - p0[i]), 1e-4) << "parameter " << i << " did not move";
      }
      if (type == DenseOptimizerType::kAdam) {  // state layout: m then v
        const std::vector<float> st = state.ToHost();
        for (size_t i = 0; i < count; ++i) {
          EXPECT_NEAR(st[i], s1[i], 1e-6 + 1e-5 * std::fabs(s1[i])) << "m " << i;
          EXPECT_NEAR(st[count + i], s2[i], 1e-6 + 1e-5 * std::fabs(s2[i])) << "v " << i;
        }
      }
    }
  }
}

TYPED_TEST(BackendOpsTest, MemoryRoundTrip) {
  std::mt19937_64 rng(6);
  const std::vector<float> v = RandomVector(1000, rng);
  Tensor a = this->Upload(v);
  Tensor b(this->backend(), 1, 1000);
  this->backend()->Copy(a.data(), b.data(), 1000);
  EXPECT_EQ(b.ToHost(), v);
  b.Fill(2.5f);
  EXPECT_EQ(b.ToHost(), std::vector<float>(1000, 2.5f));
  Tensor moved = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(moved.ToHost(), v);
}

}  // namespace
}  // namespace dlrm::dense::testing

namespace dlrm::dense::testing {
namespace {

// The CPU backend with its portable loops only (no AVX2, no AVX-512), so every code path is
// checked on machines that have the wider ones.
struct PortableCpuBackendFactory {
  static constexpr const char* kName = "PortableCpu";
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    auto backend = CpuBackend::Create({.threads = 0, .allow_avx2 = false, .allow_avx512 = false});
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(backend).value());
  }
};

template <typename Factory>
using PortableCpuTest = BackendTest<Factory>;
using PortableCpuFactories = ::testing::Types<PortableCpuBackendFactory>;
TYPED_TEST_SUITE(PortableCpuTest, PortableCpuFactories, BackendFactoryNames);

// The portable loops against the AVX2 kernels and the default backend's (AVX-512 where the CPU
// has it), over widths each kernel takes and widths it leaves to the others.
TYPED_TEST(PortableCpuTest, InteractionMatchesTheDefaultCpuBackend) {
  auto fast = CpuBackendFactory::Create();
  auto avx2 = CpuBackend::Create({.threads = 0, .allow_avx512 = false});
  ASSERT_TRUE(fast.ok() && avx2.ok());
  Backend* others[] = {fast->get(), avx2->get()};
  std::mt19937_64 rng(8);
  for (int dim : {8, 16, 32, 48, 64, 128, 5, 40}) {
    for (int tables : {1, 8, 26, 40}) {
      const int batch = 4;
      const int width = dim + (tables + 1) * tables / 2;
      const std::vector<float> bottom = RandomVector(batch * dim, rng);
      const std::vector<float> emb = RandomVector(batch * tables * dim, rng);
      const std::vector<float> dout = RandomVector(batch * width, rng);
      std::vector<float> out_a(batch * width);
      std::vector<float> db_a(batch * dim);
      std::vector<float> de_a(batch * tables * dim);
      this->backend()->InteractionForward(bottom.data(), emb.data(), batch, tables, dim,
                                          out_a.data());
      this->backend()->InteractionBackward(bottom.data(), emb.data(), dout.data(), batch, tables,
                                           dim, db_a.data(), de_a.data());
      for (Backend* other : others) {
        SCOPED_TRACE(::testing::Message()
                     << other->name() << " dim=" << dim << " tables=" << tables);
        // Each output is followed by guard floats that must come back untouched: a kernel may
        // not write past the rows it was given (another thread's part of the batch).
        constexpr int kGuard = 64;
        constexpr float kUntouched = -12345.0f;
        std::vector<float> out_b(batch * width + kGuard, kUntouched);
        std::vector<float> db_b(batch * dim + kGuard, kUntouched);
        std::vector<float> de_b(batch * tables * dim + kGuard, kUntouched);
        other->InteractionForward(bottom.data(), emb.data(), batch, tables, dim, out_b.data());
        other->InteractionBackward(bottom.data(), emb.data(), dout.data(), batch, tables, dim,
                                   db_b.data(), de_b.data());
        for (size_t i = 0; i < out_a.size(); ++i) ASSERT_NEAR(out_a[i], out_b[i], 1e-5) << i;
        for (size_t i = 0; i < db_a.size(); ++i) ASSERT_NEAR(db_a[i], db_b[i], 1e-5) << i;
        for (size_t i = 0; i < de_a.size(); ++i) ASSERT_NEAR(de_a[i], de_b[i], 1e-5) << i;
        for (int i = 0; i < kGuard; ++i) {
          ASSERT_EQ(out_b[out_a.size() + i], kUntouched) << "forward wrote past its end, at " << i;
          ASSERT_EQ(db_b[db_a.size() + i], kUntouched) << "dbottom written past its end, at " << i;
          ASSERT_EQ(de_b[de_a.size() + i], kUntouched) << "demb written past its end, at " << i;
        }
      }
    }
  }
}

// The CPU backend splits large element-wise, interaction and optimizer loops over its threads;
// every element must come out with the same bits as on one thread. The arrays are large enough to
// be split (tens of thousands of floats and more).
TEST(CpuBackendThreads, LargeArraysGiveTheSameBitsOnOneAndTwoThreads) {
  auto one = CpuBackend::Create({.threads = 1});
  auto two = CpuBackend::Create({.threads = 2});
  ASSERT_TRUE(one.ok() && two.ok());
  CpuBackend* backends[2] = {one->get(), two->get()};
  std::mt19937_64 rng(21);
  const int rows = 2048, cols = 300;
  const std::vector<float> y0 = RandomVector(rows * cols, rng);
  const std::vector<float> bias = RandomVector(cols, rng, -0.5f, 0.5f);
  const std::vector<float> dy0 = RandomVector(rows * cols, rng);
  std::vector<float> y[2], dy[2], db[2];
  for (int k = 0; k < 2; ++k) {
    y[k] = y0;
    dy[k] = dy0;
    db[k].assign(cols, -1.0f);
    backends[k]->BiasActivation(y[k].data(), bias.data(), rows, cols, /*relu=*/true);
    backends[k]->ReluBackward(y[k].data(), dy[k].data(), dy[k].size());
    backends[k]->ColumnSum(dy[k].data(), rows, cols, db[k].data());
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dy[0], dy[1]);
  EXPECT_EQ(db[0], db[1]);
  std::vector<float> fused_dy[2] = {dy0, dy0}, fused_db[2];
  for (int k = 0; k < 2; ++k) {
    fused_db[k].assign(cols, -1.0f);
    backends[k]->ReluBackwardColumnSum(y[k].data(), fused_dy[k].data(), rows, cols,
                                       fused_db[k].data());
  }
  EXPECT_EQ(fused_dy[0], dy[0]);
  EXPECT_EQ(fused_dy[1], dy[0]);
  EXPECT_EQ(fused_db[0], db[0]);
  EXPECT_EQ(fused_db[1], db[0]);
  for (int c = 0; c < cols; ++c) {
    double expected = 0;
    for (int r = 0; r < rows; ++r) expected += dy[0][static_cast<size_t>(r) * cols + c];
    ASSERT_NEAR(db[0][c], expected, 1e-3) << "column " << c;
  }

  const int batch = 2048, tables = 26, dim = 16;
  const int width = dim + (tables + 1) * tables / 2;
  const std::vector<float> bottom = RandomVector(batch * dim, rng);
  const std::vector<float> emb = RandomVector(batch * tables * dim, rng);
  const std::vector<float> dout = RandomVector(batch * width, rng);
  std::vector<float> out[2], dbottom[2], demb[2];
  for (int k = 0; k < 2; ++k) {
    out[k].assign(batch * width, -1.0f);
    dbottom[k].assign(batch * dim, -1.0f);
    demb[k].assign(batch * tables * dim, -1.0f);
    backends[k]->InteractionForward(bottom.data(), emb.data(), batch, tables, dim, out[k].data());
    backends[k]->InteractionBackward(bottom.data(), emb.data(), dout.data(), batch, tables, dim,
                                     dbottom[k].data(), demb[k].data());
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(dbottom[0], dbottom[1]);
  EXPECT_EQ(demb[0], demb[1]);
  // The last sample against the reference: the split parts write where the samples are.
  const std::vector<float> last_bottom(bottom.end() - dim, bottom.end());
  const std::vector<float> last_emb(emb.end() - tables * dim, emb.end());
  std::vector<float> last_out(width);
  backends[0]->InteractionForward(last_bottom.data(), last_emb.data(), 1, tables, dim,
                                  last_out.data());
  EXPECT_EQ(std::vector<float>(out[1].end() - width, out[1].end()), last_out);

  // The DCN cross layer's element-wise parts and Axpy.
  const size_t m = 1 << 18;
  const std::vector<float> x0 = RandomVector(m, rng), h = RandomVector(m, rng);
  const std::vector<float> xl = RandomVector(m, rng), g = RandomVector(m, rng);
  std::vector<float> combined[2], dh[2], dx0[2], axpy[2];
  for (int k = 0; k < 2; ++k) {
    combined[k].assign(m, -1.0f);
    dh[k].assign(m, -1.0f);
    dx0[k] = xl;
    axpy[k] = h;
    backends[k]->CrossCombine(x0.data(), h.data(), xl.data(), combined[k].data(), m);
    backends[k]->CrossCombineBackward(x0.data(), h.data(), g.data(), dh[k].data(), dx0[k].data(),
                                      m);
    backends[k]->Axpy(0.5f, g.data(), axpy[k].data(), m);
  }
  EXPECT_EQ(combined[0], combined[1]);
  EXPECT_EQ(dh[0], dh[1]);
  EXPECT_EQ(dx0[0], dx0[1]);
  EXPECT_EQ(axpy[0], axpy[1]);
  EXPECT_EQ(combined[1].back(), x0.back() * h.back() + xl.back());

  const size_t n = 1 << 20;
  const std::vector<float> grads = RandomVector(n, rng);
  const std::vector<float> params0 = RandomVector(n, rng);
  for (DenseOptimizerType type :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    DenseOptimizerOptions options;
    options.type = type;
    options.learning_rate = 0.01f;
    options.weight_decay = 0.001f;
    std::vector<float> params[2], state[2];
    for (int k = 0; k < 2; ++k) {
      params[k] = params0;
      state[k].assign(2 * n, 0.1f);
      for (int64_t step = 1; step <= 2; ++step) {
        backends[k]->OptimizerStep(options, step, params[k].data(), grads.data(), state[k].data(),
                                   n);
      }
    }
    EXPECT_EQ(params[0], params[1]) << "optimizer " << static_cast<int>(type);
    EXPECT_EQ(state[0], state[1]) << "optimizer " << static_cast<int>(type);
    EXPECT_NE(params[0], params0);
  }
}

}  // namespace
}  // namespace dlrm::dense::testing
