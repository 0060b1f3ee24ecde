// DlrmDenseModel: gradients against finite differences, GemmOnlyStep against the GEMMs of a real
// step, option validation, determinism, and a small training run whose loss must fall.
#include "dense/dlrm_model.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "dense/cpu/cpu_backend.h"
#include "dense/tensor.h"
#include "gtest/gtest.h"
#include "tests/dense/backend_test_util.h"
#include "tests/dense/finite_difference.h"

namespace dlrm::dense::testing {
namespace {

DlrmDenseModelOptions SmallOptions() {
  return DlrmDenseModelOptions{.num_dense_features = 5,
                               .bottom_widths = {7, 4},
                               .top_widths = {6, 1},
                               .num_tables = 3,
                               .embedding_dim = 4,
                               .max_batch_size = 8,
                               .seed = 42,
                               .optimizer = {}};
}

// SmallOptions with DCNv2: x_0 is 16 wide, two cross layers of rank 3.
DlrmDenseModelOptions SmallDcnOptions() {
  DlrmDenseModelOptions o = SmallOptions();
  o.interaction = Interaction::kDcnV2;
  o.cross_layers = 2;
  o.low_rank = 3;
  return o;
}

// The model's forward pass written out on the host with plain loops, from the flat parameter
// vector in the documented order (bottom MLP, cross layers V U b, top MLP; each Linear W then
// b): returns the logits. `with_cross` false leaves the cross layers out, i.e. the top MLP reads
// the concatenation x_0 itself.
std::vector<double> HostLogits(const DlrmDenseModelOptions& o, const std::vector<float>& params,
                               const std::vector<float>& dense, const std::vector<float>& emb,
                               int batch, bool with_cross) {
  size_t offset = 0;
  auto linear = [&](const std::vector<double>& x, int in, int out, bool relu, bool bias) {
    std::vector<double> y(out, 0.0);
    for (int j = 0; j < out; ++j) {
      for (int i = 0; i < in; ++i) y[j] += params[offset + j * in + i] * x[i];
    }
    offset += static_cast<size_t>(in) * out;
    for (int j = 0; bias && j < out; ++j) y[j] += params[offset + j];
    if (bias) offset += out;
    for (double& v : y) v = relu ? std::max(v, 0.0) : v;
    return y;
  };
  const int t = o.num_tables, d = o.embedding_dim, w = (t + 1) * d;
  std::vector<double> logits;
  for (int b = 0; b < batch; ++b) {
    offset = 0;
    std::vector<double> x(dense.begin() + b * o.num_dense_features,
                          dense.begin() + (b + 1) * o.num_dense_features);
    int in = o.num_dense_features;
    for (int width : o.bottom_widths) {
      x = linear(x, in, width, /*relu=*/true, /*bias=*/true);
      in = width;
    }
    for (int i = 0; i < t * d; ++i) x.push_back(emb[static_cast<size_t>(b) * t * d + i]);
    const std::vector<double> x0 = x;
    for (int l = 0; l < o.cross_layers; ++l) {
      const std::vector<double> tv = linear(x, w, o.low_rank, false, /*bias=*/false);
      const std::vector<double> h = linear(tv, o.low_rank, w, false, /*bias=*/true);
      if (!with_cross) continue;
      for (int i = 0; i < w; ++i) x[i] = x0[i] * h[i] + x[i];
    }
    in = w;
    for (size_t i = 0; i < o.top_widths.size(); ++i) {
      x = linear(x, in, o.top_widths[i], /*relu=*/i + 1 < o.top_widths.size(), true);
      in = o.top_widths[i];
    }
    logits.push_back(x[0]);
  }
  return logits;
}

template <typename Factory>
class DlrmModelTest : public BackendTest<Factory> {
 protected:
  // Random dense features [batch x 5] and embeddings [batch x 12] of SmallOptions' shape, and the
  // logits of `model` on them.
  struct Inputs {
    std::vector<float> dense, emb, logits;
  };
  Inputs ForwardOnRandomInputs(DlrmDenseModel& model, int batch, std::mt19937_64& rng) {
    Inputs in{RandomVector(batch * 5, rng), RandomVector(batch * 12, rng), {}};
    Tensor dense_t = this->Upload(in.dense, batch, 5), emb_t = this->Upload(in.emb, batch, 12);
    in.logits = this->Download(model.Forward(dense_t.data(), emb_t.data(), batch), batch);
    return in;
  }

