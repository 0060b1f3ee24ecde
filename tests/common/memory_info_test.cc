// What a process may fill (common/memory_info.h), read from folders of fake /proc and /sys files
// laid out as a Kubernetes container (cgroup v2, in a namespace), a cgroup v1 host with nested
// limits, a Docker container without a cgroup namespace, and a machine without cgroup files; and
// the parameter servers' budget check against those limits.
#include "common/memory_info.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

class MemoryInfoTest : public ::testing::Test {
 protected:
  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path p = std::filesystem::path(dir_.path()) / path;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  // A 32 GiB machine with 20 GiB available.
  void WriteMeminfo() {
    Write("proc/meminfo",
          "MemTotal:       33554432 kB\nMemFree:         1048576 kB\n"
          "MemAvailable:   20971520 kB\nBuffers:          100 kB\n");
  }
  MemoryInfo Read() { return ReadMemoryInfo(dir_.path()); }

  dlrm::testing::ScopedTempDir dir_{"memory_info_test"};
};

TEST_F(MemoryInfoTest, AMachineWithoutCgroupFilesHasOnlyItsMeminfo) {
  WriteMeminfo();
  const MemoryInfo info = Read();
  EXPECT_EQ(info.total_bytes, 32 * kGiB);
  EXPECT_EQ(info.available_bytes, 20 * kGiB);
  EXPECT_EQ(info.cgroup_limit_bytes, -1);
  EXPECT_EQ(info.AvailableBytes(), 20 * kGiB);
  EXPECT_EQ(info.LimitBytes(), 32 * kGiB);
  EXPECT_EQ(info.Describe(), "MemAvailable 20.0 GiB of MemTotal 32.0 GiB, no cgroup memory limit");
}

TEST_F(MemoryInfoTest, NothingReadableIsUnknownNotZero) {
  const MemoryInfo info = Read();
  EXPECT_EQ(info.AvailableBytes(), -1);
  EXPECT_EQ(info.LimitBytes(), -1);
}

// A container in a cgroup namespace sees its own cgroup at the mount's root: memory.max 6 GiB,
// memory.current 3 GiB of which 2 GiB anonymous memory; the 1 GiB of page cache (a build's
// files, say) the kernel drops before it kills, so it is not counted as used.
TEST_F(MemoryInfoTest, AContainersCgroupV2LimitBoundsWhatItCanFill) {
  WriteMeminfo();
  Write("proc/self/cgroup", "0::/\n");
  Write("sys/fs/cgroup/memory.max", "6442450944\n");
  Write("sys/fs/cgroup/memory.current", "3221225472\n");
  Write("sys/fs/cgroup/memory.stat",
        "anon 2147483648\nfile 1073741824\ninactive_file 1073741824\n");
  const MemoryInfo info = Read();
  EXPECT_EQ(info.cgroup_limit_bytes, 6 * kGiB);
  EXPECT_EQ(info.cgroup_used_bytes, 2 * kGiB);
  EXPECT_EQ(info.AvailableBytes(), 4 * kGiB);  // not the machine's 20 GiB
  EXPECT_EQ(info.LimitBytes(), 6 * kGiB);
  EXPECT_THAT(info.Describe(), HasSubstr("cgroup memory limit 6.0 GiB (2.0 GiB used)"));
}

