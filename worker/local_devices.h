// Where `dlrm local` puts its workers: which device each trains on. NCCL gives every rank a
// device of its own (two ranks on one GPU fail at NCCL's init), so N workers on CUDA need N
// visible devices, worker i on device i.
//
//   DLRM_ASSIGN_OR_RETURN(LocalWorkerPlacement placement,
//                         PlaceLocalWorkers("auto", 2, dense::VisibleCudaDevices()));
//   // placement.workers[i].device / .cuda_device -> worker i's --device / --cuda-device
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dlrm::worker {

struct LocalWorkerDevice {
  std::string device;   // auto | cpu | cuda, the worker's --device
  int cuda_device = 0;  // its --cuda-device
};

struct LocalWorkerPlacement {
  std::vector<LocalWorkerDevice> workers;
  // Why the workers do not train where `device` asked, for the log; "" when they do.
  std::string note;
};

// `device` is auto, cpu or cuda (INVALID_ARGUMENT otherwise); `num_workers` >= 1.
//  - cpu, or no CUDA device visible: every worker gets `device` (auto then trains on the CPU;
//    cuda is FAILED_PRECONDITION, naming the count, rather than N workers failing alike);
//  - at least as many devices as workers: worker i gets `device` on CUDA device i;
//  - fewer (but some): auto puts every worker on the CPU and says so in `note`; cuda is
//    FAILED_PRECONDITION naming both counts.
absl::StatusOr<LocalWorkerPlacement> PlaceLocalWorkers(const std::string& device, int num_workers,
                                                       int visible_cuda_devices);

}  // namespace dlrm::worker
