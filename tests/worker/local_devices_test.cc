#include "worker/local_devices.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;

// (device, cuda_device) of each worker, for compact expectations.
std::vector<std::pair<std::string, int>> Devices(const LocalWorkerPlacement& placement) {
  std::vector<std::pair<std::string, int>> out;
  for (const LocalWorkerDevice& w : placement.workers) out.emplace_back(w.device, w.cuda_device);
  return out;
}

using Pairs = std::vector<std::pair<std::string, int>>;

TEST(PlaceLocalWorkersTest, EachWorkerGetsADeviceOfItsOwnWhenThereAreEnough) {
  absl::StatusOr<LocalWorkerPlacement> auto_two = PlaceLocalWorkers("auto", 2, 4);
  ASSERT_TRUE(auto_two.ok()) << auto_two.status();
  EXPECT_EQ(Devices(*auto_two), (Pairs{{"auto", 0}, {"auto", 1}}));
  EXPECT_EQ(auto_two->note, "");
  absl::StatusOr<LocalWorkerPlacement> cuda_three = PlaceLocalWorkers("cuda", 3, 3);
  ASSERT_TRUE(cuda_three.ok()) << cuda_three.status();
  EXPECT_EQ(Devices(*cuda_three), (Pairs{{"cuda", 0}, {"cuda", 1}, {"cuda", 2}}));
}

TEST(PlaceLocalWorkersTest, AutoWithTooFewDevicesTrainsOnTheCpuAndSaysWhy) {
  // Two workers on one GPU would both take device 0, and NCCL refuses two ranks on one device.
  absl::StatusOr<LocalWorkerPlacement> placement = PlaceLocalWorkers("auto", 2, 1);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(Devices(*placement), (Pairs{{"auto", kNoCudaDevice}, {"auto", kNoCudaDevice}}));
  EXPECT_THAT(placement->note, HasSubstr("2 workers and 1 CUDA device"));
  EXPECT_THAT(placement->note, HasSubstr("training.device cuda fails"));
  EXPECT_THAT(placement->note, HasSubstr("--workers 1"));
}

TEST(PlaceLocalWorkersTest, CudaWithTooFewDevicesIsRefusedNamingBothCounts) {
  absl::StatusOr<LocalWorkerPlacement> one = PlaceLocalWorkers("cuda", 2, 1);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(one.status().message(), HasSubstr("2 workers need 2 CUDA devices"));
  EXPECT_THAT(one.status().message(), HasSubstr("1 visible"));
  absl::StatusOr<LocalWorkerPlacement> none = PlaceLocalWorkers("cuda", 1, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("0 visible"));
}

TEST(PlaceLocalWorkersTest, CpuOrNoDeviceLeavesTheChoiceAsAsked) {
  absl::StatusOr<LocalWorkerPlacement> cpu = PlaceLocalWorkers("cpu", 2, 8);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(Devices(*cpu), (Pairs{{"cpu", 0}, {"cpu", 0}}));
  absl::StatusOr<LocalWorkerPlacement> none = PlaceLocalWorkers("auto", 3, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(Devices(*none), (Pairs{{"auto", 0}, {"auto", 0}, {"auto", 0}}));
  EXPECT_EQ(none->note, "");
}

TEST(PlaceLocalWorkersTest, BadArgumentsAreRefusedNamingTheValue) {
  absl::StatusOr<LocalWorkerPlacement> device = PlaceLocalWorkers("gpu", 2, 2);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("'gpu'"));
  absl::StatusOr<LocalWorkerPlacement> workers = PlaceLocalWorkers("auto", 0, 2);
  ASSERT_FALSE(workers.ok());
  EXPECT_THAT(workers.status().message(), HasSubstr("0"));
}

TEST(WorkerTrainingDeviceTest, TheFlagOverridesTheSpecUnlessItIsAuto) {
  EXPECT_EQ(WorkerTrainingDevice("cpu", 0, "cuda", "").value(), "cpu");
  EXPECT_EQ(WorkerTrainingDevice("cuda", 1, "cpu", "").value(), "cuda");
  EXPECT_EQ(WorkerTrainingDevice("auto", 0, "cuda", "").value(), "cuda");
  EXPECT_EQ(WorkerTrainingDevice("", 0, "auto", "").value(), "auto");
}

TEST(WorkerTrainingDeviceTest, AWorkerWithoutADeviceTrainsAutoOnTheCpuAndRefusesCuda) {
  // What `dlrm local` gives its workers when there are fewer GPUs than workers: a job that asks
  // for CUDA is told so instead of training on the CPU behind its back.
  EXPECT_EQ(WorkerTrainingDevice("auto", kNoCudaDevice, "auto", "why").value(), "cpu");
  EXPECT_EQ(WorkerTrainingDevice("auto", kNoCudaDevice, "cpu", "why").value(), "cpu");
  absl::StatusOr<std::string> cuda = WorkerTrainingDevice("auto", kNoCudaDevice, "cuda", "2 > 1");
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cuda.status().message(), HasSubstr("training.device cuda"));
  EXPECT_THAT(cuda.status().message(), HasSubstr("2 > 1"));
  EXPECT_FALSE(WorkerTrainingDevice("cuda", kNoCudaDevice, "auto", "why").ok());
}

}  // namespace
}  // namespace dlrm::worker