  // Summed BCE of the batch as a function of every parameter and embedding. Checked: 80 sampled
  // parameters and every embedding entry, h = 5e-3, tolerance 1e-3 + 1e-2 |analytic| (float
  // forward passes; coordinates whose perturbation flips a ReLU are skipped, at most a fifth).
  void CheckGradients(const DlrmDenseModelOptions& options);
};
TYPED_TEST_SUITE(DlrmModelTest, BackendFactories, BackendFactoryNames);

TYPED_TEST(DlrmModelTest, GradientsMatchFiniteDifferences) { this->CheckGradients(SmallOptions()); }

TYPED_TEST(DlrmModelTest, DcnV2GradientsMatchFiniteDifferences) {
  this->CheckGradients(SmallDcnOptions());
}

template <typename Factory>
void DlrmModelTest<Factory>::CheckGradients(const DlrmDenseModelOptions& options) {
  auto model_or = DlrmDenseModel::Create(this->backend(), options);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  DlrmDenseModel& model = **model_or;
  if (model.cross_net() != nullptr) {
    // Initialisation leaves b = 0; random biases make every term of the cross layers count.
    std::mt19937_64 rng(11);
    for (int l = 0; l < options.cross_layers; ++l) {
      const ParameterSlice slice = model.cross_net()->layer_slice(l);
      const size_t kernels = slice.count - model.interaction_width();
      const std::vector<float> bias = RandomVector(model.interaction_width(), rng, -0.5f, 0.5f);
      this->backend()->CopyFromHost(bias.data(), slice.params + kernels, bias.size());
    }
  }
  const int batch = 6, t = options.num_tables, d = options.embedding_dim;
  std::mt19937_64 rng(1);
  Tensor dense = this->Upload(RandomVector(batch * 5, rng), batch, 5);
  Tensor emb = this->Upload(RandomVector(batch * t * d, rng), batch, t * d);
  Tensor labels = this->Upload({1, 0, 0, 1, 1, 0});
  Tensor demb(this->backend(), batch, t * d);

  const float mean_loss =
      model.TrainStep(dense.data(), emb.data(), labels.data(), batch, demb.data());
  EXPECT_GT(mean_loss, 0.1f);
  // TrainStep's gradients are of the mean loss; the objective below is the sum.
  std::vector<float> grads = this->Download(model.grads(), model.num_params());
  std::vector<float> demb_host = demb.ToHost();
  for (float& g : grads) g *= batch;
  for (float& g : demb_host) g *= batch;

  auto objective = [&]() {
    Evaluation e;
    e.value = model.Evaluate(dense.data(), emb.data(), labels.data(), batch, nullptr);
    for (Mlp* mlp : {&model.bottom_mlp(), &model.top_mlp()}) {
      for (int l = 0; l < mlp->num_layers(); ++l) {
        if (!mlp->layer(l).relu()) continue;
        const std::vector<float> act = this->Download(
            mlp->layer(l).output(), static_cast<size_t>(batch) * mlp->layer(l).out());
        for (float a : act) e.relu_pattern.push_back(a > 0.0f);
      }
    }
    return e;
  };
  const FiniteDifferenceResult p =
      CheckFiniteDifferences(this->backend(), model.params(), SampleIndices(model.num_params(), 80),
                             grads, 5e-3f, 1e-3, 1e-2, objective, "dparams");
  const FiniteDifferenceResult e =
      CheckFiniteDifferences(this->backend(), emb.data(), SampleIndices(emb.size(), emb.size()),
                             demb_host, 5e-3f, 1e-3, 1e-2, objective, "demb");
  EXPECT_GT(p.checked, 60);
  EXPECT_GT(e.checked, static_cast<int>(emb.size()) * 4 / 5);
}

// A Backend that forwards everything to another one and records the Gemm calls.
class GemmRecordingBackend : public Backend {
 public:
  using Call =
      std::tuple<bool, bool, int, int, int, float, const float*, const float*, float, float*>;
  explicit GemmRecordingBackend(Backend* inner) : inner_(inner) {}

