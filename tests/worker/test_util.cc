#include "tests/worker/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"

namespace dlrm::worker::testing {

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string CriteoSamplePath() {
  return std::string(DLRM_SOURCE_DIR) + "/tests/worker/data/criteo_sample.tsv";
}

}  // namespace dlrm::worker::testing
