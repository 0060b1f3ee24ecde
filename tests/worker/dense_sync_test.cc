// The dense gradients' allreduce overlapped with the backward (worker/dense_sync.h) against the
// one allreduce after it: the same model, bit for bit, with the collectives made on another
// thread in more than one bucket; and a failed collective ends the step with its error.
#include "worker/dense_sync.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;

// Two workers whose peer always holds the same gradients: a sum is twice the value, so the mean
// is the value itself, exactly. Records each call's size and thread; fails the call numbered
// fail_at (from 0) when it is set.
class MirrorReducer : public Collectives {
 public:
  explicit MirrorReducer(int fail_at = -1) : fail_at_(fail_at) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(float* data, size_t count) override {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(calls_.size()) == fail_at_) {
      calls_.push_back({count, std::this_thread::get_id()});
      return absl::UnavailableError("peer 1 is gone");
    }
    calls_.push_back({count, std::this_thread::get_id()});
    for (size_t i = 0; i < count; ++i) data[i] *= 2.0f;
    sent_ += static_cast<int64_t>(count * sizeof(float));
    return absl::OkStatus();
  }
  int64_t sent_bytes() const override {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  struct Call {
    size_t count;
    std::thread::id thread;
  };
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const int fail_at_;
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
};

common::JobSpec Spec(const std::string& dense_sync_dtype) {
  common::JobSpec spec;
  spec.dense_features = 5;
  spec.bottom_mlp = {64, 8};
  spec.top_mlp = {64, 32, 1};
  spec.embedding_dim = 8;
  spec.pooling = "sum";
  for (int t = 0; t < 4; ++t) spec.tables.push_back({.name = "T" + std::to_string(t), .rows = 500});
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.01};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.1};
  spec.batch_size = 64;
  spec.seed = 5;
  spec.device = "cpu";
  spec.dense_sync_dtype = dense_sync_dtype;
  return spec;
}

struct Rig {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
  std::unique_ptr<Trainer> trainer;
};

std::unique_ptr<Rig> MakeRig(const common::JobSpec& spec, Collectives* reducer, bool overlap) {
  auto rig = std::make_unique<Rig>();
  rig->backend = testing::CpuTestBackend();
  rig->store = testing::LocalStoreForSpec(spec);
  TrainerOptions options;
  options.spec = spec;
  options.backend = rig->backend.get();
  options.store = rig->store.get();
  options.allreducer = reducer;
  options.overlap_dense_allreduce = overlap;
  options.threads = 1;
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  rig->trainer = std::move(*trainer);
  return rig;
}

class DenseSyncTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DenseSyncTest, OverlappedAllReduceTrainsTheSameModelInBucketsOnItsOwnThread) {
  const common::JobSpec spec = Spec(GetParam());
  MirrorReducer overlapped_reducer, sync_reducer;
  auto overlapped = MakeRig(spec, &overlapped_reducer, /*overlap=*/true);
  auto sync = MakeRig(spec, &sync_reducer, /*overlap=*/false);
  constexpr int kSteps = 5;
  testing::ExpectSameTraining(*overlapped->trainer, *overlapped->store, *sync->trainer,
                              *sync->store, spec, kSteps, /*first_seed=*/3);

  // The sync trainer: one call a step, on the stepping thread, of every gradient.
  const size_t n = overlapped->trainer->model().num_params();
  const std::vector<MirrorReducer::Call> sync_calls = sync_reducer.calls();
  ASSERT_EQ(sync_calls.size(), static_cast<size_t>(kSteps));
  for (const auto& c : sync_calls) {
    EXPECT_EQ(c.count, n);
    EXPECT_EQ(c.thread, std::this_thread::get_id());
  }
  // The overlapped one: the same gradients in the same buckets every step (two here: the top
  // MLP, then the bottom one), none on the stepping thread.
  const std::vector<MirrorReducer::Call> calls = overlapped_reducer.calls();
  ASSERT_EQ(calls.size() % kSteps, 0u);
  const size_t per_step = calls.size() / kSteps;
  EXPECT_GE(per_step, 2u);
  size_t total = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_NE(calls[i].thread, std::this_thread::get_id()) << "call " << i;
    EXPECT_EQ(calls[i].count, calls[i % per_step].count) << "call " << i;
    if (i < per_step) total += calls[i].count;
  }
  EXPECT_EQ(total, n);
  // Both count what they sent: the same bytes.
  EXPECT_EQ(overlapped->trainer->counters().dense_sync_bytes,
            sync->trainer->counters().dense_sync_bytes);
  EXPECT_GT(sync->trainer->counters().dense_sync_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DenseSyncTest, ::testing::Values("fp32", "bf16"));

TEST(DenseSyncFailureTest, AFailedBucketFailsTheStepWithItsError) {
  const common::JobSpec spec = Spec("fp32");
  MirrorReducer reducer(/*fail_at=*/3);  // the second step's second bucket
  auto rig = MakeRig(spec, &reducer, /*overlap=*/true);
  ASSERT_TRUE(rig->trainer->Step(testing::RandomBagBatch(spec, 1)).ok());
  auto failed = rig->trainer->Step(testing::RandomBagBatch(spec, 2));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("peer 1 is gone"));
  EXPECT_EQ(rig->trainer->steps_done(), 1);
  // The next step's collectives run again (a reducer that recovered would serve them).
  EXPECT_TRUE(rig->trainer->Step(testing::RandomBagBatch(spec, 3)).ok());
}

// Reported parts must arrive in order: a backward that skipped one is a bug, caught.
TEST(DenseSyncDeathTest, APartReportedOutOfOrderIsCaught) {
  MirrorReducer reducer;
  std::vector<float> grads(100, 1.0f);
  EXPECT_DEATH(
      {
        DenseGradientSync sync(&reducer, /*bf16=*/false);
        sync.Begin(grads.data(), grads.size());
        sync.Ready(grads.data() + 50, 40);  // [50, 90): the end is 100
      },
      "out of order");
}

}  // namespace
}  // namespace dlrm::worker