  Device device() const override { return inner_->device(); }
  std::string name() const override { return "recording " + inner_->name(); }
  float* Allocate(size_t count) override { return inner_->Allocate(count); }
  void Deallocate(float* ptr) override { inner_->Deallocate(ptr); }
  void CopyFromHost(const float* src, float* dst, size_t count) override {
    inner_->CopyFromHost(src, dst, count);
  }
  void CopyToHost(const float* src, float* dst, size_t count) override {
    inner_->CopyToHost(src, dst, count);
  }
  void Copy(const float* src, float* dst, size_t count) override { inner_->Copy(src, dst, count); }
  void Fill(float* dst, size_t count, float value) override { inner_->Fill(dst, count, value); }
  void Synchronize() override { inner_->Synchronize(); }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    calls.emplace_back(ta, tb, m, n, k, alpha, a, b, beta, c);
    inner_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void BiasActivation(float* y, const float* bias, int rows, int cols, bool relu) override {
    inner_->BiasActivation(y, bias, rows, cols, relu);
  }
  void ReluBackward(const float* y, float* dy, size_t count) override {
    inner_->ReluBackward(y, dy, count);
  }
  void ColumnSum(const float* dy, int rows, int cols, float* db) override {
    inner_->ColumnSum(dy, rows, cols, db);
  }
  void Copy2D(const float* src, int src_stride, float* dst, int dst_stride, int rows,
              int cols) override {
    inner_->Copy2D(src, src_stride, dst, dst_stride, rows, cols);
  }
  void Axpy(float alpha, const float* x, float* y, size_t count) override {
    inner_->Axpy(alpha, x, y, count);
  }
  void CrossCombine(const float* x0, const float* h, const float* xl, float* out,
                    size_t count) override {
    inner_->CrossCombine(x0, h, xl, out, count);
  }
  void CrossCombineBackward(const float* x0, const float* h, const float* g, float* dh, float* dx0,
                            size_t count) override {
    inner_->CrossCombineBackward(x0, h, g, dh, dx0, count);
  }
  void InteractionForward(const float* bottom, const float* emb, int batch, int t, int d,
                          float* out) override {
    inner_->InteractionForward(bottom, emb, batch, t, d, out);
  }
  void InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                           int t, int d, float* dbottom, float* demb) override {
    inner_->InteractionBackward(bottom, emb, dout, batch, t, d, dbottom, demb);
  }
  double SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                   float* probs, float* dlogits) override {
    return inner_->SigmoidBinaryCrossEntropy(logits, labels, batch, probs, dlogits);
  }
  void OptimizerStep(const DenseOptimizerOptions& o, int64_t step, float* params,
                     const float* grads, float* state, size_t count) override {
    inner_->OptimizerStep(o, step, params, grads, state, count);
  }

  std::vector<Call> calls;

 private:
  Backend* inner_;
};

TYPED_TEST(DlrmModelTest, GemmOnlyStepIssuesTheGemmsOfATrainingStep) {
  GemmRecordingBackend recorder(this->backend());
  DlrmDenseModelOptions options = SmallOptions();
  options.bottom_widths = {16, 8, 4};
  auto model = DlrmDenseModel::Create(&recorder, options);
  ASSERT_TRUE(model.ok()) << model.status();
  const int batch = 5;
  std::mt19937_64 rng(2);
  Tensor dense = this->Upload(RandomVector(batch * 5, rng), batch, 5);
  Tensor emb = this->Upload(RandomVector(batch * 12, rng), batch, 12);
  Tensor labels = this->Upload({1, 0, 1, 1, 0});
  Tensor demb(this->backend(), batch, 12);

  recorder.calls.clear();
  (*model)->TrainStep(dense.data(), emb.data(), labels.data(), batch, demb.data());
  const std::vector<GemmRecordingBackend::Call> step_calls = recorder.calls;
  recorder.calls.clear();
  (*model)->GemmOnlyStep(batch, dense.data());
  // bottom 3 layers: 3 forward + 3 weight-gradient + 2 input-gradient (none for the dense
  // features); top 2 layers: 2 forward + 2 weight-gradient + 2 input-gradient.
  EXPECT_EQ(step_calls.size(), 14u);
  EXPECT_EQ(recorder.calls, step_calls);
}

