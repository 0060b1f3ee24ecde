// Every CUDA dense kernel against the CPU backend (the reference), on random inputs.
// Tolerances: fp32 kernels 1e-5 relative; GEMMs are bounded by rtol * sum_k |a_ik b_kj| with
// rtol 1e-5 (fp32), 2e-3 (TF32: 10-bit mantissa inputs) and 1e-2 (bf16: 7-bit mantissa inputs).
// Skipped without a GPU.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dense/cpu/cpu_backend.h"
#include "dense/cuda/cuda_backend.h"
#include "dense/cuda/nccl_comm.h"
#include "dense/cuda/pinned_buffer.h"
#include "dense/dlrm_model.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace dlrm::dense {
namespace {

using cuda_test::ExpectClose;
using cuda_test::RandomVector;

// The same inputs on the CPU and the GPU backend; frees everything at the end.
class DenseCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLRM_SKIP_WITHOUT_GPU();
    auto cpu = CpuBackend::Create({});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = cuda::CreateCudaBackend(math_mode(), 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }
  virtual MathMode math_mode() const { return MathMode::kFp32; }
  void TearDown() override {
    for (auto& [backend, ptr] : allocations_) backend->Deallocate(ptr);
  }

  float* Up(Backend* backend, const std::vector<float>& host) {
    float* ptr = backend->Allocate(host.size());
    allocations_.push_back({backend, ptr});
    backend->CopyFromHost(host.data(), ptr, host.size());
    return ptr;
  }
  std::vector<float> Down(Backend* backend, const float* ptr, size_t n) {
    std::vector<float> host(n);
    backend->Synchronize();
    backend->CopyToHost(ptr, host.data(), n);
    return host;
  }

  // Three forward, backward and optimizer steps of one model on each backend, compared.
  void ExpectTrainingStepsMatch(const DlrmDenseModelOptions& options);

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
  std::vector<std::pair<Backend*, float*>> allocations_;
};

TEST_F(DenseCudaTest, DescribesItself) {
  EXPECT_EQ(gpu_->device(), Device::kCuda);
  EXPECT_EQ(gpu_->name(), "cuda:0 (fp32)");
  EXPECT_EQ(cuda::CudaDeviceOf(*gpu_), 0);
  EXPECT_NE(cuda::CudaStreamOf(*gpu_), nullptr);
  EXPECT_EQ(cuda::CudaStreamOf(*cpu_), nullptr);
}

TEST_F(DenseCudaTest, RejectsBadDeviceOrdinal) {
  auto bad = cuda::CreateCudaBackend(MathMode::kFp32, 4096);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("4096"), std::string::npos);
}

TEST_F(DenseCudaTest, MemoryRoundTripCopyAndFill) {
  const auto host = RandomVector(1000, 1);
  float* a = Up(gpu_.get(), host);
  float* b = gpu_->Allocate(1000);
  allocations_.push_back({gpu_.get(), b});
  gpu_->Copy(a, b, 1000);
  EXPECT_EQ(Down(gpu_.get(), b, 1000), host);
  gpu_->Fill(b + 10, 7, 2.5f);
  gpu_->Fill(b + 20, 3, 0.0f);
  auto filled = Down(gpu_.get(), b, 1000);
  for (int i = 0; i < 1000; ++i) {
    const float want = (i >= 10 && i < 17) ? 2.5f : (i >= 20 && i < 23) ? 0.0f : host[i];
    ASSERT_EQ(filled[i], want) << i;
  }
  EXPECT_EQ(gpu_->Allocate(0), nullptr);
}

struct GemmCase {
  MathMode mode;
  double rtol;
  int m, n, k;
};

class GemmCudaTest : public DenseCudaTest, public ::testing::WithParamInterface<GemmCase> {
 protected:
  MathMode math_mode() const override { return GetParam().mode; }
};

