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

// A worker's --cuda-device when no CUDA device is its own: a job asking `training.device: auto`
// trains on the CPU there, one asking `cuda` fails saying why (WorkerTrainingDevice).
inline constexpr int kNoCudaDevice = -1;

struct LocalWorkerDevice {
  std::string device;   // auto | cpu | cuda, the worker's --device
  int cuda_device = 0;  // its --cuda-device, or kNoCudaDevice
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
//  - fewer (but some): auto gives every worker kNoCudaDevice (jobs asking auto train on the CPU,
//    jobs asking cuda fail naming the counts) and says so in `note`; cuda is FAILED_PRECONDITION
//    naming both counts.
absl::StatusOr<LocalWorkerPlacement> PlaceLocalWorkers(const std::string& device, int num_workers,
                                                       int visible_cuda_devices);

// The device a worker's job trains on: the worker's --device `flag_device` unless it is auto (or
// empty), else the job's `training.device`. On a worker with `cuda_device` kNoCudaDevice, auto is
// the CPU and cuda is FAILED_PRECONDITION naming the job's request and `why_no_device`.
absl::StatusOr<std::string> WorkerTrainingDevice(const std::string& flag_device, int cuda_device,
                                                 const std::string& spec_device,
                                                 const std::string& why_no_device);

}  // namespace dlrm::worker
