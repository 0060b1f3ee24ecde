// The CUDA implementation of GpuInputStager (built only when DLRM_CUDA_ENABLED).
#include "worker/gpu_input.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/pinned_buffer.h"

namespace dlrm::worker {
namespace {

using dense::cuda::AsyncH2DCopier;
using dense::cuda::PinnedBuffer;

class CudaInputStager : public GpuInputStager {
 public:
  CudaInputStager(dense::Backend* backend, int max_batch, int num_dense)
      : backend_(backend), max_batch_(max_batch), num_dense_(num_dense) {}

  ~CudaInputStager() override {
    // Copies into the device buffers may still be queued: wait before freeing them.
    for (int s = 0; s < static_cast<int>(device_.size()); ++s) {
      if (copier_ != nullptr) (void)copier_->WaitSlotCopied(s);
    }
    backend_->Synchronize();
    for (float* p : device_) backend_->Deallocate(p);
  }

  absl::Status Init() {
    DLRM_ASSIGN_OR_RETURN(copier_, AsyncH2DCopier::Create(backend_, kSlots));
    const size_t floats = slot_floats();
    for (int s = 0; s < kSlots; ++s) {
      DLRM_ASSIGN_OR_RETURN(auto pinned, PinnedBuffer::Create(floats * sizeof(float)));
      pinned_.push_back(std::move(pinned));
      device_.push_back(backend_->Allocate(floats));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Staged> Stage(const Batch& batch) override {
    if (batch.size < 0 || batch.size > max_batch_ || batch.num_dense != num_dense_ ||
        batch.dense.size() != static_cast<size_t>(batch.size) * num_dense_ ||
        batch.labels.size() < static_cast<size_t>(batch.size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input staging: batch of ", batch.size, " samples x ", batch.num_dense,
                       " dense features (", batch.dense.size(), " floats, ", batch.labels.size(),
                       " labels) does not fit buffers of ", max_batch_, " x ", num_dense_));
    }
    const int slot = static_cast<int>(next_++ % kSlots);
    // The pinned slot may still be read by the copy issued two batches ago.
    DLRM_RETURN_IF_ERROR(copier_->WaitSlotCopied(slot));
    float* host = pinned_[slot]->as<float>();
    const size_t dense_floats = batch.dense.size();
    std::memcpy(host, batch.dense.data(), dense_floats * sizeof(float));
    float* host_labels = host + static_cast<size_t>(max_batch_) * num_dense_;
    std::memcpy(host_labels, batch.labels.data(), batch.size * sizeof(float));
    float* dev = device_[slot];
    float* dev_labels = dev + static_cast<size_t>(max_batch_) * num_dense_;
    DLRM_RETURN_IF_ERROR(copier_->CopyAsync(slot, host, dev, dense_floats * sizeof(float)));
    DLRM_RETURN_IF_ERROR(
        copier_->CopyAsync(slot, host_labels, dev_labels, batch.size * sizeof(float)));
    DLRM_RETURN_IF_ERROR(copier_->ComputeWaitsForSlot(slot));
    return Staged{.slot = slot, .dense = dev, .labels = dev_labels};
  }

  absl::Status Release(const Staged& staged) override { return copier_->ReleaseSlot(staged.slot); }

 private:
  static constexpr int kSlots = 2;
  size_t slot_floats() const {
    return static_cast<size_t>(max_batch_) * num_dense_ + static_cast<size_t>(max_batch_);
  }

  dense::Backend* backend_;
  int max_batch_;
  int num_dense_;
  int64_t next_ = 0;
  std::unique_ptr<AsyncH2DCopier> copier_;
  std::vector<std::unique_ptr<PinnedBuffer>> pinned_;
  std::vector<float*> device_;  // per slot: [max_batch x num_dense dense | max_batch labels]
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuInputStager>> GpuInputStager::Create(dense::Backend* backend,
                                                                       int max_batch,
                                                                       int num_dense) {
  if (backend == nullptr || backend->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError("input staging needs a CUDA dense backend");
  }
  if (max_batch <= 0 || num_dense < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input staging: max batch ", max_batch, ", dense features ", num_dense));
  }
  auto stager = std::make_unique<CudaInputStager>(backend, max_batch, num_dense);
  DLRM_RETURN_IF_ERROR(stager->Init());
  return std::unique_ptr<GpuInputStager>(std::move(stager));
}

}  // namespace dlrm::worker
