#include "common/free_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace dlrm::common {

int64_t FreeBytes(const std::string& path) {
  // A store's folder may not exist yet: the nearest folder above it that does is on the same
  // file system, or the one it will be made on.
  std::filesystem::path p = path.empty() ? std::filesystem::path(".") : std::filesystem::path(path);
  while (true) {
    struct statvfs fs {};
    if (::statvfs(p.c_str(), &fs) == 0) {
      return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    }
    if (errno != ENOENT || !p.has_relative_path() || p.parent_path() == p) return -1;
    p = p.parent_path();
    if (p.empty()) p = ".";
  }
}

absl::Status CheckFreeBytes(const std::string& path, int64_t needed, absl::string_view what) {
  const int64_t free = FreeBytes(path);
  if (free < 0 || free >= needed) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(what, ": the file system of '", path, "' has ",
                                                   free, " bytes free, fewer than the ", needed,
                                                   " it needs (the disk is full or nearly)"));
}

}  // namespace dlrm::common
