// Staging of input batches for a GPU worker: page-locked host buffers and host-to-device copies on
// a copy stream of their own, so that the copy of batch i+1 overlaps the compute of batch i.
//
// Typical double-buffered loop (slot = i % 2; pinned[slot] and device[slot] are per-slot buffers):
//
//   copier->WaitSlotCopied(slot);            // host: pinned[slot] is free to refill
//   ... parse batch i into pinned[slot] ...
//   copier->CopyAsync(slot, pinned[slot]->data(), device[slot], bytes);
//   copier->ComputeWaitsForSlot(slot);       // compute stream waits for the copy, host does not
//   ... enqueue forward/backward of batch i on the backend reading device[slot] ...
//   copier->ReleaseSlot(slot);               // next copy into device[slot] waits for that compute
//
// No CUDA types appear here. An AsyncH2DCopier is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dense/backend.h"

namespace dlrm::dense::cuda {

// Page-locked (pinned) host memory: copies from it run asynchronously at full PCIe/NVLink-C2C
// speed. Freed on destruction.
class PinnedBuffer {
 public:
  // RESOURCE_EXHAUSTED when the memory cannot be locked.
  static absl::StatusOr<std::unique_ptr<PinnedBuffer>> Create(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  PinnedBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

class AsyncH2DCopier {
 public:
  // `compute` must be a CUDA backend (not owned; must outlive the copier). `slots` is the number
  // of buffers in flight (2 for double buffering).
  static absl::StatusOr<std::unique_ptr<AsyncH2DCopier>> Create(Backend* compute, int slots = 2);
  ~AsyncH2DCopier();
  AsyncH2DCopier(const AsyncH2DCopier&) = delete;
  AsyncH2DCopier& operator=(const AsyncH2DCopier&) = delete;

  // Enqueues a copy of `bytes` from pinned host memory to device memory on the copy stream, after
  // the compute released by the last ReleaseSlot(slot). The source must stay untouched until
  // WaitSlotCopied(slot) returned.
  absl::Status CopyAsync(int slot, const void* pinned_src, void* device_dst, size_t bytes);
  // The compute stream waits (on the device) for every copy enqueued into `slot` so far.
  absl::Status ComputeWaitsForSlot(int slot);
  // Marks the compute enqueued so far as the last reader of the slot's device buffers.
  absl::Status ReleaseSlot(int slot);
  // The host waits until the slot's copies finished, so its pinned source may be refilled.
  absl::Status WaitSlotCopied(int slot);

  int slots() const { return static_cast<int>(copied_.size()); }

 private:
  AsyncH2DCopier() = default;
  absl::Status CheckSlot(int slot) const;

  int device_ = 0;
  void* compute_stream_ = nullptr;  // cudaStream_t
  void* copy_stream_ = nullptr;     // cudaStream_t, owned
  std::vector<void*> copied_;       // cudaEvent_t per slot: its last copy finished
  std::vector<void*> released_;     // cudaEvent_t per slot: its last reader finished
  std::vector<bool> released_recorded_;
};

}  // namespace dlrm::dense::cuda
