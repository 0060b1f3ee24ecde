#include "server/rendezvous_store.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::server {
namespace {

using ::testing::HasSubstr;

TEST(TimerQueueTest, RunsInDueOrderAndCancels) {
  TimerQueue timers;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  const absl::Time now = absl::Now();
  timers.Schedule(now + absl::Milliseconds(60), [&] {
    absl::MutexLock l(&mu);
    order.push_back(2);
    done.Notify();
  });
  timers.Schedule(now + absl::Milliseconds(20), [&] {
    absl::MutexLock l(&mu);
    order.push_back(1);
  });
  const int64_t cancelled = timers.Schedule(now + absl::Milliseconds(40), [&] {
    absl::MutexLock l(&mu);
    order.push_back(99);
  });
  EXPECT_TRUE(timers.Cancel(cancelled));
  EXPECT_FALSE(timers.Cancel(cancelled));
  done.WaitForNotification();
  absl::MutexLock l(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(RendezvousStoreTest, SetWakesEveryWaiterOnce) {
  TimerQueue timers;
  RendezvousStore store(&timers);
  std::atomic<int> calls{0};
  std::vector<std::string> values(3);
  for (int i = 0; i < 3; ++i) {
    store.Get("k", absl::Seconds(10), [&, i](absl::StatusOr<std::string> v) {
      ASSERT_TRUE(v.ok()) << v.status();
      values[i] = *v;
      ++calls;
    });
  }
  EXPECT_EQ(calls.load(), 0);
  ASSERT_TRUE(store.Set("k", "v1").ok());
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(values, (std::vector<std::string>{"v1", "v1", "v1"}));
  ASSERT_TRUE(store.Set("k", "v2").ok());
  EXPECT_EQ(calls.load(), 3);  // waiters fire once
}

TEST(RendezvousStoreTest, AddDeleteAndShutdown) {
  TimerQueue timers;
  RendezvousStore store(&timers);
  EXPECT_EQ(*store.Add("count", 2), 2);
  EXPECT_EQ(*store.Add("count", 3), 5);
  ASSERT_TRUE(store.Set("word", "abc").ok());
  auto bad = store.Add("word", 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("abc"));
  ASSERT_TRUE(store.Set("job/1/a", "x").ok());
  ASSERT_TRUE(store.Set("job/1/b", "x").ok());
  ASSERT_TRUE(store.Set("job/2/a", "x").ok());
  EXPECT_EQ(store.Delete("job/1/", true), 2);
  EXPECT_EQ(store.Delete("job/2/a", false), 1);

  absl::StatusOr<std::string> pending = std::string("unset");
  store.Get("never", absl::Seconds(30), [&](absl::StatusOr<std::string> v) { pending = v; });
  store.Shutdown();
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Set("k", "v").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlrm::server