TEST_P(GemmCudaTest, MatchesCpuForEveryTransposition) {
  const GemmCase& c = GetParam();
  Backend* g = gpu_.get();
  const float alpha = 0.75f, beta = 0.5f;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const auto a = RandomVector(size_t{1} * c.m * c.k, 10 + ta);
      const auto b = RandomVector(size_t{1} * c.k * c.n, 20 + tb);
      const auto c0 = RandomVector(size_t{1} * c.m * c.n, 30);
      float* ca = Up(cpu_.get(), a);
      float* cb = Up(cpu_.get(), b);
      float* cc = Up(cpu_.get(), c0);
      cpu_->Gemm(ta, tb, c.m, c.n, c.k, alpha, ca, cb, beta, cc);
      float* ga = Up(g, a);
      float* gb = Up(g, b);
      float* gc = Up(g, c0);
      g->Gemm(ta, tb, c.m, c.n, c.k, alpha, ga, gb, beta, gc);
      // Scale of each element: |alpha| sum_k |a_ik b_kj| + |beta c_ij|.
      std::vector<float> scale(size_t{1} * c.m * c.n);
      for (int i = 0; i < c.m; ++i) {
        for (int j = 0; j < c.n; ++j) {
          double s = 0;
          for (int p = 0; p < c.k; ++p) {
            const float av = ta ? a[size_t{1} * p * c.m + i] : a[size_t{1} * i * c.k + p];
            const float bv = tb ? b[size_t{1} * j * c.k + p] : b[size_t{1} * p * c.n + j];
            s += std::fabs(av * bv);
          }
          scale[size_t{1} * i * c.n + j] =
              static_cast<float>(alpha * s + beta * std::fabs(c0[size_t{1} * i * c.n + j]));
        }
      }
      ExpectClose(Down(g, gc, scale.size()), Down(cpu_.get(), cc, scale.size()), c.rtol, 1e-6,
                  "gemm", &scale);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GemmCudaTest,
                         ::testing::Values(GemmCase{MathMode::kFp32, 1e-5, 37, 53, 29},
                                           GemmCase{MathMode::kFp32, 1e-5, 128, 256, 367},
                                           GemmCase{MathMode::kTf32, 2e-3, 128, 256, 367},
                                           GemmCase{MathMode::kBf16, 1e-2, 128, 256, 367},
                                           GemmCase{MathMode::kBf16, 1e-2, 5, 3, 1}),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           const char* mode = info.param.mode == MathMode::kFp32   ? "fp32"
                                              : info.param.mode == MathMode::kTf32 ? "tf32"
                                                                                   : "bf16";
                           return std::string(mode) + "_" + std::to_string(info.param.m) + "x" +
                                  std::to_string(info.param.n) + "x" + std::to_string(info.param.k);
                         });

TEST_F(DenseCudaTest, BiasActivationAndReluBackward) {
  for (int cols : {64, 13}) {  // float4 path and scalar path
    for (bool relu : {false, true}) {
      SCOPED_TRACE(testing::Message() << "cols=" << cols << " relu=" << relu);
      const int rows = 33;
      const auto y = RandomVector(size_t{1} * rows * cols, 40);
      const auto bias = RandomVector(cols, 41);
      float* cy = Up(cpu_.get(), y);
      float* gy = Up(gpu_.get(), y);
      cpu_->BiasActivation(cy, Up(cpu_.get(), bias), rows, cols, relu);
      gpu_->BiasActivation(gy, Up(gpu_.get(), bias), rows, cols, relu);
      const auto want = Down(cpu_.get(), cy, y.size());
      ExpectClose(Down(gpu_.get(), gy, y.size()), want, 1e-6, 0, "bias_activation");
      // Backward through the ReLU output just computed.
      const auto dy = RandomVector(y.size(), 42);
      float* cdy = Up(cpu_.get(), dy);
      float* gdy = Up(gpu_.get(), dy);
      cpu_->ReluBackward(cy, cdy, dy.size());
      gpu_->ReluBackward(gy, gdy, dy.size());
      EXPECT_EQ(Down(gpu_.get(), gdy, dy.size()), Down(cpu_.get(), cdy, dy.size()));
    }
  }
}

