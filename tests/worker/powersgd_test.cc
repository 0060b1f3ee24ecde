// PowerSgdAllReducer (worker/powersgd.h) between two workers on threads: at full rank it gives the
// mean of their gradients; at low rank what it leaves out is carried to the next step (error
// feedback), whole ranges are the exact mean, both workers end with the same bits, and the
// factors are far fewer floats than the gradients of a real model.
#include "worker/powersgd.h"

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"

namespace dlrm::worker {
namespace {

using Matrix = dense::DlrmDenseModel::WeightMatrix;

// Two ranks on threads: AllReduceSum waits for both, then each takes rank 0's values plus rank 1's
// (the same additions on both, so the same bits).
class PairReducer {
 public:
  class Rank : public Collectives {
   public:
    Rank(PairReducer* pair, int rank) : pair_(pair), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return 2; }
    absl::Status AllReduceSum(float* data, size_t count) override {
      return pair_->Sum(rank_, data, count);
    }

   private:
    PairReducer* pair_;
    int rank_;
  };

  absl::Status Sum(int rank, float* data, size_t count) {
    absl::MutexLock lock(&mu_);
    const int64_t round = round_;
    in_[rank].assign(data, data + count);
    ++arrived_;
    if (arrived_ == 2) {
      if (in_[0].size() != in_[1].size()) return absl::InternalError("sizes differ");
      sum_.resize(count);
      for (size_t i = 0; i < count; ++i) sum_[i] = in_[0][i] + in_[1][i];
    }
    mu_.Await(absl::Condition(
        +[](PairReducer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->arrived_ == 2; },
        this));
    std::copy(sum_.begin(), sum_.end(), data);
    if (++left_ == 2) {  // both have read: the next round may start
      arrived_ = 0;
      left_ = 0;
      ++round_;
    } else {
      struct Next {
        PairReducer* pair;
        int64_t round;
      } next{this, round};
      mu_.Await(absl::Condition(
          +[](Next* n)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->pair->mu_) { return n->pair->round_ != n->round; },
          &next));
    }
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::vector<float> in_[2] ABSL_GUARDED_BY(mu_);
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int left_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
};

// A buffer of n = 223 gradients: a 12 x 9 matrix, 12 biases, a 10 x 9 matrix, 13 more values.
const std::vector<Matrix> kMatrices = {{0, 12, 9}, {120, 10, 9}};
constexpr size_t kN = 223;

std::vector<float> Random(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(kN);
  for (float& x : v) x = normal(rng);
  return v;
}

// Where a run of both ranks starts and what it keeps at its end.
struct PairRun {
  int first_step = 0;
  uint64_t seed = 5;
  const std::string* start_state[2] = {nullptr, nullptr};  // LoadState'd first when given
  std::string end_state[2];                                // StateBytes at the end
};

// Runs steps first_step .. first_step + steps - 1 of both ranks (rank r's gradients of step s:
// Random(100 * r + s)) and returns each rank's outputs, step by step.
std::vector<std::vector<float>> RunPair(int rank, int steps, double min_rate,
                                        std::vector<float>* residual0 = nullptr,
                                        PairRun* run = nullptr) {
  PairRun plain;
  if (run == nullptr) run = &plain;
  auto backend = testing::CpuTestBackend();
  PairReducer pair;
  PairReducer::Rank r0(&pair, 0), r1(&pair, 1);
  PowerSgdAllReducer a(&r0, backend.get(), kMatrices, kN, rank, run->seed, min_rate);
  PowerSgdAllReducer b(&r1, backend.get(), kMatrices, kN, rank, run->seed, min_rate);
  EXPECT_EQ(a.compressed_matrices(), 2);
  PowerSgdAllReducer* both[2] = {&a, &b};
  for (int r = 0; r < 2; ++r) {
    if (run->start_state[r] != nullptr) {
      absl::Status loaded = both[r]->LoadState(*run->start_state[r], "state");
      EXPECT_TRUE(loaded.ok()) << loaded;
    }
  }
  std::vector<std::vector<float>> out(2 * steps);
  const int first = run->first_step;
  std::thread other([&] {
    for (int s = 0; s < steps; ++s) {
      out[2 * s + 1] = Random(100 + first + s);
      EXPECT_TRUE(b.AllReduceMean(out[2 * s + 1].data()).ok());
    }
  });
  for (int s = 0; s < steps; ++s) {
    out[2 * s] = Random(first + s);
    EXPECT_TRUE(a.AllReduceMean(out[2 * s].data()).ok());
  }
  other.join();
  if (residual0 != nullptr) *residual0 = a.Residual();
  for (int r = 0; r < 2; ++r) run->end_state[r] = both[r]->StateBytes();
  return out;
}

bool InMatrix(size_t i) {
  for (const Matrix& m : kMatrices) {
    if (i >= m.offset && i < m.offset + static_cast<size_t>(m.rows) * m.cols) return true;
  }
  return false;
}

TEST(PowerSgdTest, AtFullRankItIsTheMeanOfTheWorkers) {
  const auto out = RunPair(/*rank=*/9, /*steps=*/2, /*min_rate=*/0.0);
  for (int s = 0; s < 2; ++s) {
    const std::vector<float> g0 = Random(s), g1 = Random(100 + s);
    EXPECT_EQ(out[2 * s], out[2 * s + 1]) << "the workers disagree at step " << s;
    for (size_t i = 0; i < kN; ++i) {
      const float mean = (g0[i] + g1[i]) / 2;
      if (InMatrix(i)) {
        EXPECT_NEAR(out[2 * s][i], mean, 1e-4) << "step " << s << " value " << i;
      } else {
        EXPECT_EQ(out[2 * s][i], (g0[i] + g1[i]) * 0.5f) << "whole value " << i;
      }
    }
  }
}

TEST(PowerSgdTest, AtLowRankWhatItLeavesOutComesBackLater) {
  constexpr int kSteps = 6;
  std::vector<float> residual;
  const auto out = RunPair(/*rank=*/1, kSteps, /*min_rate=*/0.0, &residual);
  // Rank 0 feeds M_t = g_t + E_(t-1), applies the shared approximation A_t and keeps
  // E_t = M_t - A_t, so the sum of its outputs plus E_T is the sum of its own gradients.
  std::vector<double> inputs(kN, 0.0), outputs(kN, 0.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> g0 = Random(s);
    for (size_t i = 0; i < kN; ++i) {
      inputs[i] += g0[i];
      outputs[i] += out[2 * s][i];
    }
  }
  double left_out = 0, total = 0;
  for (size_t i = 0; i < kN; ++i) {
    if (!InMatrix(i)) continue;
    EXPECT_NEAR(outputs[i] + residual[i], inputs[i], 1e-3) << "value " << i;
    left_out += std::abs(residual[i]);
    total += std::abs(inputs[i]);
  }
  EXPECT_GT(left_out, 0.01 * total) << "rank 1 approximations must leave something out";
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(out[2 * s], out[2 * s + 1]) << "step " << s;
}

TEST(PowerSgdTest, ResumedFromItsStateItTrainsAsIfItNeverStopped) {
  // Six steps in one go, against three, the state of each rank kept, and three more by new
  // reducers (seeded otherwise, so that their Q can only come from the state).
  const auto straight = RunPair(/*rank=*/1, /*steps=*/6, /*min_rate=*/0.0);
  PairRun before;
  RunPair(/*rank=*/1, /*steps=*/3, /*min_rate=*/0.0, nullptr, &before);
  PairRun after;
  after.first_step = 3;
  after.seed = 77;
  after.start_state[0] = &before.end_state[0];
  after.start_state[1] = &before.end_state[1];
  const auto resumed = RunPair(/*rank=*/1, /*steps=*/3, /*min_rate=*/0.0, nullptr, &after);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(resumed[i], straight[6 + i]) << "rank " << i % 2 << ", step " << 3 + i / 2;
  }
  EXPECT_NE(before.end_state[0], before.end_state[1]) << "each rank keeps its own residual";
  // Without the state the same three steps differ: the test sees what the state carries.
  PairRun fresh;
  fresh.first_step = 3;
  fresh.seed = 77;
  const auto afresh = RunPair(/*rank=*/1, /*steps=*/3, /*min_rate=*/0.0, nullptr, &fresh);
  EXPECT_NE(afresh[0], straight[6]);
}

