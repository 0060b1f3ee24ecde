// Free space under a store. Debian's RocksDB is built with assertions on: a write that meets a
// full disk fails, and the next use of the store aborts the process (an assertion in its file
// writer). The stores (the parameter servers' row tier, the coordinator's state) therefore check
// the space before they write and refuse a write that would leave less than a reserve, with
// RESOURCE_EXHAUSTED naming the folder, and the process lives on.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlrm::common {

// Bytes an unprivileged writer may still use on the file system holding `path` (statvfs
// f_bavail x f_frsize; of the nearest folder above it when `path` does not exist yet); -1 when it
// cannot be asked.
int64_t FreeBytes(const std::string& path);

// RESOURCE_EXHAUSTED "what: the file system of 'path' has N bytes free, fewer than the M it
// needs" when FreeBytes(path) < needed; OK otherwise, and when the space cannot be asked (the
// write then meets what it meets).
absl::Status CheckFreeBytes(const std::string& path, int64_t needed, absl::string_view what);

}  // namespace dlrm::common
