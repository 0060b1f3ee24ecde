#include "dense/backend_factory.h"

#include "dense/optimizer_options.h"
#include "gtest/gtest.h"

namespace dlrm::dense {
namespace {

TEST(BackendFactoryTest, ParsesNames) {
  EXPECT_EQ(*ParseDeviceKind("cpu"), BackendOptions::Kind::kCpu);
  EXPECT_EQ(*ParseDeviceKind("cuda"), BackendOptions::Kind::kCuda);
  EXPECT_EQ(*ParseDeviceKind("auto"), BackendOptions::Kind::kAuto);
  auto bad = ParseDeviceKind("gpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'gpu'"), std::string::npos);
  EXPECT_EQ(*ParseMathMode("tf32"), MathMode::kTf32);
  EXPECT_FALSE(ParseMathMode("fp16").ok());
  for (auto t :
       {DenseOptimizerType::kSgd, DenseOptimizerType::kAdagrad, DenseOptimizerType::kAdam}) {
    EXPECT_EQ(*ParseDenseOptimizerType(DenseOptimizerTypeName(t)), t);
  }
  auto bad_opt = ParseDenseOptimizerType("rmsprop");
  EXPECT_NE(bad_opt.status().message().find("'rmsprop'"), std::string::npos);
}

TEST(BackendFactoryTest, CreatesCpuAndAuto) {
  auto cpu = CreateBackend({.kind = BackendOptions::Kind::kCpu, .cpu_threads = 1});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->device(), Device::kCpu);
  auto any = CreateBackend({.kind = BackendOptions::Kind::kAuto});
  ASSERT_TRUE(any.ok()) << any.status();
  if (!BuiltWithCuda()) {
    EXPECT_EQ((*any)->device(), Device::kCpu);
  }
  EXPECT_EQ(CreateBackend({.kind = BackendOptions::Kind::kCpu, .cpu_threads = -2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BackendFactoryTest, CudaWithoutCudaIsFailedPrecondition) {
  if (BuiltWithCuda()) {
    auto far = CreateBackend({.kind = BackendOptions::Kind::kCuda, .device_ordinal = 1000});
    EXPECT_EQ(far.status().code(), absl::StatusCode::kFailedPrecondition) << far.status();
    return;
  }
  auto cuda = CreateBackend({.kind = BackendOptions::Kind::kCuda});
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cuda.status().message().find("without CUDA"), std::string::npos) << cuda.status();
}

}  // namespace
}  // namespace dlrm::dense