// The element-wise pieces of the DCNv2 cross layers and of the concatenation around them.
TEST_F(DenseCudaTest, CrossLayerElementWiseOpsAndStridedCopiesMatchCpu) {
  const size_t n = 3 * 1000 + 7;  // not a multiple of a block or of 4
  const auto x0 = RandomVector(n, 50), h = RandomVector(n, 51), xl = RandomVector(n, 52);
  const auto g = RandomVector(n, 53), acc = RandomVector(n, 54);
  float* c_out = Up(cpu_.get(), xl);  // out aliases xl, as the contract allows
  float* g_out = Up(gpu_.get(), xl);
  cpu_->CrossCombine(Up(cpu_.get(), x0), Up(cpu_.get(), h), c_out, c_out, n);
  gpu_->CrossCombine(Up(gpu_.get(), x0), Up(gpu_.get(), h), g_out, g_out, n);
  // The GPU contracts a * b + c into one FMA (one rounding, not two), so the two results agree
  // to the size of the terms, not of the sum (which can cancel).
  std::vector<float> cross_scale(n), dx0_scale(n);
  for (size_t i = 0; i < n; ++i) {
    cross_scale[i] = std::fabs(x0[i] * h[i]) + std::fabs(xl[i]);
    dx0_scale[i] = std::fabs(acc[i]) + std::fabs(g[i] * h[i]);
  }
  ExpectClose(Down(gpu_.get(), g_out, n), Down(cpu_.get(), c_out, n), 1e-6, 0, "cross_combine",
              &cross_scale);

  float* c_dh = Up(cpu_.get(), std::vector<float>(n, 9.0f));
  float* g_dh = Up(gpu_.get(), std::vector<float>(n, 9.0f));
  float* c_dx0 = Up(cpu_.get(), acc);
  float* g_dx0 = Up(gpu_.get(), acc);
  cpu_->CrossCombineBackward(Up(cpu_.get(), x0), Up(cpu_.get(), h), Up(cpu_.get(), g), c_dh, c_dx0,
                             n);
  gpu_->CrossCombineBackward(Up(gpu_.get(), x0), Up(gpu_.get(), h), Up(gpu_.get(), g), g_dh, g_dx0,
                             n);
  ExpectClose(Down(gpu_.get(), g_dh, n), Down(cpu_.get(), c_dh, n), 1e-6, 0, "dh");
  ExpectClose(Down(gpu_.get(), g_dx0, n), Down(cpu_.get(), c_dx0, n), 1e-6, 0, "dx0", &dx0_scale);

  float* c_y = Up(cpu_.get(), acc);
  float* g_y = Up(gpu_.get(), acc);
  cpu_->Axpy(-0.5f, Up(cpu_.get(), g), c_y, n);
  gpu_->Axpy(-0.5f, Up(gpu_.get(), g), g_y, n);
  ExpectClose(Down(gpu_.get(), g_y, n), Down(cpu_.get(), c_y, n), 1e-6, 0, "axpy");

  // Columns 3..9 of a 37 x 20 matrix into columns 5..11 of a 37 x 16 one; the rest untouched.
  const auto src = RandomVector(37 * 20, 55), dst = RandomVector(37 * 16, 56);
  float* c_dst = Up(cpu_.get(), dst);
  float* g_dst = Up(gpu_.get(), dst);
  cpu_->Copy2D(Up(cpu_.get(), src) + 3, 20, c_dst + 5, 16, 37, 7);
  gpu_->Copy2D(Up(gpu_.get(), src) + 3, 20, g_dst + 5, 16, 37, 7);
  const auto want = Down(cpu_.get(), c_dst, dst.size());
  EXPECT_EQ(Down(gpu_.get(), g_dst, dst.size()), want);
  EXPECT_EQ(want[16 * 2 + 5], src[20 * 2 + 3]);
  EXPECT_EQ(want[16 * 2 + 4], dst[16 * 2 + 4]);
}

TEST_F(DenseCudaTest, ColumnSumIsAccurateAndDeterministic) {
  for (auto [rows, cols] : {std::pair{100, 64}, std::pair{2048, 37}, std::pair{16384, 16}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto dy = RandomVector(size_t{1} * rows * cols, 50);
    float* cdb = Up(cpu_.get(), std::vector<float>(cols, 7.0f));
    float* gdb = Up(gpu_.get(), std::vector<float>(cols, 7.0f));
    cpu_->ColumnSum(Up(cpu_.get(), dy), rows, cols, cdb);
    float* gdy = Up(gpu_.get(), dy);
    gpu_->ColumnSum(gdy, rows, cols, gdb);
    std::vector<float> scale(cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) scale[c] += std::fabs(dy[size_t{1} * r * cols + c]);
    }
    const auto first = Down(gpu_.get(), gdb, cols);
    ExpectClose(first, Down(cpu_.get(), cdb, cols), 1e-5, 0, "column_sum", &scale);
    gpu_->ColumnSum(gdy, rows, cols, gdb);
    EXPECT_EQ(Down(gpu_.get(), gdb, cols), first) << "same input, different bits";
  }
}