TEST(PowerSgdTest, AStateOfAnotherLayoutOrCutShortIsRefusedAndChangesNothing) {
  PairRun run;
  RunPair(/*rank=*/2, /*steps=*/2, /*min_rate=*/0.0, nullptr, &run);
  const std::string& state = run.end_state[0];
  auto backend = testing::CpuTestBackend();
  PairReducer pair;
  PairReducer::Rank r0(&pair, 0);
  PowerSgdAllReducer rank1(&r0, backend.get(), kMatrices, kN, /*rank=*/1, /*seed=*/5, 0.0);
  absl::Status other_rank = rank1.LoadState(state, "p.bin");
  EXPECT_TRUE(absl::IsFailedPrecondition(other_rank)) << other_rank;
  EXPECT_NE(other_rank.message().find("p.bin: PowerSGD state of rank 2"), std::string::npos)
      << other_rank;
  PowerSgdAllReducer rank2(&r0, backend.get(), kMatrices, kN, /*rank=*/2, /*seed=*/5, 0.0);
  const std::string untouched = rank2.StateBytes();
  for (const std::string& bad : {state.substr(0, state.size() - 4), state + "x",
                                 std::string("DLRMPSGD"), std::string("not a state at all")}) {
    absl::Status s = rank2.LoadState(bad, "p.bin");
    EXPECT_TRUE(absl::IsDataLoss(s)) << bad.size() << " bytes: " << s;
    EXPECT_EQ(rank2.StateBytes(), untouched) << "a refused state changed the reducer";
  }
  ASSERT_TRUE(rank2.LoadState(state, "p.bin").ok());
  EXPECT_EQ(rank2.StateBytes(), state);
}

