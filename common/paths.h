// Path comparisons shared by the commands that take several paths (dlrm train, dlrmctl submit).
#pragma once

#include <string>

namespace dlrm::common {

// Whether two paths name the same file or folder: by device and inode when both exist, else by
// their absolute paths once symlinks, "." and ".." are resolved (neither need exist).
bool SamePath(const std::string& a, const std::string& b);

}  // namespace dlrm::common
