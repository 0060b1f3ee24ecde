// How much memory this process may use: the machine's (/proc/meminfo) and its control group's
// limit (cgroup v2 memory.max, or v1 memory.limit_in_bytes: a Kubernetes container's
// resources.limits.memory). Linux lets a process allocate more than there is and kills it when it
// touches the pages (the OOM killer's SIGKILL: no message, in Kubernetes OOMKilled and a
// restart), so whoever is about to fill memory it cannot have asks here first and refuses with a
// message that names the sizes:
//
//   - `dlrm train`, `eval` and `predict` initialise every table in process (EmbeddingTable):
//     the tables must fit in what is available now (LocalEmbeddingStore::Create).
//   - `dlrm ps --memory-budget` fills its memory tier as rows arrive, maybe hours later: the
//     budget must fit under the limit, not under what happens to be free at start-up.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlrm::common {

struct MemoryInfo {
  int64_t total_bytes = -1;      // MemTotal; -1 when unknown
  int64_t available_bytes = -1;  // MemAvailable (free memory and reclaimable cache); -1: unknown
  // The control group's limit and what of its use the kernel cannot drop: anonymous and shared
  // memory (memory.stat), not the page cache it reclaims before it kills; without that
  // breakdown, the usage less the inactive page cache. -1: no limit / unknown.
  int64_t cgroup_limit_bytes = -1;
  int64_t cgroup_used_bytes = -1;

  // What this process can still fill: the smaller of MemAvailable and the cgroup's headroom;
  // -1 when neither is known.
  int64_t AvailableBytes() const;
  // The most this process could ever hold: the smaller of MemTotal and the cgroup's limit; -1
  // when neither is known.
  int64_t LimitBytes() const;
  // "MemAvailable 21.9 GiB of MemTotal 23.5 GiB, cgroup limit 6.0 GiB (1.2 GiB used)".
  std::string Describe() const;
};

// Reads /proc/meminfo and the memory controller of this process's cgroup (v2, else v1). `root`
// prefixes every path (tests give a folder of fake files). Files it cannot read leave -1.
MemoryInfo ReadMemoryInfo(const std::string& root = "");

// For `dlrm ps --memory-budget` (`servers` = 1) and `dlrm local` (`servers` parameter servers,
// each with the budget, on this machine): RESOURCE_EXHAUSTED naming the flag's value when the
// budgets come to more than info.LimitBytes(), which no later free memory can fix; OK when they
// fit or the limit is unknown. `flag`: the flag as the user gave it, e.g. "--memory-budget 64GiB".
absl::Status CheckMemoryBudgetFits(int64_t budget_bytes, int servers, absl::string_view flag,
                                   const MemoryInfo& info);

// "21.9 GiB" (1024-based, one decimal; bytes below 1 KiB as "512 B").
std::string FormatBytes(int64_t bytes);

}  // namespace dlrm::common
