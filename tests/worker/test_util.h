// Helpers shared by the worker tests.
#pragma once

#include <string>

#include "tests/common/temp_dir.h"

namespace dlrm::worker::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at destruction.
class TempDir : public ::dlrm::testing::ScopedTempDir {
 public:
  TempDir() : ScopedTempDir("dlrm_worker_test") {}
  std::string File(const std::string& name) const { return Sub(name); }
};

void WriteFile(const std::string& path, const std::string& content);
std::string ReadFile(const std::string& path);

// tests/worker/data/criteo_sample.tsv: 200 real rows of the Criteo Kaggle data.
std::string CriteoSamplePath();

}  // namespace dlrm::worker::testing