TEST(PowerSgdTest, AModelsFactorsAreFarFewerFloatsThanItsGradients) {
  // The emulated-network job's dense model (kaggle-shape, dim 16): 476k parameters.
  common::JobSpec spec;
  spec.dense_features = 13;
  spec.bottom_mlp = {512, 256, 64, 16};
  spec.top_mlp = {512, 256, 1};
  spec.embedding_dim = 16;
  for (int t = 0; t < 26; ++t)
    spec.tables.push_back({.name = absl::StrCat("C", t + 1), .rows = 10});
  auto backend = testing::CpuTestBackend();
  auto model =
      dense::DlrmDenseModel::Create(backend.get(), {.num_dense_features = spec.dense_features,
                                                    .bottom_widths = spec.bottom_mlp,
                                                    .top_widths = spec.top_mlp,
                                                    .num_tables = 26,
                                                    .embedding_dim = spec.embedding_dim,
                                                    .max_batch_size = 8,
                                                    .seed = 1,
                                                    .optimizer = {}});
  ASSERT_TRUE(model.ok()) << model.status();
  PairReducer pair;
  PairReducer::Rank r0(&pair, 0);
  PowerSgdAllReducer p(&r0, backend.get(), (*model)->WeightMatrices(), (*model)->num_params(),
                       /*rank=*/4, /*seed=*/1);
  EXPECT_EQ(p.compressed_matrices(), 6);  // all but the last layer's 1 x 256, which travels whole
  EXPECT_LT(p.wire_floats() * 20, (*model)->num_params())
      << p.wire_floats() << " of " << (*model)->num_params();
}

}  // namespace
}  // namespace dlrm::worker
