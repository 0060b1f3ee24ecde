#include "server/rendezvous_store.h"

#include <atomic>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::server {
namespace {

using ::testing::AllOf;
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

// The value under `key` now, or the error's code name.
std::string Read(RendezvousStore& store, const std::string& key) {
  std::string out;
  store.Get(key, absl::ZeroDuration(), [&out](absl::StatusOr<std::string> v) {
    out = v.ok() ? *v : std::string(absl::StatusCodeToString(v.status().code()));
  });
  return out;
}

TEST(RendezvousStoreLimitsTest, AddThatWouldOverflowIsRefusedAndKeepsTheCounter) {
  TimerQueue timers;
  RendezvousStore store(&timers);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  ASSERT_EQ(*store.Add("n", kMax - 1), kMax - 1);
  EXPECT_EQ(*store.Add("n", 1), kMax);
  auto over = store.Add("n", 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(), AllOf(HasSubstr("'n'"), HasSubstr("adding 1 to "),
                                             HasSubstr(absl::StrCat(kMax)), HasSubstr("int64")));
  EXPECT_EQ(Read(store, "n"), absl::StrCat(kMax));
  over = store.Add("n", kMax);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(store, "n"), absl::StrCat(kMax));

  ASSERT_EQ(*store.Add("m", kMin), kMin);
  over = store.Add("m", -1);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(), HasSubstr(absl::StrCat(kMin)));
  EXPECT_EQ(Read(store, "m"), absl::StrCat(kMin));
  EXPECT_EQ(*store.Add("m", kMax), -1);  // far from the edge it still adds
}

TEST(RendezvousStoreLimitsTest, KeysAndValuesOverTheirLimitsAreRefusedAndStoreNothing) {
  TimerQueue timers;
  RendezvousStore store(&timers);
  ASSERT_TRUE(store.Set("k", "before").ok());
  const std::string long_key(common::kMaxKvKeyBytes + 1, 'k');
  const std::string big_value(common::kMaxKvValueBytes + 1, 'v');

  absl::Status s = store.Set(long_key, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(absl::StrCat(long_key.size(), " bytes")),
                    HasSubstr(absl::StrCat(common::kMaxKvKeyBytes)), HasSubstr("kMaxKvKeyBytes")));
  EXPECT_LT(s.message().size(), 400u) << "the message shows the key's start only";
  EXPECT_EQ(store.Add(long_key, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(store, long_key), "INVALID_ARGUMENT");

  s = store.Set("k", big_value);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'k'"), HasSubstr(absl::StrCat(big_value.size())),
                                 HasSubstr(absl::StrCat(common::kMaxKvValueBytes)),
                                 HasSubstr("kMaxKvValueBytes")));
  EXPECT_EQ(Read(store, "k"), "before");

  // At the limits exactly: stored.
  const std::string key_at_limit(common::kMaxKvKeyBytes, 'a');
  ASSERT_TRUE(store.Set(key_at_limit, std::string(common::kMaxKvValueBytes, 'v')).ok());
  EXPECT_EQ(Read(store, key_at_limit).size(), static_cast<size_t>(common::kMaxKvValueBytes));
}

TEST(RendezvousStoreLimitsTest, TheWholeStoreHasAByteBudget) {
  TimerQueue timers;
  RendezvousStore store(&timers);
  const std::string value(common::kMaxKvValueBytes - 16, 'v');
  int stored = 0;
  absl::Status s;
  for (int i = 0; i < 1000; ++i) {
    s = store.Set(absl::StrCat("key/", i), value);
    if (!s.ok()) break;
    ++stored;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(absl::StrCat("'key/", stored, "'")),
                                 HasSubstr(absl::StrCat(common::kMaxKvStoreBytes)),
                                 HasSubstr("kMaxKvStoreBytes")));
  EXPECT_GT(stored, 200);
  EXPECT_EQ(Read(store, absl::StrCat("key/", stored)), "NOT_FOUND");
  EXPECT_EQ(Read(store, "key/0"), value);
  // A value no larger than the one it replaces fits even while the store is full.
  EXPECT_TRUE(store.Set("key/0", "small").ok());
  // Deleting makes room again.
  EXPECT_EQ(store.Delete("key/", true), stored);
  EXPECT_TRUE(store.Set(absl::StrCat("key/", stored), value).ok());
}

}  // namespace
}  // namespace dlrm::server