struct InteractionShape {
  int batch, tables, dim;
};

class InteractionCudaTest : public DenseCudaTest,
                            public ::testing::WithParamInterface<InteractionShape> {};

TEST_P(InteractionCudaTest, ForwardAndBackwardMatchCpu) {
  const auto [batch, tables, dim] = GetParam();
  const int width = dim + (tables + 1) * tables / 2;
  const auto bottom = RandomVector(size_t{1} * batch * dim, 60);
  const auto emb = RandomVector(size_t{1} * batch * tables * dim, 61);
  const auto dout = RandomVector(size_t{1} * batch * width, 62);
  const size_t out_n = size_t{1} * batch * width;
  float* cb = Up(cpu_.get(), bottom);
  float* ce = Up(cpu_.get(), emb);
  float* gb = Up(gpu_.get(), bottom);
  float* ge = Up(gpu_.get(), emb);
  float* cout = Up(cpu_.get(), std::vector<float>(out_n, 9.0f));
  float* gout = Up(gpu_.get(), std::vector<float>(out_n, 9.0f));
  cpu_->InteractionForward(cb, ce, batch, tables, dim, cout);
  gpu_->InteractionForward(gb, ge, batch, tables, dim, gout);
  // Dots of `dim` products of values in (-1, 1): absolute error scale dim * 1e-7.
  ExpectClose(Down(gpu_.get(), gout, out_n), Down(cpu_.get(), cout, out_n), 1e-5, dim * 1e-6,
              "interaction_forward");

  float* cdb = Up(cpu_.get(), std::vector<float>(bottom.size(), 9.0f));
  float* cde = Up(cpu_.get(), std::vector<float>(emb.size(), 9.0f));
  float* gdb = Up(gpu_.get(), std::vector<float>(bottom.size(), 9.0f));
  float* gde = Up(gpu_.get(), std::vector<float>(emb.size(), 9.0f));
  cpu_->InteractionBackward(cb, ce, Up(cpu_.get(), dout), batch, tables, dim, cdb, cde);
  gpu_->InteractionBackward(gb, ge, Up(gpu_.get(), dout), batch, tables, dim, gdb, gde);
  const double atol = (tables + 1) * 1e-6;
  ExpectClose(Down(gpu_.get(), gdb, bottom.size()), Down(cpu_.get(), cdb, bottom.size()), 1e-5,
              atol, "interaction_dbottom");
  ExpectClose(Down(gpu_.get(), gde, emb.size()), Down(cpu_.get(), cde, emb.size()), 1e-5, atol,
              "interaction_demb");
}

INSTANTIATE_TEST_SUITE_P(Shapes, InteractionCudaTest,
                         ::testing::Values(InteractionShape{67, 26, 16},  // kaggle-shape
                                           InteractionShape{9, 8, 64},    // model1
                                           InteractionShape{5, 3, 5},     // odd sizes
                                           InteractionShape{3, 100, 128}  // > 48 KB per sample
                                           ),
                         [](const ::testing::TestParamInfo<InteractionShape>& info) {
                           return std::to_string(info.param.batch) + "x" +
                                  std::to_string(info.param.tables) + "x" +
                                  std::to_string(info.param.dim);
                         });

