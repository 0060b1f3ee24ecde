// PsJob on its own, without gRPC: what a loaded job prepares for its checkpoints.
#include "server/ps_job.h"

#include <memory>

#include "embedding/checkpoint_snapshot.h"
#include "gtest/gtest.h"
#include "server/timer_queue.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server {
namespace {

// A job loaded with periodic_checkpoints readies its first snapshot's memory on a thread of its
// own from the load on: the first SNAPSHOT's object already has room for every table's rows.
// Without the flag the first object is empty (the cut allocates: a job that does not checkpoint
// while it trains needs no such memory).
TEST(PsJobTest, PeriodicCheckpointsPrepareTheFirstSnapshotsMemory) {
  testing::PsTempDir dir;
  TimerQueue timers;
  for (bool periodic : {false, true}) {
    PsJobOptions o;
    o.spec = testing::TestJob(periodic ? "periodic" : "plain", {{100, 4}, {30, 4}});
    o.spec.set_periodic_checkpoints(periodic);
    o.data_dir = dir.path();
    o.memory_budget_bytes = 1 << 20;
    o.timers = &timers;
    auto job = PsJob::Create(o);
    ASSERT_TRUE(job.ok()) << job.status();
    std::shared_ptr<embedding::StoreSnapshot> first = (*job)->RecycledStoreSnapshot();
    ASSERT_NE(first, nullptr);
    if (!periodic) {
      EXPECT_TRUE(first->resident.empty());
      continue;
    }
    ASSERT_EQ(first->resident.size(), 2u);
    EXPECT_GE(first->resident[0].capacity, 100u * (*job)->store().codec(0).words());
    EXPECT_GE(first->resident[1].capacity, 30u * (*job)->store().codec(1).words());
  }
}

PsJobOptions GateTestJob(const std::string& data_dir, TimerQueue* timers) {
  PsJobOptions o;
  o.spec = testing::TestJob("gates", {{100, 4}});
  o.spec.set_num_workers(2);
  o.spec.set_staleness(0);
  o.spec.set_job_epoch(1);
  o.data_dir = data_dir;
  o.memory_budget_bytes = 1 << 20;
  o.timers = timers;
  return o;
}

// A push validated at epoch 1 that runs after a recovery moved the job to epoch 2 completes its
// step in epoch 1's gate only: epoch 2's workers have pushed nothing yet, and a lookup of theirs
// must still wait for them.
TEST(PsJobTest, APushOfAnOlderEpochCompletesNoStepOfTheNewOne) {
  testing::PsTempDir dir;
  TimerQueue timers;
  auto job = PsJob::Create(GateTestJob(dir.path(), &timers));
  ASSERT_TRUE(job.ok()) << job.status();
  (*job)->AdvanceEpoch(2);
  dlrm::v1::PushGradientsRequest push;
  push.set_job_id("gates");
  push.set_job_epoch(1);
  push.set_worker_rank(0);
  push.set_step(5);
  dlrm::v1::TableGradients* t = push.add_tables();
  t->set_table(0);
  t->set_ids(testing::PackIds({3}));
  t->set_grads(testing::PackFloats({0.5f, 0.5f, 0.5f, 0.5f}));
  ASSERT_TRUE((*job)->Push(push, nullptr).ok());
  EXPECT_EQ((*job)->gate()->completed(0), -1);
  push.set_job_epoch(2);
  ASSERT_TRUE((*job)->Push(push, nullptr).ok());
  EXPECT_EQ((*job)->gate()->completed(0), 5);

  absl::StatusOr<std::shared_ptr<StepGate>> old = (*job)->GateOf(1);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition) << old.status();
  EXPECT_TRUE((*job)->GateOf(2).ok());
}

// After CloseGates (the server shutting down), a LoadJob that moves the job to a newer epoch
// brings a gate that is closed too: a lookup that would wait fails at once, not at its deadline.
TEST(PsJobTest, AGateAnEpochMoveBringsAfterCloseGatesIsClosed) {
  testing::PsTempDir dir;
  TimerQueue timers;
  auto job = PsJob::Create(GateTestJob(dir.path(), &timers));
  ASSERT_TRUE(job.ok()) << job.status();
  (*job)->CloseGates(absl::UnavailableError("parameter server is shutting down"));
  (*job)->AdvanceEpoch(2);
  absl::Status result = absl::UnknownError("not answered");
  (*job)->gate()->WhenVisible(/*step=*/3, /*rank=*/0, absl::InfiniteFuture(),
                              [&](absl::Status s) { result = s; });
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
  EXPECT_EQ((*job)->gate()->parked(), 0);
}

}  // namespace
}  // namespace dlrm::server
