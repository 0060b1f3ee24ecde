// Helpers shared by the worker tests.
#pragma once

#include <string>

namespace dlrm::worker::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content);
std::string ReadFile(const std::string& path);

// tests/worker/data/criteo_sample.tsv: 200 real rows of the Criteo Kaggle data.
std::string CriteoSamplePath();

}  // namespace dlrm::worker::testing