TEST_F(DenseCudaTest, SigmoidBinaryCrossEntropyIsStable) {
  for (int batch : {1, 1000, 5000}) {
    SCOPED_TRACE(testing::Message() << "batch=" << batch);
    auto logits = RandomVector(batch, 70, -8.0f, 8.0f);
    if (batch > 2) {
      logits[0] = 60.0f;  // exp overflows a naive formula
      logits[1] = -60.0f;
    }
    auto labels = RandomVector(batch, 71, 0.0f, 1.0f);
    for (float& y : labels) y = y < 0.5f ? 0.0f : 1.0f;
    float* cp = Up(cpu_.get(), std::vector<float>(batch, 9.0f));
    float* cd = Up(cpu_.get(), std::vector<float>(batch, 9.0f));
    float* gp = Up(gpu_.get(), std::vector<float>(batch, 9.0f));
    float* gd = Up(gpu_.get(), std::vector<float>(batch, 9.0f));
    const double want = cpu_->SigmoidBinaryCrossEntropy(Up(cpu_.get(), logits),
                                                        Up(cpu_.get(), labels), batch, cp, cd);
    const double got = gpu_->SigmoidBinaryCrossEntropy(Up(gpu_.get(), logits),
                                                       Up(gpu_.get(), labels), batch, gp, gd);
    ASSERT_TRUE(std::isfinite(got));
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-6);
    ExpectClose(Down(gpu_.get(), gp, batch), Down(cpu_.get(), cp, batch), 1e-5, 1e-7, "probs");
    ExpectClose(Down(gpu_.get(), gd, batch), Down(cpu_.get(), cd, batch), 1e-5, 1e-9, "dlogits");
  }
}

TEST_F(DenseCudaTest, OptimizersMatchCpuOverSeveralSteps) {
  for (auto type :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    SCOPED_TRACE(DenseOptimizerTypeName(type));
    DenseOptimizerOptions options;
    options.type = type;
    options.learning_rate = 0.05f;
    options.weight_decay = 0.01f;
    const size_t count = 1001;
    const size_t state_n = count * DenseOptimizerStateFloats(type);
    const auto params = RandomVector(count, 80);
    float* cparams = Up(cpu_.get(), params);
    float* gparams = Up(gpu_.get(), params);
    float* cstate = state_n ? Up(cpu_.get(), std::vector<float>(state_n, 0.0f)) : nullptr;
    float* gstate = state_n ? Up(gpu_.get(), std::vector<float>(state_n, 0.0f)) : nullptr;
    for (int step = 1; step <= 3; ++step) {
      const auto grads = RandomVector(count, 81 + step);
      cpu_->OptimizerStep(options, step, cparams, Up(cpu_.get(), grads), cstate, count);
      gpu_->OptimizerStep(options, step, gparams, Up(gpu_.get(), grads), gstate, count);
    }
    ExpectClose(Down(gpu_.get(), gparams, count), Down(cpu_.get(), cparams, count), 1e-5, 1e-7,
                "params");
    if (state_n) {
      ExpectClose(Down(gpu_.get(), gstate, state_n), Down(cpu_.get(), cstate, state_n), 1e-5, 1e-7,
                  "state");
    }
  }
}

DlrmDenseModelOptions TrainingStepOptions(Interaction interaction) {
  DlrmDenseModelOptions options;
  options.num_dense_features = 13;
  options.bottom_widths = {64, 16};
  options.top_widths = {64, 32, 1};
  options.num_tables = 5;
  options.embedding_dim = 16;
  options.interaction = interaction;
  options.cross_layers = 3;
  options.low_rank = 32;
  options.max_batch_size = 128;
  options.seed = 7;
  options.optimizer.type = DenseOptimizerType::kAdam;
  options.optimizer.learning_rate = 0.01f;
  return options;
}

// The whole dense training step (forward, loss, backward, optimizer) on both backends.
TEST_F(DenseCudaTest, TrainingStepMatchesCpu) {
  ExpectTrainingStepsMatch(TrainingStepOptions(Interaction::kDot));
}

TEST_F(DenseCudaTest, DcnV2TrainingStepMatchesCpu) {
  ExpectTrainingStepsMatch(TrainingStepOptions(Interaction::kDcnV2));
}

