// GlooAllReducer bootstrapped through a real (in-process) coordinator's rendezvous store, with
// ranks on threads talking TCP over loopback.
#include "worker/gloo_allreducer.h"

#include <stdlib.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace dlrm::worker {
namespace {

class GlooAllReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dlrm-gloo-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto coordinator =
        server::Coordinator::Create({.listen_address = "127.0.0.1:0", .data_dir = dir_});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    auto client = client::CoordinatorClient::Create({.address = coordinator_->address()});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    coordinator_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  GlooAllReducerOptions Options(int rank, int world, const std::string& prefix) {
    return {.client = client_.get(),
            .prefix = prefix,
            .rank = rank,
            .world_size = world,
            .hostname = "127.0.0.1",
            .rendezvous_timeout = absl::Seconds(10),
            .op_timeout = absl::Seconds(5),
            .cancelled = nullptr};
  }

  // Creates `world` reducers concurrently (rendezvous needs every rank).
  std::vector<std::unique_ptr<GlooAllReducer>> Connect(int world, const std::string& prefix) {
    std::vector<std::unique_ptr<GlooAllReducer>> reducers(world);
    std::vector<absl::Status> status(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto reducer = GlooAllReducer::Create(Options(r, world, prefix));
        status[r] = reducer.status();
        if (reducer.ok()) reducers[r] = std::move(*reducer);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << status[r];
    return reducers;
  }

  std::string dir_;
  std::unique_ptr<server::Coordinator> coordinator_;
  std::unique_ptr<client::CoordinatorClient> client_;
};

TEST_F(GlooAllReducerTest, EveryRankGetsTheSum) {
  constexpr int kWorld = 3;
  constexpr size_t kCount = 300001;  // several of Gloo's segments, not a multiple of the world
  auto reducers = Connect(kWorld, "job/sum/gloo/");
  ASSERT_EQ(reducers.size(), static_cast<size_t>(kWorld));
  std::vector<std::vector<float>> data(kWorld, std::vector<float>(kCount));
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < kCount; ++i) data[r][i] = static_cast<float>((i % 1000) * (r + 1));
  }
  std::vector<absl::Status> status(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] { status[r] = reducers[r]->AllReduceSum(data[r].data(), kCount); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (size_t i = 0; i < kCount; i += 997) {
      // Small integers: the sum is exact in float whatever the order.
      ASSERT_EQ(data[r][i], static_cast<float>((i % 1000) * 6)) << "rank " << r << " index " << i;
    }
    // Bitwise the same result on every rank: the replicated dense model stays in sync.
    EXPECT_EQ(data[r], data[0]);
  }
}

TEST_F(GlooAllReducerTest, APeerThatIsGoneFailsWithUnavailableInsteadOfHanging) {
  auto reducers = Connect(2, "job/dead/gloo/");
  ASSERT_NE(reducers[1], nullptr);
  reducers[1].reset();  // rank 1 goes away: its sockets close
  std::vector<float> data(1000, 1.0f);
  const absl::Time start = absl::Now();
  absl::Status status = reducers[0]->AllReduceSum(data.data(), data.size());
  EXPECT_LT(absl::Now() - start, absl::Seconds(7));  // op timeout 5 s + slack
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded)
      << status;
  // The context is broken from now on; later calls fail at once.
  EXPECT_EQ(reducers[0]->AllReduceSum(data.data(), data.size()).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(GlooAllReducerTest, ARankThatNeverJoinsFailsTheRendezvousWithinItsTimeout) {
  GlooAllReducerOptions options = Options(0, 2, "job/alone/gloo/");
  options.rendezvous_timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  auto reducer = GlooAllReducer::Create(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(reducer.ok());
  EXPECT_NE(reducer.status().message().find("job/alone/gloo/"), absl::string_view::npos)
      << reducer.status();
}

TEST_F(GlooAllReducerTest, ACancelledRendezvousStopsWaitingPromptly) {
  // A job that failed elsewhere while this rank waits for the others: it must not sit out the
  // whole rendezvous timeout before it can take the next job.
  GlooAllReducerOptions options = Options(0, 2, "job/cancelled/gloo/");
  options.rendezvous_timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  options.cancelled = [start] { return absl::Now() - start > absl::Milliseconds(300); };
  auto reducer = GlooAllReducer::Create(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(reducer.status().code(), absl::StatusCode::kCancelled) << reducer.status();
}

TEST_F(GlooAllReducerTest, BadRankIsInvalidArgument) {
  EXPECT_EQ(GlooAllReducer::Create(Options(2, 2, "x/")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlrm::worker
