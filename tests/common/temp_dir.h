// ScopedTempDir: a fresh, uniquely named directory under testing::TempDir() (mkdtemp), removed
// with its contents at scope exit. Unique names matter: ctest runs tests of one binary in
// parallel processes, so a fixed path would be shared between them.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace dlrm::testing {

class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix = "dlrm") {
    std::string pattern = ::testing::TempDir() + "/" + prefix + "_XXXXXX";
    char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dlrm::testing
