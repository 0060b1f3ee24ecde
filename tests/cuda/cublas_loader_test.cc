// cuBLAS is opened on first use (dense/cuda/cublas_loader.h): these run without a GPU, since
// opening the library and resolving its entry points needs none.
#include "dense/cuda/cublas_loader.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace dlrm::dense::cuda {
namespace {

// Whether a library whose file name contains `name` is mapped into this process.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return absl::StrContains(text.str(), name);
}

TEST(CublasLoaderTest, NothingLoadsCublasUntilItIsAskedFor) {
  // A test binary linking the CUDA backend, as dlrm does: libcublasLt's start-up cost is not paid.
  EXPECT_FALSE(Mapped("libcublas")) << "cuBLAS was loaded at start-up";
  absl::StatusOr<const CublasApi*> api = Cublas();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_TRUE(Mapped(CublasLibraryName()));
  for (const void* fn :
       {(const void*)(*api)->create, (const void*)(*api)->destroy, (const void*)(*api)->set_stream,
        (const void*)(*api)->set_workspace, (const void*)(*api)->gemm_ex,
        (const void*)(*api)->status_name, (const void*)(*api)->status_string}) {
    EXPECT_NE(fn, nullptr);
  }
  // The same table every time.
  absl::StatusOr<const CublasApi*> again = Cublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *api);
}

TEST(CublasLoaderTest, StatusTextComesFromTheLibrary) {
  EXPECT_TRUE(absl::StartsWith(CublasLibraryName(), "libcublas.so."));
  EXPECT_TRUE(absl::StrContains(CublasStatusText(CUBLAS_STATUS_NOT_INITIALIZED),
                                "CUBLAS_STATUS_NOT_INITIALIZED"))
      << CublasStatusText(CUBLAS_STATUS_NOT_INITIALIZED);
}

}  // namespace
}  // namespace dlrm::dense::cuda
