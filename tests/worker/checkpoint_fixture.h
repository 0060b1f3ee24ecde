// The fixture of the checkpoint tests (checkpoint_test.cc, checkpoint_folder_test.cc): a small
// generated job trained by `dlrm train`'s code in a fresh folder.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/train_command.h"

namespace dlrm::worker {

// 12000 training samples: 47 steps per epoch.
inline common::JobSpec SmallJob(const std::string& train_path, const std::string& checkpoint_dir) {
  common::JobSpec spec = testing::SmallGeneratedJob(train_path, /*seed=*/5);
  spec.name = "ckpt-test";
  spec.checkpoint.dir = checkpoint_dir;
  return spec;
}

// Rewrites the manifest at `path` without its checksum line (as builds before it wrote them, so
// that it loads unchecked), replacing each `from` with its `to`; each must be there.
inline void EditManifest(const std::string& path,
                         const std::vector<std::pair<std::string, std::string>>& replacements) {
  std::vector<std::string> lines = absl::StrSplit(testing::ReadFile(path), '\n');
  std::erase_if(lines,
                [](const std::string& l) { return absl::StrContains(l, "manifest_crc32c"); });
  std::string text = absl::StrJoin(lines, "\n");
  for (const auto& [from, to] : replacements) {
    EXPECT_TRUE(absl::StrContains(text, from)) << from << " in " << path;
    text = absl::StrReplaceAll(text, {{from, to}});
  }
  testing::WriteFile(path, text);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::GenerateCappedTsv(dir_.File("train.tsv"), 15000, /*seed=*/3, 1000).ok());
  }
  TrainRunOptions Quiet(const std::string& resume = "") {
    TrainRunOptions o;
    o.show_progress = false;
    o.threads = 1;
    o.resume_from = resume;
    return o;
  }
  std::string Ckpt(const std::string& name) { return dir_.File(name); }
  // SmallJob into Ckpt(folder) for `steps` steps, a checkpoint every `every` (0: at the end only).
  common::JobSpec Job(const std::string& folder, int64_t steps, int64_t every = 0) {
    common::JobSpec spec = SmallJob(dir_.File("train.tsv"), Ckpt(folder));
    spec.max_steps = steps;
    if (every > 0) spec.checkpoint.every_steps = every;
    return spec;
  }

  // Every float of the dense model and of every stored row (weights and optimizer state) equal,
  // bit for bit.
  static void ExpectBitIdentical(const TrainArtifacts& a, const TrainArtifacts& b) {
    ASSERT_EQ(a.dense_params.size(), b.dense_params.size());
    EXPECT_EQ(std::memcmp(a.dense_params.data(), b.dense_params.data(),
                          a.dense_params.size() * sizeof(float)),
              0)
        << "dense parameters differ";
    ASSERT_EQ(a.store->tables().size(), b.store->tables().size());
    for (size_t t = 0; t < a.store->tables().size(); ++t) {
      const embedding::EmbeddingTable& x = a.store->table(static_cast<int>(t));
      const embedding::EmbeddingTable& y = b.store->table(static_cast<int>(t));
      ASSERT_EQ(x.rows(), y.rows());
      const size_t floats = static_cast<size_t>(x.rows()) * x.row_stride();
      EXPECT_EQ(std::memcmp(x.data(), y.data(), floats * sizeof(float)), 0)
          << "table " << t << " differs";
    }
  }

  testing::TempDir dir_;
};

}  // namespace dlrm::worker
