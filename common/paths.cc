#include "common/paths.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dlrm::common {

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  const std::filesystem::path x = std::filesystem::weakly_canonical(a, ec);
  if (ec) return a == b;
  const std::filesystem::path y = std::filesystem::weakly_canonical(b, ec);
  return ec ? a == b : x == y;
}

bool PathIsWithin(const std::string& path, const std::string& folder) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) return false;
  const std::filesystem::path f = std::filesystem::weakly_canonical(folder, ec);
  if (ec) return false;
  auto pi = p.begin();
  for (auto fi = f.begin(); fi != f.end(); ++fi, ++pi) {
    if (fi->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *fi) return false;
  }
  return true;
}

absl::Status CheckResumeAgrees(const std::string& flag, const std::string& given,
                               const std::string& key, const std::string& spec_file) {
  if (key.empty() || SamePath(given, key)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " ", given, " and the job spec's checkpoint.resume_from ", key,
                   spec_file.empty() ? "" : absl::StrCat(" (", spec_file, ")"),
                   " name different checkpoints: give one of them (or the same one)"));
}

}  // namespace dlrm::common