TYPED_TEST(DlrmModelTest, DcnV2GemmOnlyStepIssuesTheGemmsOfATrainingStep) {
  GemmRecordingBackend recorder(this->backend());
  auto model = DlrmDenseModel::Create(&recorder, SmallDcnOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  const int batch = 5;
  std::mt19937_64 rng(2);
  Tensor dense = this->Upload(RandomVector(batch * 5, rng), batch, 5);
  Tensor emb = this->Upload(RandomVector(batch * 12, rng), batch, 12);
  Tensor labels = this->Upload({1, 0, 1, 1, 0});
  recorder.calls.clear();
  (*model)->TrainStep(dense.data(), emb.data(), labels.data(), batch, nullptr);
  const std::vector<GemmRecordingBackend::Call> step_calls = recorder.calls;
  recorder.calls.clear();
  (*model)->GemmOnlyStep(batch, dense.data());
  // bottom 2 layers: 2 + 2 + 1; cross 2 layers: 2 forward + 4 backward each; top: 2 + 2 + 2.
  EXPECT_EQ(step_calls.size(), 5u + 12u + 6u);
  EXPECT_EQ(recorder.calls, step_calls);
}

// The cross layers compute x_{l+1} = x_0 * (U (V x_l) + b) + x_l: the logits equal a host
// evaluation of that formula (double precision, plain loops) with random weights and biases.
TYPED_TEST(DlrmModelTest, DcnV2ForwardMatchesTheFormulaOnTheHost) {
  const DlrmDenseModelOptions options = SmallDcnOptions();
  auto model = DlrmDenseModel::Create(this->backend(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937_64 rng(6);
  const std::vector<float> params = RandomVector((*model)->num_params(), rng, -0.6f, 0.6f);
  (*model)->parameters().ParamsFromHost(params);
  const int batch = 7;
  const auto in = this->ForwardOnRandomInputs(**model, batch, rng);
  const std::vector<double> expected = HostLogits(options, params, in.dense, in.emb, batch, true);
  const std::vector<double> no_cross = HostLogits(options, params, in.dense, in.emb, batch, false);
  double cross_effect = 0.0;
  for (int b = 0; b < batch; ++b) {
    EXPECT_NEAR(in.logits[b], expected[b], 1e-4 + 1e-4 * std::fabs(expected[b])) << "sample " << b;
    cross_effect = std::max(cross_effect, std::fabs(expected[b] - no_cross[b]));
  }
  EXPECT_GT(cross_effect, 0.05) << "the cross layers must matter for this check to mean anything";
}

// With every cross weight and bias zero, x_L = x_0 and DLRM-DCNv2 is a plain MLP (the bottom MLP,
// then the top MLP over the concatenation [bottom, embeddings]); the host reference for that
// leaves the cross code out entirely.
TYPED_TEST(DlrmModelTest, DcnV2WithZeroCrossWeightsIsAPlainMlpOverTheConcatenation) {
  const DlrmDenseModelOptions options = SmallDcnOptions();
  auto model = DlrmDenseModel::Create(this->backend(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int l = 0; l < options.cross_layers; ++l) {
    const ParameterSlice slice = (*model)->cross_net()->layer_slice(l);
    this->backend()->Fill(slice.params, slice.count, 0.0f);
  }
  const std::vector<float> params = this->Download((*model)->params(), (*model)->num_params());
  std::mt19937_64 rng(8);
  const int batch = 7;
  const auto in = this->ForwardOnRandomInputs(**model, batch, rng);
  const std::vector<double> mlp = HostLogits(options, params, in.dense, in.emb, batch, false);
  for (int b = 0; b < batch; ++b) {
    EXPECT_NEAR(in.logits[b], mlp[b], 1e-5 + 1e-5 * std::fabs(mlp[b])) << "sample " << b;
  }
}

TYPED_TEST(DlrmModelTest, TrainingOnASeparableTaskReducesTheLoss) {
  // Label = [x_0 + <e_0, e_1> > 0] on fixed random "embeddings": the model needs the bottom MLP,
  // the interaction and the top MLP to fit it.
  const DlrmDenseModelOptions options{
      .num_dense_features = 4,
      .bottom_widths = {16, 8},
      .top_widths = {16, 1},
      .num_tables = 3,
      .embedding_dim = 8,
      .max_batch_size = 128,
      .seed = 3,
      .optimizer = {.type = DenseOptimizerType::kAdam, .learning_rate = 0.01f}};
  auto model_or = DlrmDenseModel::Create(this->backend(), options);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  DlrmDenseModel& model = **model_or;
  const int n = 1024, batch = 128;
  std::mt19937_64 rng(4);
  const std::vector<float> dense = RandomVector(n * 4, rng);
  const std::vector<float> emb = RandomVector(n * 3 * 8, rng, -0.6f, 0.6f);
  std::vector<float> labels(n);
  for (int i = 0; i < n; ++i) {
    float dot = 0.0f;
    for (int d = 0; d < 8; ++d) dot += emb[(i * 3 + 0) * 8 + d] * emb[(i * 3 + 1) * 8 + d];
    labels[i] = dense[i * 4] + 2.0f * dot > 0.0f ? 1.0f : 0.0f;
  }
  Tensor dense_t = this->Upload(dense, n, 4), emb_t = this->Upload(emb, n, 24);
  Tensor labels_t = this->Upload(labels);

  auto epoch_loss = [&](bool train) {
    double total = 0.0;
    for (int start = 0; start < n; start += batch) {
      const float* x = dense_t.row(start);
      const float* e = emb_t.row(start);
      const float* y = labels_t.data() + start;
      if (train) {
        total += model.TrainStep(x, e, y, batch, nullptr) * batch;
        model.ApplyOptimizer();
      } else {
        total += model.Evaluate(x, e, y, batch, nullptr);
      }
    }
    return total / n;
  };
  const double initial = epoch_loss(false);
  for (int epoch = 0; epoch < 40; ++epoch) epoch_loss(true);
  const double final_loss = epoch_loss(false);
  EXPECT_EQ(model.optimizer().step(), 40 * n / batch);
  EXPECT_NEAR(initial, std::log(2.0), 0.25);
  EXPECT_LT(final_loss, 0.5 * initial) << "initial " << initial;
  std::cout << "[ info ] loss " << initial << " -> " << final_loss << "\n";
}

// What a distributed worker relies on to allreduce gradients while the backward runs: each
// part TrainStep reports is final when reported, and the parts cover grads() once, from its end.
TYPED_TEST(DlrmModelTest, BackwardReportsEachLayersGradientsOnceWhenTheyAreFinal) {
  for (const DlrmDenseModelOptions& options : {SmallOptions(), SmallDcnOptions()}) {
    auto model_or = DlrmDenseModel::Create(this->backend(), options);
    ASSERT_TRUE(model_or.ok()) << model_or.status();
    DlrmDenseModel& model = **model_or;
    const size_t n = model.num_params();
    std::mt19937_64 rng(11);
    auto step = [&](const GradientsReady& ready) {
      Tensor dense = this->Upload(RandomVector(8 * 5, rng), 8, 5);
      Tensor emb = this->Upload(RandomVector(8 * 12, rng), 8, 12);
      Tensor labels = this->Upload({1, 0, 1, 1, 0, 0, 1, 0});
      model.TrainStep(dense.data(), emb.data(), labels.data(), 8, nullptr, ready);
    };
    // A first step leaves other gradients in the buffer: a part reported before its layer's
    // backward wrote it would still hold those.
    step(nullptr);
    struct Part {
      size_t begin;
      std::vector<float> values;  // as they were when reported
    };
    std::vector<Part> parts;
    step([&](const float* g, size_t count) {
      const size_t begin = static_cast<size_t>(g - model.grads());
      parts.push_back({begin, this->Download(g, count)});
    });
    const std::vector<float> final_grads = this->Download(model.grads(), n);
    // One Linear (W and b) per MLP layer and one part (V, U, b) per cross layer.
    const int cross = options.interaction == Interaction::kDcnV2 ? options.cross_layers : 0;
    EXPECT_EQ(parts.size(), options.bottom_widths.size() + options.top_widths.size() + cross);
    size_t end = n;
    for (const Part& part : parts) {
      EXPECT_EQ(part.begin + part.values.size(), end) << "parts run from the end, adjacent";
      const std::vector<float> now(final_grads.begin() + part.begin,
                                   final_grads.begin() + part.begin + part.values.size());
      EXPECT_EQ(part.values, now) << "part at " << part.begin << " changed after it was reported";
      end = part.begin;
    }
    EXPECT_EQ(end, 0u);
  }
}

// The weight matrices PowerSGD compresses: every Linear's W and every cross layer's V and U, at
// their places in the buffer; with the biases they make up every parameter.
TYPED_TEST(DlrmModelTest, WeightMatricesAreEveryLayersWeightsAndNothingElse) {
  for (const DlrmDenseModelOptions& options : {SmallOptions(), SmallDcnOptions()}) {
    auto model_or = DlrmDenseModel::Create(this->backend(), options);
    ASSERT_TRUE(model_or.ok()) << model_or.status();
    DlrmDenseModel& model = **model_or;
    const auto matrices = model.WeightMatrices();
    std::vector<std::tuple<size_t, int, int>> expected;
    auto add_mlp = [&](Mlp& mlp) {
      for (int i = 0; i < mlp.num_layers(); ++i) {
        Linear& l = mlp.layer(i);
        expected.emplace_back(static_cast<size_t>(l.weights() - model.params()), l.out(), l.in());
      }
    };
    add_mlp(model.bottom_mlp());
    size_t biases = 0;
    for (Mlp* mlp : {&model.bottom_mlp(), &model.top_mlp()}) {
      for (int i = 0; i < mlp->num_layers(); ++i) biases += mlp->layer(i).out();
    }
    if (CrossNet* cross = model.cross_net()) {
      const CrossNetOptions& o = cross->options();
      for (int l = 0; l < o.layers; ++l) {
        const size_t v = static_cast<size_t>(cross->layer_slice(l).params - model.params());
        expected.emplace_back(v, o.rank, o.width);
        expected.emplace_back(v + static_cast<size_t>(o.rank) * o.width, o.width, o.rank);
        biases += o.width;
      }
    }
    add_mlp(model.top_mlp());
    ASSERT_EQ(matrices.size(), expected.size());
    size_t weights = 0;
    for (size_t i = 0; i < matrices.size(); ++i) {
      EXPECT_EQ(std::make_tuple(matrices[i].offset, matrices[i].rows, matrices[i].cols),
                expected[i])
          << "matrix " << i;
      weights += static_cast<size_t>(matrices[i].rows) * matrices[i].cols;
    }
    EXPECT_EQ(weights + biases, model.num_params());
  }
}

TYPED_TEST(DlrmModelTest, SameSeedSameModelAndPredictMatchesEvaluate) {
  auto a = DlrmDenseModel::Create(this->backend(), SmallOptions());
  auto b = DlrmDenseModel::Create(this->backend(), SmallOptions());
  DlrmDenseModelOptions other_seed = SmallOptions();
  other_seed.seed = 43;
  auto c = DlrmDenseModel::Create(this->backend(), other_seed);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto pa = this->Download((*a)->params(), (*a)->num_params());
  EXPECT_EQ(pa, this->Download((*b)->params(), (*b)->num_params()));
  EXPECT_NE(pa, this->Download((*c)->params(), (*c)->num_params()));
  EXPECT_EQ((*a)->num_params(), 5u * 7 + 7 + 7 * 4 + 4 + 10u * 6 + 6 + 6 + 1);

  std::mt19937_64 rng(5);
  Tensor dense = this->Upload(RandomVector(4 * 5, rng), 4, 5);
  Tensor emb = this->Upload(RandomVector(4 * 12, rng), 4, 12);
  Tensor labels = this->Upload({1, 0, 1, 0});
  Tensor p1(this->backend(), 1, 4), p2(this->backend(), 1, 4);
  (*a)->Predict(dense.data(), emb.data(), 4, p1.data());
  (*a)->Evaluate(dense.data(), emb.data(), labels.data(), 4, p2.data());
  const std::vector<float> h1 = p1.ToHost(), h2 = p2.ToHost();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(h1[i], h2[i], 1e-6);
    EXPECT_TRUE(h1[i] > 0.0f && h1[i] < 1.0f) << h1[i];
  }
}

TEST(DlrmModelCreateTest, RejectsInconsistentOptions) {
  auto backend = CpuBackendFactory::Create();
  ASSERT_TRUE(backend.ok());
  auto expect_error = [&](DlrmDenseModelOptions o, const std::string& fragment) {
    auto model = DlrmDenseModel::Create(backend->get(), o);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(model.status().message().find(fragment), std::string::npos) << model.status();
  };
  DlrmDenseModelOptions o = SmallOptions();
  o.bottom_widths = {7, 5};
  expect_error(o, "must end in embedding_dim 4");
  o = SmallOptions();
  o.top_widths = {6, 2};
  expect_error(o, "must end in width 1");
  o = SmallOptions();
  o.max_batch_size = 0;
  expect_error(o, "max_batch_size must be positive, got 0");
  o = SmallOptions();
  o.optimizer.beta1 = 1.0f;
  expect_error(o, "beta1");
  o = SmallOptions();
  o.optimizer.learning_rate = -1.0f;
  expect_error(o, "learning_rate");
  o = SmallDcnOptions();
  o.cross_layers = 0;
  expect_error(o, "cross_layers must be positive, got 0");
  o = SmallDcnOptions();
  o.low_rank = -2;
  expect_error(o, "low_rank must be positive, got -2");
}

// MemoryFloats, what the trainer checks against the memory it has before it creates a model,
// is what Create allocates: counted by the CPU backend, for the dot and the DCNv2 models, with
// each optimizer's state (SGD none, Adagrad one, Adam two floats a parameter) and more than one
// hidden layer (each but the first has its gradient buffer below it).
TEST(DlrmModelCreateTest, MemoryFloatsIsWhatCreateAllocates) {
  for (DenseOptimizerType type :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    for (DlrmDenseModelOptions o : {SmallOptions(), SmallDcnOptions()}) {
      o.optimizer.type = type;
      o.bottom_widths = {9, 7, 4};
      o.top_widths = {11, 6, 1};
      o.max_batch_size = 13;
      auto backend = CpuBackend::Create({.threads = 1});
      ASSERT_TRUE(backend.ok());
      ASSERT_EQ((*backend)->allocated_floats(), 0u);
      auto model = DlrmDenseModel::Create(backend->get(), o);
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ((*backend)->allocated_floats(), DlrmDenseModel::MemoryFloats(o))
          << "optimizer " << static_cast<int>(type) << ", dcnv2 "
          << (o.interaction == Interaction::kDcnV2);
    }
  }
}

TEST(DlrmModelCreateTest, DcnV2Shape) {
  auto backend = CpuBackendFactory::Create();
  ASSERT_TRUE(backend.ok());
  auto model = DlrmDenseModel::Create(backend->get(), SmallDcnOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  // x_0 = [bottom (4), 3 tables x 4] = 16 wide; each cross layer V [3 x 16], U [16 x 3], b [16].
  EXPECT_EQ((*model)->interaction_width(), 16);
  EXPECT_EQ((*model)->top_mlp().input_width(), 16);
  EXPECT_EQ((*model)->num_params(),
            5u * 7 + 7 + 7 * 4 + 4 + 2 * (3 * 16 + 16 * 3 + 16) + 16 * 6 + 6 + 6 + 1);
}

TEST(DlrmModelCreateTest, CriteoShape) {
  auto backend = CpuBackendFactory::Create();
  ASSERT_TRUE(backend.ok());
  DlrmDenseModelOptions options;  // the Criteo defaults
  options.max_batch_size = 16;
  auto model = DlrmDenseModel::Create(backend->get(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->interaction_width(), 367);
  EXPECT_EQ((*model)->top_mlp().input_width(), 367);
  EXPECT_EQ((*model)->num_params(), 13u * 512 + 512 + 512 * 256 + 256 + 256 * 64 + 64 + 64 * 16 +
                                        16 + 367 * 512 + 512 + 512 * 256 + 256 + 256 + 1);
}

}  // namespace
}  // namespace dlrm::dense::testing
