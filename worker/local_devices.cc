#include "worker/local_devices.h"

#include "absl/strings/str_cat.h"

namespace dlrm::worker {

absl::StatusOr<LocalWorkerPlacement> PlaceLocalWorkers(const std::string& device, int num_workers,
                                                       int visible_cuda_devices) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("workers' device '", device, "': expected auto, cpu or cuda"));
  }
  if (num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers: ", num_workers, " (must be >= 1)"));
  }
  LocalWorkerPlacement placement;
  placement.workers.assign(num_workers, LocalWorkerDevice{.device = device});
  if (device == "cpu") return placement;
  if (visible_cuda_devices >= num_workers) {
    for (int i = 0; i < num_workers; ++i) placement.workers[i].cuda_device = i;
    return placement;
  }
  if (device == "cuda") {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: ", num_workers, " workers need ", num_workers,
        " CUDA devices (NCCL gives each rank its own), ", visible_cuda_devices, " visible; use ",
        visible_cuda_devices > 0 ? absl::StrCat("--workers ", visible_cuda_devices, " or ") : "",
        "--device auto or cpu"));
  }
  if (visible_cuda_devices == 0) return placement;  // auto finds no device: the CPU
  for (LocalWorkerDevice& w : placement.workers) w.cuda_device = kNoCudaDevice;
  placement.note = absl::StrCat(
      num_workers, " workers and ", visible_cuda_devices,
      " CUDA device(s): NCCL needs a device for each worker, so the workers train on the CPU and "
      "a job asking for training.device cuda fails (--workers ",
      visible_cuda_devices, " trains on the GPUs)");
  return placement;
}

absl::StatusOr<std::string> WorkerTrainingDevice(const std::string& flag_device, int cuda_device,
                                                 const std::string& spec_device,
                                                 const std::string& why_no_device) {
  const std::string device =
      flag_device.empty() || flag_device == "auto" ? spec_device : flag_device;
  if (cuda_device != kNoCudaDevice) return device;
  if (device == "auto") return std::string("cpu");
  if (device == "cuda") {
    return absl::FailedPreconditionError(
        absl::StrCat("training.device cuda, but this worker has no CUDA device of its own (",
                     why_no_device, ")"));
  }
  return device;
}

}  // namespace dlrm::worker
