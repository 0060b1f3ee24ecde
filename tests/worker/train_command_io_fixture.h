// The fixture of the `dlrm` command tests on files (train_command_io_test.cc: predict, eval,
// convert; train_command_test.cc: train): one small model trained for the suite on generated
// data, a folder per test, and helpers over text files.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/binary_format.h"
#include "worker/input/synthetic.h"
#include "worker/train_command.h"

namespace dlrm::worker {

inline constexpr int kRows = 600;

inline int CountLines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The first `n` lines of `text`, each with its '\n'.
inline std::string HeadLines(const std::string& text, int n) {
  size_t end = 0;
  for (int i = 0; i < n; ++i) end = text.find('\n', end) + 1;
  return text.substr(0, end);
}

inline bool IsSymlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// One small model, trained once for the suite on `kRows` generated lines (format: tsv), and the
// same data as a binary file.
class TrainCommandIoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::GenerateCappedTsv(Data(), kRows, /*seed=*/7, 1000).ok());
    auto converted = ConvertTsvToBinary({.inputs = {Data()}, .output = dir_->File("data.bin")});
    ASSERT_TRUE(converted.ok()) << converted.status();
    common::JobSpec spec = Job(Data(), dir_->File("ck"));
    spec.format = "tsv";
    auto trained = TrainInProcess(spec, Quiet());
    ASSERT_TRUE(trained.ok()) << trained.status();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::string Data() { return dir_->File("data.tsv"); }
  static common::JobSpec Job(const std::string& train, const std::string& checkpoint_dir) {
    common::JobSpec spec = testing::SmallGeneratedJob(train, /*seed=*/3);
    spec.max_steps = 2;
    spec.checkpoint.dir = checkpoint_dir;
    return spec;
  }
  static TrainRunOptions Quiet() {
    TrainRunOptions o;
    o.show_progress = false;
    o.threads = 1;
    return o;
  }
  static CheckpointModelOptions Model(const std::vector<std::string>& data,
                                      const std::string& checkpoint = dir_->File("ck")) {
    CheckpointModelOptions o;
    o.checkpoint = checkpoint;
    o.data = data;
    o.threads = 1;
    return o;
  }
  // A spec file in this test's folder for the suite's model (its data copied next to it), with
  // these `training:` and `checkpoint:` values.
  std::string Config(const std::string& training, const std::string& data,
                     const std::string& checkpoint) {
    if (!std::filesystem::exists(tmp_.File("data.tsv"))) {
      std::filesystem::copy_file(Data(), tmp_.File("data.tsv"));
    }
    const std::string config = tmp_.File("job.yaml");
    testing::WriteFile(
        config,
        absl::StrCat("name: io\n"
                     "model: {dense_features: 13, bottom_mlp: [32, 8], top_mlp: [32, 1], "
                     "embedding_dim: 8}\n"
                     "tables: {cardinalities: [",
                     absl::StrJoin(CappedKaggleCardinalities(1000), ", "),
                     "]}\n"
                     "optimizer: {dense: {type: adam, learning_rate: 0.003}, sparse: {type: "
                     "rowwise_adagrad, learning_rate: 0.1}}\n"
                     "training: {batch_size: 256, seed: 3, device: cpu, ",
                     training, "}\ndata: {train: data.tsv, ", data, "}\ncheckpoint: {", checkpoint,
                     "}\n"));
    return config;
  }
  // A file of the first `n` lines of the data in this test's folder.
  std::string SmallData(int n, const std::string& name = "small.tsv") {
    const std::string path = tmp_.File(name);
    testing::WriteFile(path, HeadLines(testing::ReadFile(Data()), n));
    return path;
  }

  static inline testing::TempDir* dir_ = nullptr;
  testing::TempDir tmp_;
};

}  // namespace dlrm::worker