// Shared memory (tmpfs) counts: the kernel cannot drop it; active page cache does not. Without
// memory.stat's breakdown the usage less the inactive page cache counts (the kubelet's working
// set); v1 names the subtree's counts total_rss and total_shmem.
TEST_F(MemoryInfoTest, SharedMemoryCountsAndWithoutABreakdownTheWorkingSetDoes) {
  WriteMeminfo();
  Write("proc/self/cgroup", "0::/\n");
  Write("sys/fs/cgroup/memory.max", "6442450944\n");
  Write("sys/fs/cgroup/memory.current", "5368709120\n");
  Write("sys/fs/cgroup/memory.stat",
        "anon 1073741824\nfile 4294967296\nshmem 1073741824\nactive_file 2147483648\n"
        "inactive_file 1073741824\n");
  EXPECT_EQ(Read().cgroup_used_bytes, 2 * kGiB);
  Write("sys/fs/cgroup/memory.stat", "inactive_file 1073741824\n");
  EXPECT_EQ(Read().cgroup_used_bytes, 4 * kGiB);

  Write("proc/self/cgroup", "4:memory:/\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "6442450944\n");
  Write("sys/fs/cgroup/memory/memory.usage_in_bytes", "5368709120\n");
  Write("sys/fs/cgroup/memory/memory.stat",
        "rss 1\ntotal_rss 1073741824\ntotal_shmem 536870912\ntotal_cache 4294967296\n");
  EXPECT_EQ(Read().cgroup_used_bytes, kGiB + 512 * kMiB);
}

TEST_F(MemoryInfoTest, CgroupV2WithoutALimitReadsMax) {
  WriteMeminfo();
  Write("proc/self/cgroup", "0::/\n");
  Write("sys/fs/cgroup/memory.max", "max\n");
  Write("sys/fs/cgroup/memory.current", "3221225472\n");
  const MemoryInfo info = Read();
  EXPECT_EQ(info.cgroup_limit_bytes, -1);
  EXPECT_EQ(info.AvailableBytes(), 20 * kGiB);
}

// cgroup v1, the process's own folder visible: the tightest of its folder and those above it
// counts (here the parent's 8 GiB with 7.5 GiB used, not the child's 16 GiB with 1 GiB used);
// v1 counts the subtree's page cache in total_inactive_file; unlimited is 2^63 less a page.
TEST_F(MemoryInfoTest, CgroupV1TakesTheTightestFolderOnThePath) {
  WriteMeminfo();
  Write("proc/self/cgroup", "12:pids:/a/b\n4:memory:/a/b\n0::/\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("sys/fs/cgroup/memory/memory.usage_in_bytes", "9000000000\n");
  Write("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "8589934592\n");
  Write("sys/fs/cgroup/memory/a/memory.usage_in_bytes", "8589934592\n");
  Write("sys/fs/cgroup/memory/a/memory.stat", "inactive_file 0\ntotal_inactive_file 536870912\n");
  Write("sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "17179869184\n");
  Write("sys/fs/cgroup/memory/a/b/memory.usage_in_bytes", "1073741824\n");
  const MemoryInfo info = Read();
  EXPECT_EQ(info.cgroup_limit_bytes, 8 * kGiB);
  EXPECT_EQ(info.cgroup_used_bytes, 8 * kGiB - 512 * kMiB);
  EXPECT_EQ(info.AvailableBytes(), 512 * kMiB);
  EXPECT_EQ(info.LimitBytes(), 8 * kGiB);
}

// Docker without a cgroup namespace: /proc/self/cgroup names /docker/ID, which the container
// does not see; its own cgroup is what is mounted.
TEST_F(MemoryInfoTest, APathTheContainerCannotSeeFallsBackToTheMount) {
  WriteMeminfo();
  Write("proc/self/cgroup", "9:memory:/docker/0123abcd\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
  Write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  const MemoryInfo info = Read();
  EXPECT_EQ(info.cgroup_limit_bytes, 2 * kGiB);
  EXPECT_EQ(info.AvailableBytes(), 1 * kGiB);
}

TEST(MemoryBudgetTest, ABudgetPastTheLimitIsRefusedNamingItAndTheLimit) {
  MemoryInfo info;
  info.total_bytes = 32 * kGiB;
  info.available_bytes = 1 * kGiB;  // what is free now does not matter: rows come later
  info.cgroup_limit_bytes = 6 * kGiB;
  info.cgroup_used_bytes = 1 * kGiB;
  EXPECT_TRUE(CheckMemoryBudgetFits(6 * kGiB, 1, "--memory-budget 6GiB", info).ok());
  const absl::Status one = CheckMemoryBudgetFits(6 * kGiB + 1, 1, "--memory-budget X", info);
  EXPECT_EQ(one.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(one.message()),
              HasSubstr("--memory-budget X (6442450945 bytes) is more memory than this process "
                        "can ever hold (MemAvailable 1.0 GiB of MemTotal 32.0 GiB, cgroup memory "
                        "limit 6.0 GiB (1.0 GiB used))"));
  // dlrm local: every parameter server of the machine has the budget.
  EXPECT_TRUE(CheckMemoryBudgetFits(3 * kGiB, 2, "--memory-budget 3GiB", info).ok());
  const absl::Status three = CheckMemoryBudgetFits(3 * kGiB, 3, "--memory-budget 3GiB", info);
  EXPECT_EQ(three.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(three.message()),
              HasSubstr("--memory-budget 3GiB (3221225472 bytes for each of 3 parameter "
                        "servers, 9.0 GiB in all) is more"));
  // A budget too big to multiply still gets its message.
  EXPECT_FALSE(CheckMemoryBudgetFits(int64_t{1} << 62, 8, "--memory-budget 4EiB", info).ok());
  EXPECT_TRUE(CheckMemoryBudgetFits(int64_t{1} << 62, 8, "--memory-budget 4EiB", MemoryInfo{}).ok())
      << "an unknown limit refuses nothing";
}

TEST(FormatBytesTest, OneDecimalInTheLargestUnitBelow1024) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(6 * kGiB), "6.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 62), "4.0 EiB");
}

}  // namespace
}  // namespace dlrm::common
