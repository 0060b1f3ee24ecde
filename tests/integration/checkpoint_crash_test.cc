// `dlrm train` killed with SIGKILL at 20 seeded moments while it checkpoints after every step,
// then resumed from its checkpoint folder each time: every load finds a whole checkpoint (the
// previous or the new one, never a mix: LoadChain verifies every file's size and CRC32C), the step
// never goes back, and the model at the end is byte-for-byte the one an uninterrupted run writes.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "embedding/checkpoint_manifest.h"
#include "gtest/gtest.h"
#include "tests/integration/process_util.h"

namespace dlrm::testing {
namespace {

namespace fs = std::filesystem;

std::string JobYaml(const std::string& ckpt_dir) {
  return absl::StrCat(R"(name: crash
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
)",
                      kCappedKaggleTablesYaml, R"(optimizer:
  dense: {type: adam, learning_rate: 0.003}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: 128, epochs: 2, seed: 9}
data: {train: [train.tsv], eval_fraction: 0.1}
checkpoint: {dir: )",
                      ckpt_dir, R"(, every_steps: 1, keep_last: 2, full_every: 1}
)");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The highest step of any checkpoint directory under `root`, committed or still being written.
int64_t NewestStepStarted(const std::string& root) {
  int64_t newest = -1;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (name.rfind("ckpt-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &step)) {
      newest = std::max(newest, step);
    }
  }
  return newest;
}

TEST(CheckpointCrashTest, KilledDuringCheckpointsResumesToTheSameModel) {
  char tmpl[] = "/tmp/dlrm-crash-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ProcessResult gen = RunProcess({BinPath("dlrm"), "gen-data", "--out", dir + "/train.tsv",
                                  "--rows", "12000", "--max-rows", "1000", "--seed", "4"},
                                 dir, "gen", absl::Seconds(60));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  std::ofstream(dir + "/ref.yaml") << JobYaml("ref");
  std::ofstream(dir + "/crash.yaml") << JobYaml("crash");

  ProcessResult ref = RunProcess(
      {BinPath("dlrm"), "train", "-c", dir + "/ref.yaml", "--no-progress", "--threads", "1"}, dir,
      "ref", absl::Seconds(120));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;

  std::mt19937 rng(20261201);
  int64_t last_step = 0;
  int kills = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> argv = {BinPath("dlrm"), "train",     "-c", dir + "/crash.yaml",
                                     "--no-progress", "--threads", "1"};
    if (last_step > 0) {
      argv.push_back("--resume");
      argv.push_back(dir + "/crash");
    }
    Process p(argv, dir, absl::StrCat("crash-", round));
    // The moment: once the checkpoint of a seeded step 1-5 steps ahead has begun (its directory
    // exists, its manifest may not), plus a seeded 0-10 ms, so the kill lands in or near a write
    // whatever the machine's speed.
    const int64_t target = last_step + std::uniform_int_distribution<int>(1, 5)(rng);
    const auto extra = absl::Microseconds(std::uniform_int_distribution<int>(0, 10000)(rng));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (p.Running() && absl::Now() < deadline && NewestStepStarted(dir + "/crash") < target) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    absl::SleepFor(extra);
    if (p.Running()) {
      p.Signal(SIGKILL);
      ++kills;
    }
    p.Wait(absl::Seconds(30));
    auto resolved = embedding::ResolveCheckpoint(dir + "/crash");
    if (!resolved.ok()) continue;  // killed before its first checkpoint
    auto chain = embedding::LoadChain(*resolved);
    ASSERT_TRUE(chain.ok()) << "round " << round << ": " << chain.status();
    EXPECT_GE(chain->back().step, last_step) << "round " << round << ": went back";
    last_step = chain->back().step;
  }
  EXPECT_GE(kills, 15) << "most rounds must actually be killed mid-run";
  ASSERT_GT(last_step, 0);

  ProcessResult finish = RunProcess({BinPath("dlrm"), "train", "-c", dir + "/crash.yaml",
                                     "--no-progress", "--threads", "1", "--resume", dir + "/crash"},
                                    dir, "finish", absl::Seconds(120));
  ASSERT_EQ(finish.exit_code, 0) << finish.err;
  auto a = embedding::ResolveCheckpoint(dir + "/ref");
  auto b = embedding::ResolveCheckpoint(dir + "/crash");
  ASSERT_TRUE(a.ok() && b.ok());
  auto ma = embedding::ReadManifest(*a);
  auto mb = embedding::ReadManifest(*b);
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ(ma->step, mb->step);
  ASSERT_EQ(ma->files.size(), mb->files.size());
  for (size_t i = 0; i < ma->files.size(); ++i) {
    EXPECT_EQ(Slurp(*a + "/" + ma->files[i].name), Slurp(*b + "/" + mb->files[i].name))
        << ma->files[i].name << " differs from the uninterrupted run's";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace dlrm::testing
