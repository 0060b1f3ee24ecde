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

}  // namespace
}  // namespace dlrm::server
