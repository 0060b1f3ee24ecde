// Path comparisons shared by the commands that take several paths (dlrm train, dlrmctl submit).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace dlrm::common {

// Whether two paths name the same file or folder: by device and inode when both exist, else by
// their absolute paths once symlinks, "." and ".." are resolved (neither need exist).
bool SamePath(const std::string& a, const std::string& b);

// Whether `path` is `folder` or lies below it, once both are made absolute with symlinks, "."
// and ".." resolved (neither need exist).
bool PathIsWithin(const std::string& path, const std::string& folder);

// OK unless a resume flag (`flag`, e.g. "--resume-from", given as `given`) and the job spec's
// checkpoint.resume_from (`key`, "" when it has none) name different checkpoints: then
// INVALID_ARGUMENT naming both, and the spec file when `spec_file` is not "". `dlrm train`,
// `dlrm local` and `dlrmctl submit` refuse such a flag rather than take it over the spec's.
absl::Status CheckResumeAgrees(const std::string& flag, const std::string& given,
                               const std::string& key, const std::string& spec_file = "");

}  // namespace dlrm::common
