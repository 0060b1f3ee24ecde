#include "common/paths.h"

#include <filesystem>
#include <system_error>

namespace dlrm::common {

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  const std::filesystem::path x = std::filesystem::weakly_canonical(a, ec);
  if (ec) return a == b;
  const std::filesystem::path y = std::filesystem::weakly_canonical(b, ec);
  return ec ? a == b : x == y;
}

}  // namespace dlrm::common
