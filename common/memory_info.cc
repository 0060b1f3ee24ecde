#include "common/memory_info.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlrm::common {
namespace {

// Limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded down to a page).
constexpr int64_t kNoLimit = int64_t{1} << 60;

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> ReadNumber(const std::filesystem::path& path) {
  std::optional<std::string> text = ReadFile(path);
  int64_t value = 0;
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) return std::nullopt;
  return value;
}

// The value of `key` in a "key value [kB]" file (/proc/meminfo, memory.stat); kB become bytes.
std::optional<int64_t> ReadKey(const std::filesystem::path& path, absl::string_view key) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" :\t"), absl::SkipEmpty());
    int64_t value = 0;
    if (f.size() < 2 || f[0] != key || !absl::SimpleAtoi(f[1], &value)) continue;
    return f.size() > 2 && f[2] == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

// One cgroup hierarchy: where it is mounted and this process's folder in it.
struct Hierarchy {
  std::filesystem::path mount;
  std::string path;  // from /proc/self/cgroup, e.g. "/kubepods/pod1/c2" or "/" in a namespace
  bool v2 = false;
};

// The memory controller's hierarchy from /proc/self/cgroup: the v1 line naming "memory", else
// the v2 line ("0::/path").
std::optional<Hierarchy> FindHierarchy(const std::filesystem::path& root) {
  std::optional<std::string> text = ReadFile(root / "proc/self/cgroup");
  if (!text) return std::nullopt;
  std::optional<Hierarchy> v2;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      v2 = Hierarchy{root / "sys/fs/cgroup", std::string(f[2]), true};
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "memory") return Hierarchy{root / "sys/fs/cgroup/memory", std::string(f[2]), false};
    }
  }
  return v2;
}

// The folders whose limits bound this process: its own cgroup and every one above it up to the
// mount. Without a cgroup namespace a container's /proc/self/cgroup names a path the container
// does not see (its own cgroup is mounted at the root): then the mount's root alone.
std::vector<std::filesystem::path> CgroupFolders(const Hierarchy& h) {
  std::vector<std::filesystem::path> folders;
  std::filesystem::path rel = std::filesystem::path(h.path).relative_path();
  std::error_code ec;
  if (!rel.empty() && std::filesystem::is_directory(h.mount / rel, ec)) {
    for (; !rel.empty(); rel = rel.parent_path()) folders.push_back(h.mount / rel);
  }
  folders.push_back(h.mount);
  return folders;
}

}  // namespace

int64_t MemoryInfo::AvailableBytes() const {
  int64_t best = available_bytes;
  if (cgroup_limit_bytes >= 0 && cgroup_used_bytes >= 0) {
    const int64_t headroom = std::max<int64_t>(0, cgroup_limit_bytes - cgroup_used_bytes);
    best = best < 0 ? headroom : std::min(best, headroom);
  }
  return best;
}

int64_t MemoryInfo::LimitBytes() const {
  if (cgroup_limit_bytes < 0) return total_bytes;
  return total_bytes < 0 ? cgroup_limit_bytes : std::min(total_bytes, cgroup_limit_bytes);
}

std::string MemoryInfo::Describe() const {
  std::string out =
      absl::StrCat("MemAvailable ", available_bytes < 0 ? "unknown" : FormatBytes(available_bytes),
                   " of MemTotal ", total_bytes < 0 ? "unknown" : FormatBytes(total_bytes));
  if (cgroup_limit_bytes < 0) return absl::StrCat(out, ", no cgroup memory limit");
  return absl::StrCat(out, ", cgroup memory limit ", FormatBytes(cgroup_limit_bytes), " (",
                      cgroup_used_bytes < 0 ? "use unknown" : FormatBytes(cgroup_used_bytes),
                      " used)");
}

MemoryInfo ReadMemoryInfo(const std::string& root) {
  const std::filesystem::path base =
      root.empty() ? std::filesystem::path("/") : std::filesystem::path(root);
  MemoryInfo info;
  info.total_bytes = ReadKey(base / "proc/meminfo", "MemTotal").value_or(-1);
  info.available_bytes = ReadKey(base / "proc/meminfo", "MemAvailable").value_or(-1);
  std::optional<Hierarchy> h = FindHierarchy(base);
  if (!h) return info;
  // The folder with the least headroom under its limit bounds this process.
  int64_t least_headroom = std::numeric_limits<int64_t>::max();
  for (const std::filesystem::path& folder : CgroupFolders(*h)) {
    std::optional<int64_t> limit;
    if (h->v2) {
      // memory.max reads "max" when unlimited: no number, no limit.
      limit = ReadNumber(folder / "memory.max");
    } else {
      limit = ReadNumber(folder / "memory.limit_in_bytes");
    }
    if (!limit || *limit < 0 || *limit >= kNoLimit) continue;
    // What the kernel cannot take back short of killing: anonymous memory and shared memory
    // (tmpfs), not the page cache it drops first (a build's files can fill gigabytes of a
    // container's usage). v1 counts the subtree in its total_ keys.
    const std::filesystem::path stat = folder / "memory.stat";
    std::optional<int64_t> used = ReadKey(stat, h->v2 ? "anon" : "total_rss");
    if (used) {
      *used += ReadKey(stat, h->v2 ? "shmem" : "total_shmem").value_or(0);
    } else {
      // No breakdown: the usage less the inactive page cache (the kubelet's working set).
      used = ReadNumber(folder / (h->v2 ? "memory.current" : "memory.usage_in_bytes"));
      if (used) {
        std::optional<int64_t> cache =
            ReadKey(stat, h->v2 ? "inactive_file" : "total_inactive_file");
        if (!cache && !h->v2) cache = ReadKey(stat, "inactive_file");
        *used = std::max<int64_t>(0, *used - cache.value_or(0));
      }
    }
    const int64_t headroom = *limit - used.value_or(0);
    if (headroom < least_headroom) {
      least_headroom = headroom;
      info.cgroup_limit_bytes = *limit;
      info.cgroup_used_bytes = used.value_or(-1);
    }
  }
  return info;
}

absl::Status CheckMemoryBudgetFits(int64_t budget_bytes, int servers, absl::string_view flag,
                                   const MemoryInfo& info) {
  const int64_t limit = info.LimitBytes();
  if (limit < 0 || servers <= 0 || budget_bytes <= limit / servers) return absl::OkStatus();
  const std::string total =
      servers == 1
          ? std::string()
          : absl::StrCat(" for each of ", servers, " parameter servers, ",
                         FormatBytes(budget_bytes > std::numeric_limits<int64_t>::max() / servers
                                         ? std::numeric_limits<int64_t>::max()
                                         : budget_bytes * servers),
                         " in all");
  return absl::ResourceExhaustedError(absl::StrCat(
      flag, " (", budget_bytes, " bytes", total,
      ") is more memory than this process can ever hold (", info.Describe(),
      "): the memory tier would fill with rows until the kernel kills the server (OOMKilled in "
      "Kubernetes). Lower the budget (the chart's ps.memoryBudget), or raise the memory limit "
      "(resources.limits.memory)"));
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace dlrm::common
