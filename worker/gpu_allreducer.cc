// The NCCL implementation of DeviceAllReducer (built only when DLRM_CUDA_ENABLED).
#include "worker/gpu_allreducer.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/nccl_comm.h"

namespace dlrm::worker {
namespace {

using dense::cuda::NcclCommunicator;

class NcclAllReducerImpl : public NcclAllReducer {
 public:
  NcclAllReducerImpl(dense::Backend* backend, std::unique_ptr<NcclCommunicator> comm)
      : backend_(backend), comm_(std::move(comm)) {}
  ~NcclAllReducerImpl() override {
    if (staging_ != nullptr) backend_->Deallocate(staging_);
  }

  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->world_size(); }

  absl::Status AllReduceSumDevice(float* device_data, size_t count) override {
    return comm_->AllReduceSum(device_data, count);
  }

  absl::Status AllReduceSum(float* data, size_t count) override {
    // Every rank calls this, even with count 0 (a barrier): sum at least one float.
    const size_t n = count > 0 ? count : 1;
    if (n > staging_floats_) {
      if (staging_ != nullptr) backend_->Deallocate(staging_);
      staging_ = backend_->Allocate(n);
      staging_floats_ = n;
    }
    if (count > 0) {
      backend_->CopyFromHost(data, staging_, count);
    } else {
      backend_->Fill(staging_, 1, 0.0f);
    }
    DLRM_RETURN_IF_ERROR(comm_->AllReduceSum(staging_, n));
    if (count > 0) {
      backend_->CopyToHost(staging_, data, count);  // waits for the stream
    } else {
      backend_->Synchronize();
    }
    return absl::OkStatus();
  }

 private:
  dense::Backend* backend_;
  std::unique_ptr<NcclCommunicator> comm_;
  float* staging_ = nullptr;  // device memory for host-buffer reductions
  size_t staging_floats_ = 0;
};

}  // namespace

bool NcclAllReducer::Available() { return NcclCommunicator::Available(); }

absl::StatusOr<std::unique_ptr<NcclAllReducer>> NcclAllReducer::Create(
    const NcclAllReducerOptions& options) {
  if (!NcclCommunicator::Available()) {
    return absl::UnimplementedError("NCCL allreduce: this binary was built without NCCL");
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL allreduce: rank ", options.rank,
                                                   " out of range for world size ",
                                                   options.world_size));
  }
  if (options.backend == nullptr || options.backend->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError("NCCL allreduce needs a CUDA dense backend");
  }
  std::string id;
  if (options.world_size == 1) {
    DLRM_ASSIGN_OR_RETURN(id, NcclCommunicator::GetUniqueIdBytes());
  } else if (options.rank == 0) {
    if (!options.publish) return absl::InvalidArgumentError("NCCL allreduce: no publish function");
    DLRM_ASSIGN_OR_RETURN(id, NcclCommunicator::GetUniqueIdBytes());
    DLRM_RETURN_IF_ERROR(Annotate(options.publish(options.key, absl::BytesToHexString(id)),
                                  absl::StrCat("publishing the NCCL id under ", options.key)));
  } else {
    if (!options.fetch) return absl::InvalidArgumentError("NCCL allreduce: no fetch function");
    absl::StatusOr<std::string> hex = options.fetch(options.key);
    DLRM_RETURN_IF_ERROR(
        Annotate(hex.status(), absl::StrCat("rank ", options.rank, ": NCCL id ", options.key)));
    id = absl::HexStringToBytes(*hex);
    if (absl::BytesToHexString(id) != absl::AsciiStrToLower(*hex)) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL id under ", options.key, " is not hex: '", hex->substr(0, 32), "'"));
    }
  }
  DLRM_ASSIGN_OR_RETURN(auto comm,
                        NcclCommunicator::Create({.rank = options.rank,
                                                  .world_size = options.world_size,
                                                  .unique_id = id,
                                                  .backend = options.backend,
                                                  .init_timeout = options.init_timeout}));
  return std::unique_ptr<NcclAllReducer>(new NcclAllReducerImpl(options.backend, std::move(comm)));
}

}  // namespace dlrm::worker