void DenseCudaTest::ExpectTrainingStepsMatch(const DlrmDenseModelOptions& options) {
  auto cpu_model = DlrmDenseModel::Create(cpu_.get(), options);
  auto gpu_model = DlrmDenseModel::Create(gpu_.get(), options);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  const int batch = 128;
  const size_t emb_n = size_t{1} * batch * options.num_tables * options.embedding_dim;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const auto dense_in = RandomVector(size_t{1} * batch * 13, 90 + step);
    const auto emb = RandomVector(emb_n, 100 + step);
    auto labels = RandomVector(batch, 110 + step, 0.0f, 1.0f);
    for (float& y : labels) y = y < 0.5f ? 0.0f : 1.0f;
    float* cdemb = Up(cpu_.get(), std::vector<float>(emb_n, 0.0f));
    float* gdemb = Up(gpu_.get(), std::vector<float>(emb_n, 0.0f));
    const float cpu_loss = (*cpu_model)
                               ->TrainStep(Up(cpu_.get(), dense_in), Up(cpu_.get(), emb),
                                           Up(cpu_.get(), labels), batch, cdemb);
    const float gpu_loss = (*gpu_model)
                               ->TrainStep(Up(gpu_.get(), dense_in), Up(gpu_.get(), emb),
                                           Up(gpu_.get(), labels), batch, gdemb);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-4 * std::fabs(cpu_loss));
    ExpectClose(Down(gpu_.get(), gdemb, emb_n), Down(cpu_.get(), cdemb, emb_n), 1e-3, 1e-6, "demb");
    (*cpu_model)->ApplyOptimizer();
    (*gpu_model)->ApplyOptimizer();
  }
  const size_t n = (*cpu_model)->num_params();
  ASSERT_EQ((*gpu_model)->num_params(), n);
  ExpectClose(Down(gpu_.get(), (*gpu_model)->params(), n),
              Down(cpu_.get(), (*cpu_model)->params(), n), 1e-4, 1e-6, "params after 3 steps");
}

// Double-buffered staging: each slot's batch arrives intact on the device while the other slot's
// pinned buffer is being refilled.
TEST_F(DenseCudaTest, PinnedStagingDeliversEveryBatch) {
  auto copier = cuda::AsyncH2DCopier::Create(gpu_.get(), 2);
  ASSERT_TRUE(copier.ok()) << copier.status();
  const size_t n = 1 << 16;
  std::unique_ptr<cuda::PinnedBuffer> pinned[2];
  float* device[2];
  for (int s = 0; s < 2; ++s) {
    auto buffer = cuda::PinnedBuffer::Create(n * sizeof(float));
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    pinned[s] = std::move(*buffer);
    device[s] = Up(gpu_.get(), std::vector<float>(n, 0.0f));
  }
  float* sums = Up(gpu_.get(), std::vector<float>(6, 0.0f));
  gpu_->Synchronize();  // the zero uploads above must not race the copy stream
  std::vector<float> want(6);
  for (int i = 0; i < 6; ++i) {
    const int s = i % 2;
    ASSERT_TRUE((*copier)->WaitSlotCopied(s).ok());
    const auto batch = RandomVector(n, 200 + i);
    std::copy(batch.begin(), batch.end(), pinned[s]->as<float>());
    double total = 0;
    for (float x : batch) total += x;
    want[i] = static_cast<float>(total);
    ASSERT_TRUE((*copier)->CopyAsync(s, pinned[s]->data(), device[s], n * sizeof(float)).ok());
    ASSERT_TRUE((*copier)->ComputeWaitsForSlot(s).ok());
    gpu_->ColumnSum(device[s], static_cast<int>(n), 1, sums + i);  // reads the slot
    ASSERT_TRUE((*copier)->ReleaseSlot(s).ok());
  }
  ExpectClose(Down(gpu_.get(), sums, 6), want, 1e-4, 1e-3, "batch sums");
  EXPECT_EQ((*copier)->CopyAsync(2, nullptr, nullptr, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

// One rank: the allreduce is the identity, and the bootstrap path (unique id bytes) works.
TEST_F(DenseCudaTest, NcclSingleRankAllReduce) {
  if (!cuda::NcclCommunicator::Available()) GTEST_SKIP() << "built without NCCL";
  auto id = cuda::NcclCommunicator::GetUniqueIdBytes();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
  cuda::NcclCommunicatorOptions options;
  options.rank = 0;
  options.world_size = 1;
  options.unique_id = *id;
  options.backend = gpu_.get();
  auto comm = cuda::NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const auto values = RandomVector(1000, 300);
  float* data = Up(gpu_.get(), values);
  ASSERT_TRUE((*comm)->AllReduceSum(data, values.size()).ok());
  EXPECT_EQ(Down(gpu_.get(), data, values.size()), values);
  options.unique_id = "short";
  EXPECT_EQ(cuda::NcclCommunicator::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlrm::dense
