// Denormals are flushed in every thread of a dlrm executable from its start, OpenBLAS's workers
// (they start before main) and oneDNN's OpenMP threads included, unless DLRM_DENORMALS=keep. This
// binary links common/denormals_at_start.cc as every dlrm executable does.

#include "common/denormals.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

bool KeepAsked() {
  const char* v = std::getenv("DLRM_DENORMALS");
  return v != nullptr && std::string(v) == "keep";
}

// C = A * B with every a = 2^-130 (a denormal) and every b = 2^30: each c is n * 2^-100 (a normal
// float) where denormal inputs are read as they are, and 0 where they are read as zero. n is large
// enough that the library splits the product over its threads, so every thread's part is checked.
// By OpenBLAS (cblas_sgemm) or oneDNN (dnnl_sgemm), the CPU backend's two GEMM libraries.
std::vector<float> DenormalProduct(int n, bool onednn) {
  uint32_t denormal_bits = 1u << 19;  // 2^-130: exponent field 0, mantissa 2^19 of 2^23
  float a_value;
  std::memcpy(&a_value, &denormal_bits, sizeof(a_value));
  std::vector<float> a(static_cast<size_t>(n) * n, a_value);
  std::vector<float> b(static_cast<size_t>(n) * n, 1073741824.0f);  // 2^30
  std::vector<float> c(static_cast<size_t>(n) * n, -1.0f);
  if (onednn) {
    EXPECT_EQ(dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n),
              dnnl_success);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  }
  return c;
}

constexpr int kN = 512;

TEST(Denormals, EveryThreadFlushesFromTheStart) {
  if (KeepAsked()) GTEST_SKIP() << "DLRM_DENORMALS=keep";
  EXPECT_TRUE(DenormalsFlushedInThisThread());
  bool child_flushes = false;
  std::thread([&] { child_flushes = DenormalsFlushedInThisThread(); }).join();
  EXPECT_TRUE(child_flushes);
  for (const bool onednn : {false, true}) {
    const std::vector<float> c = DenormalProduct(kN, onednn);
    int64_t nonzero = 0;
    for (float v : c) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, 0) << "of " << c.size() << " products of denormals by "
                          << (onednn ? "oneDNN" : "OpenBLAS") << ", with "
                          << openblas_get_num_threads() << " OpenBLAS threads";
  }
}

// Run by KeptWhenTheEnvironmentAsks in a child process with DLRM_DENORMALS=keep.
TEST(Denormals, ChildKeepsDenormals) {
  if (!KeepAsked()) GTEST_SKIP() << "runs in a child process with DLRM_DENORMALS=keep";
  EXPECT_FALSE(DenormalsFlushedInThisThread());
  const float expected = kN * 7.888609052210118e-31f;  // kN * 2^-100
  for (const bool onednn : {false, true}) {
    const std::vector<float> c = DenormalProduct(kN, onednn);
    int64_t wrong = 0;
    for (float v : c) wrong += v != expected;
    EXPECT_EQ(wrong, 0) << "of " << c.size() << " products by " << (onednn ? "oneDNN" : "OpenBLAS")
                        << ", expected " << expected;
  }
}

TEST(Denormals, KeptWhenTheEnvironmentAsks) {
  if (KeepAsked()) GTEST_SKIP() << "the parent test";
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  const std::string command = std::string("DLRM_DENORMALS=keep '") + self +
                              "' --gtest_filter=Denormals.ChildKeepsDenormals 2>&1";
  FILE* child = popen(command.c_str(), "r");
  ASSERT_NE(child, nullptr) << command;
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), child)) > 0;) output.append(buf, n);
  EXPECT_EQ(pclose(child), 0) << output;
  // It ran (not skipped, not filtered out) and passed.
  EXPECT_NE(output.find("[       OK ] Denormals.ChildKeepsDenormals"), std::string::npos) << output;
}

// Once set, the mode can also be set by a thread that did not inherit it.
TEST(Denormals, FlushDenormalsInThisThreadSetsTheMode) {
  bool flushed = false;
  std::thread([&] {
    FlushDenormalsInThisThread();
    flushed = DenormalsFlushedInThisThread();
  }).join();
  EXPECT_TRUE(flushed);
}

}  // namespace
}  // namespace dlrm::common
