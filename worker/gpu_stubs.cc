// The GPU pieces of the worker in a build without CUDA: every factory answers UNIMPLEMENTED, so
// callers fall back to (or report) the CPU path. Replaced by gpu_embeddings.cc, gpu_hot_rows.cc,
// gpu_input.cc and gpu_allreducer.cc when DLRM_CUDA_ENABLED.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/gpu_allreducer.h"
#include "worker/gpu_embeddings.h"
#include "worker/gpu_hot_rows.h"
#include "worker/gpu_input.h"

namespace dlrm::worker {
namespace {

absl::Status NoCuda(const char* what) {
  return absl::UnimplementedError(
      absl::StrCat(what,
                   ": this binary was built without CUDA (configure with "
                   "-DDLRM_WITH_CUDA=ON on a machine with nvcc)"));
}

}  // namespace

bool GpuEmbeddings::Available() { return false; }

absl::StatusOr<std::unique_ptr<GpuEmbeddings>> GpuEmbeddings::Create(const GpuEmbeddingsOptions&) {
  return NoCuda("GPU embedding tables");
}

absl::StatusOr<std::unique_ptr<GpuInputStager>> GpuInputStager::Create(dense::Backend*, int, int) {
  return NoCuda("GPU input staging");
}

bool GpuHotRows::Available() { return false; }

absl::StatusOr<std::unique_ptr<GpuHotRows>> GpuHotRows::Create(const GpuHotRowsOptions&) {
  return NoCuda("GPU hot rows");
}

bool NcclAllReducer::Available() { return false; }

absl::StatusOr<std::unique_ptr<NcclAllReducer>> NcclAllReducer::Create(
    const NcclAllReducerOptions&) {
  return NoCuda("NCCL allreduce");
}

}  // namespace dlrm::worker
