// GlooAllReducer bootstrapped through a real (in-process) coordinator's rendezvous store, with
// ranks on threads talking TCP over loopback.
#include "worker/gloo_allreducer.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "common/status.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/worker/local_run.h"
#include "tests/worker/test_util.h"
#include "worker/hot_rows.h"
#include "worker/hot_sync.h"

namespace dlrm::worker {
namespace {

class GlooAllReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A rank whose peer has closed may write once more before its Gloo loop reads the close: as
    // in the service's roles (client/termination_signals.h), that write fails with EPIPE instead
    // of killing the test with SIGPIPE.
    previous_sigpipe_ = std::signal(SIGPIPE, SIG_IGN);
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
    std::signal(SIGPIPE, previous_sigpipe_);
  }

  GlooAllReducerOptions Options(int rank, int world, const std::string& prefix,
                                std::optional<size_t> direct_max_bytes = std::nullopt) {
    return {.client = client_.get(),
            .prefix = prefix,
            .rank = rank,
            .world_size = world,
            .hostname = "127.0.0.1",
            .rendezvous_timeout = absl::Seconds(10),
            .op_timeout = absl::Seconds(5),
            .cancelled = nullptr,
            .direct_max_bytes = direct_max_bytes};
  }

  // Creates `world` reducers concurrently (rendezvous needs every rank). direct_max_bytes 0: every
  // collective around Gloo's ring.
  std::vector<std::unique_ptr<GlooAllReducer>> Connect(
      int world, const std::string& prefix, std::optional<size_t> direct_max_bytes = std::nullopt) {
    std::vector<std::unique_ptr<GlooAllReducer>> reducers(world);
    std::vector<absl::Status> status(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto reducer = GlooAllReducer::Create(Options(r, world, prefix, direct_max_bytes));
        status[r] = reducer.status();
        if (reducer.ok()) reducers[r] = std::move(*reducer);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << status[r];
    return reducers;
  }

  std::string dir_;
  void (*previous_sigpipe_)(int) = SIG_DFL;
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

// Runs fn(rank) on one thread per rank and returns each rank's status.
template <typename Fn>
std::vector<absl::Status> OnEveryRank(int world, Fn fn) {
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { status[r] = fn(r); });
  for (auto& t : threads) t.join();
  return status;
}

// The direct exchange sums in rank order, ((d0 + d1) + d2), on every rank: each rank's result is
// that sum bit for bit, whatever the values (rounding included), and with two ranks it is the
// ring's result too. Calls of every size alternate between the two algorithms on one connection
// (the receives posted ahead stay matched to their calls), including a one-value allreduce and an
// allgather with an empty piece; sizes above the limits go around the ring.
TEST_F(GlooAllReducerTest, DirectExchangeSumsInRankOrderAndAlternatesWithTheRing) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    constexpr size_t kLimit = 64 << 10;  // bytes
    auto direct = Connect(world, absl::StrCat("job/direct-", world, "/gloo/"), kLimit);
    auto ring = Connect(world, absl::StrCat("job/ring-", world, "/gloo/"), 0);
    ASSERT_EQ(direct.size(), static_cast<size_t>(world));
    ASSERT_EQ(ring.size(), static_cast<size_t>(world));
    const std::vector<size_t> counts = {1, kLimit / 4, kLimit / 4 + 1, 3, 100000, 7, 5000, 1};
    std::mt19937 rng(world);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    // data[call][rank]: values whose sums round, so that the order shows in the bits.
    std::vector<std::vector<std::vector<float>>> data(counts.size());
    for (size_t c = 0; c < counts.size(); ++c) {
      for (int r = 0; r < world; ++r) {
        std::vector<float> v(counts[c]);
        for (float& x : v) x = value(rng) * static_cast<float>(1 << (3 * r));
        data[c].push_back(std::move(v));
      }
    }
    auto by_direct = data;
    auto by_ring = data;
    std::vector<std::vector<int32_t>> gathered(world, std::vector<int32_t>(5, -1));
    auto status = OnEveryRank(world, [&](int r) {
      for (size_t c = 0; c < counts.size(); ++c) {
        DLRM_RETURN_IF_ERROR(direct[r]->AllReduceSum(by_direct[c][r].data(), counts[c]));
        DLRM_RETURN_IF_ERROR(ring[r]->AllReduceSum(by_ring[c][r].data(), counts[c]));
        if (c == 3) {
          // Rank 1's piece is empty.
          const std::vector<size_t> pieces =
              world == 2 ? std::vector<size_t>{5, 0} : std::vector<size_t>{2, 0, 3};
          const std::vector<int32_t> in = {r * 10 + 1, r * 10 + 2, r * 10 + 3, r * 10 + 4,
                                           r * 10 + 5};
          DLRM_RETURN_IF_ERROR(direct[r]->AllGatherV(in.data(), pieces, gathered[r].data()));
        }
      }
      return absl::OkStatus();
    });
    for (int r = 0; r < world; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
    for (size_t c = 0; c < counts.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "count " << counts[c]);
      std::vector<float> want = data[c][0];
      for (int q = 1; q < world; ++q) {
        for (size_t i = 0; i < counts[c]; ++i) want[i] += data[c][q][i];
      }
      const bool went_direct = counts[c] * sizeof(float) <= kLimit;
      for (int r = 0; r < world; ++r) {
        if (went_direct || world == 2) {
          EXPECT_EQ(by_direct[c][r], want) << "rank " << r;
        } else {
          EXPECT_EQ(by_direct[c][r], by_ring[c][r]) << "rank " << r;
        }
        if (world == 2) {
          EXPECT_EQ(by_ring[c][r], want) << "rank " << r;
        }
        EXPECT_EQ(by_ring[c][r], by_ring[c][0]) << "rank " << r;
      }
    }
    const std::vector<int32_t> want_gathered =
        world == 2 ? std::vector<int32_t>{1, 2, 3, 4, 5} : std::vector<int32_t>{1, 2, 21, 22, 23};
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(gathered[r], want_gathered) << "rank " << r;
      // Of 8 allreduces, the 100,000-value one is over the limit, and with three ranks the
      // direct exchange takes an allreduce only up to kDirectAllReduceWideMaxBytes (more than
      // the limit here).
      EXPECT_EQ(direct[r]->direct_calls(), 6 + 1) << "rank " << r;
      EXPECT_EQ(direct[r]->ring_calls(), 2) << "rank " << r;
      EXPECT_EQ(ring[r]->direct_calls(), 0);
    }
  }
}

// training.dense_sync_dtype: bf16. Two bytes a value on the wire, every rank the same bits; with
// two ranks each value is the fp32 sum of the two rounded once to nearest even, and with three
// it stays within the two roundings of the ring of the exact sum.
TEST_F(GlooAllReducerTest, Bf16AllReduceSendsHalfTheBytesAndEveryRankAgrees) {
  constexpr size_t kCount = 300001;
  for (int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    auto reducers = Connect(world, absl::StrCat("job/bf16-", world, "/gloo/"));
    ASSERT_EQ(reducers.size(), static_cast<size_t>(world));
    std::mt19937 rng(world);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::vector<uint16_t>> data(world, std::vector<uint16_t>(kCount));
    std::vector<std::vector<float>> wide(world, std::vector<float>(kCount));
    for (int r = 0; r < world; ++r) {
      std::vector<float> v(kCount);
      for (float& x : v) x = value(rng) * (r + 1);
      embedding::EncodeValues(embedding::RowDtype::kBf16, v.data(), kCount, data[r].data());
      embedding::DecodeValues(embedding::RowDtype::kBf16, data[r].data(), kCount, wide[r].data());
    }
    std::vector<float> sum(kCount, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < kCount; ++i) sum[i] += wide[r][i];
    }
    std::vector<int64_t> sent(world);
    auto status = OnEveryRank(world, [&](int r) {
      const int64_t before = reducers[r]->sent_bytes();
      DLRM_RETURN_IF_ERROR(reducers[r]->AllReduceSumBf16(data[r].data(), kCount));
      sent[r] = reducers[r]->sent_bytes() - before;
      return absl::OkStatus();
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(data[r], data[0]) << "rank " << r;
      EXPECT_EQ(sent[r], RingAllReduceSentBytes(2 * kCount, world));
      EXPECT_NEAR(2 * sent[r], RingAllReduceSentBytes(4 * kCount, world), 2);  // rounding
    }
    std::vector<float> got(kCount);
    embedding::DecodeValues(embedding::RowDtype::kBf16, data[0].data(), kCount, got.data());
    if (world == 2) {
      std::vector<uint16_t> rounded(kCount);
      embedding::EncodeValues(embedding::RowDtype::kBf16, sum.data(), kCount, rounded.data());
      EXPECT_EQ(data[0], rounded);
    }
    for (size_t i = 0; i < kCount; i += 7) {
      // A bf16 value is within 2^-9 of its magnitude after rounding; two roundings, sums <= 6.
      ASSERT_NEAR(got[i], sum[i], 2 * 6.0f / 256) << "index " << i;
    }
  }
}

TEST_F(GlooAllReducerTest, AllGatherGivesEveryRankEveryPieceInRankOrder) {
  constexpr int kWorld = 3;
  for (bool ring : {false, true}) {
    SCOPED_TRACE(ring ? "ring" : "direct");
    auto reducers = Connect(kWorld, ring ? "job/gather-ring/gloo/" : "job/gather/gloo/",
                            ring ? std::optional<size_t>(0) : std::nullopt);
    ASSERT_EQ(reducers.size(), static_cast<size_t>(kWorld));
    const std::vector<size_t> counts = {5, 0, 70001};  // a rank with nothing to say
    std::vector<std::vector<int32_t>> in(kWorld), out(kWorld, std::vector<int32_t>(70006, -1));
    std::vector<std::vector<float>> fin(kWorld), fout(kWorld, std::vector<float>(70006, -1));
    std::vector<int32_t> want;
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < counts[r]; ++i) {
        in[r].push_back(r * 1000000 + static_cast<int32_t>(i) - 7);
        fin[r].push_back(0.5f * static_cast<float>(in[r].back()));
      }
      want.insert(want.end(), in[r].begin(), in[r].end());
    }
    auto status = OnEveryRank(kWorld, [&](int r) {
      const int64_t before = reducers[r]->sent_bytes();
      DLRM_RETURN_IF_ERROR(reducers[r]->AllGatherV(in[r].data(), counts, out[r].data()));
      DLRM_RETURN_IF_ERROR(reducers[r]->AllGatherV(fin[r].data(), counts, fout[r].data()));
      const int64_t sent = reducers[r]->sent_bytes() - before;
      // Direct: each rank sends its own piece to every other rank. Ring: each rank forwards to the
      // next every piece but the one the next rank made.
      const int64_t expected = ring ? 2 * 4 * static_cast<int64_t>(70006 - counts[(r + 1) % kWorld])
                                    : 2 * 4 * static_cast<int64_t>(counts[r]) * (kWorld - 1);
      if (reducers[r]->direct_calls() != (ring ? 0 : 2) ||
          reducers[r]->ring_calls() != (ring ? 2 : 0)) {
        return absl::InternalError(absl::StrCat("rank ", r, ": ", reducers[r]->direct_calls(),
                                                " direct and ", reducers[r]->ring_calls(),
                                                " ring"));
      }
      if (sent != expected) {
        return absl::InternalError(absl::StrCat("rank ", r, " sent ", sent, " not ", expected));
      }
      return absl::OkStatus();
    });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(out[r], want) << "rank " << r;
      for (size_t i = 0; i < want.size(); i += 101) {
        ASSERT_EQ(fout[r][i], 0.5f * static_cast<float>(want[i])) << "rank " << r << " at " << i;
      }
    }
  }
}

// A hot set can be megabytes: rank 0's bytes reach every rank exactly, whatever they hold.
TEST_F(GlooAllReducerTest, BroadcastFromRankZeroCarriesArbitraryBytes) {
  constexpr int kWorld = 3;
  auto reducers = Connect(kWorld, "job/bcast/gloo/");
  ASSERT_EQ(reducers.size(), static_cast<size_t>(kWorld));
  std::string payload(3 * 1024 * 1024 + 2, '\0');  // not a multiple of 3
  std::mt19937 rng(5);
  for (char& c : payload) c = static_cast<char>(rng());
  std::vector<std::string> got(kWorld);
  auto status = OnEveryRank(kWorld, [&](int r) -> absl::Status {
    DLRM_ASSIGN_OR_RETURN(got[r],
                          BroadcastFromRankZero(reducers[r].get(), r == 0 ? payload : "ignored"));
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_TRUE(got[r] == payload) << "rank " << r << " got " << got[r].size() << " bytes";
  }
}

// The hot rows' exchange (worker/hot_sync.h) over real Gloo: every rank ends with every rank's
// touched rows and gradients, bit for bit, in rank order, and what it sends depends on the rows
// touched, not on how many rows the hot set holds.
TEST_F(GlooAllReducerTest, HotRowExchangeGivesEveryReplicaEveryGradientAndCostsWhatWasTouched) {
  constexpr int kWorld = 3;
  constexpr int kDim = 4;
  auto reducers = Connect(kWorld, "job/hot/gloo/");
  ASSERT_EQ(reducers.size(), static_cast<size_t>(kWorld));
  std::vector<HotRowGradients> local(kWorld);
  std::mt19937 rng(11);
  for (int r = 0; r < kWorld; ++r) {
    std::set<int32_t> rows;
    for (int i = 0; i < 80; ++i) rows.insert(static_cast<int32_t>(rng() % 100));
    for (int i = 0; i < 300 * r; ++i) rows.insert(100 + static_cast<int32_t>(rng() % 5000));
    for (int32_t row : rows) {
      local[r].rows.push_back(row);
      for (int k = 0; k < kDim; ++k) {
        local[r].grads.push_back(std::uniform_real_distribution<float>(-1, 1)(rng));
      }
    }
  }
  std::vector<int64_t> sent_small(kWorld), sent_large(kWorld);
  std::vector<GatheredHotGradients> small(kWorld), large(kWorld);
  for (int64_t total_rows : {int64_t{5100}, int64_t{50000000}}) {
    auto status = OnEveryRank(kWorld, [&](int r) {
      HotGradientExchange exchange;
      const int64_t before = reducers[r]->sent_bytes();
      GatheredHotGradients* out = total_rows == 5100 ? &small[r] : &large[r];
      DLRM_RETURN_IF_ERROR(exchange.Run(reducers[r].get(), kDim, total_rows, local[r], out));
      (total_rows == 5100 ? sent_small : sent_large)[r] = reducers[r]->sent_bytes() - before;
      return absl::OkStatus();
    });
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  }
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE(r);
    ASSERT_EQ(small[r].counts.size(), static_cast<size_t>(kWorld));
    for (int from = 0; from < kWorld; ++from) {
      auto rows = small[r].Rows(from);
      EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.end()), local[from].rows) << from;
      EXPECT_EQ(0, std::memcmp(small[r].Grads(from), local[from].grads.data(),
                               local[from].grads.size() * sizeof(float)))
          << from;
    }
    EXPECT_EQ(large[r].rows, small[r].rows);
    EXPECT_EQ(large[r].grads, small[r].grads);
    // A hot set 10,000x larger costs not one byte more.
    EXPECT_EQ(sent_large[r], sent_small[r]);
    // What the direct allgathers of counts, then row ids and gradients send: this rank's count
    // and rows to each other rank, (4 + 4 x dim) bytes a row.
    const size_t own = local[r].rows.size();
    EXPECT_EQ(sent_small[r], static_cast<int64_t>((kWorld - 1) * (4 + own * (4 + 4 * kDim))));
  }
}

// With half-precision tables the exchange sends each gradient in 2 bytes, and with
// hot_sync_dtype fp8 each row in 4 + dim (a scale and E4M3 codes): every rank, the sender
// included, ends with the same rounded gradients (so the replicas stay equal), for a fraction of
// the gradient bytes.
TEST_F(GlooAllReducerTest, HotRowExchangeOfHalfTablesSendsHalfGradientsEveryRankAgreesOn) {
  constexpr int kWorld = 3;
  constexpr int kDim = 6;
  for (HotWire wire : {HotWire::kFp16, HotWire::kBf16, HotWire::kFp8}) {
    SCOPED_TRACE(static_cast<int>(wire));
    auto reducers =
        Connect(kWorld, absl::StrCat("job/hot-half-", static_cast<int>(wire), "/gloo/"));
    ASSERT_EQ(reducers.size(), static_cast<size_t>(kWorld));
    std::vector<HotRowGradients> local(kWorld);
    std::mt19937 rng(5);
    for (int r = 0; r < kWorld; ++r) {
      std::set<int32_t> rows;
      for (int i = 0; i < 50 + 101 * r; ++i) rows.insert(static_cast<int32_t>(rng() % 3000));
      for (int32_t row : rows) {
        local[r].rows.push_back(row);
        for (int k = 0; k < kDim; ++k) {
          local[r].grads.push_back(std::uniform_real_distribution<float>(-1, 1)(rng));
        }
      }
    }
    // One row as it arrives: rounded by the wire's own codec.
    auto rounded = [&](const float* row, float* out) {
      unsigned char bytes[4 * kDim];
      if (wire == HotWire::kFp8) {
        embedding::EncodeFp8Rows(row, 1, kDim, bytes);
        embedding::DecodeFp8Rows(bytes, 1, kDim, out);
      } else {
        const auto dtype =
            wire == HotWire::kFp16 ? embedding::RowDtype::kFp16 : embedding::RowDtype::kBf16;
        embedding::EncodeValues(dtype, row, kDim, bytes);
        embedding::DecodeValues(dtype, bytes, kDim, out);
      }
    };
    std::vector<GatheredHotGradients> out(kWorld);
    std::vector<int64_t> sent(kWorld);
    auto status = OnEveryRank(kWorld, [&](int r) {
      HotGradientExchange exchange;
      const int64_t before = reducers[r]->sent_bytes();
      DLRM_RETURN_IF_ERROR(exchange.Run(reducers[r].get(), kDim, 3000, local[r], &out[r], wire));
      sent[r] = reducers[r]->sent_bytes() - before;
      return absl::OkStatus();
    });
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
    for (int r = 0; r < kWorld; ++r) {
      SCOPED_TRACE(r);
      EXPECT_EQ(out[r].rows, out[0].rows);
      EXPECT_EQ(out[r].grads, out[0].grads) << "every replica applies the same values";
      for (int from = 0; from < kWorld; ++from) {
        const float* got = out[r].Grads(from);
        for (size_t i = 0; i < local[from].rows.size(); ++i) {
          float want[kDim];
          rounded(&local[from].grads[i * kDim], want);
          for (int k = 0; k < kDim; ++k) {
            ASSERT_EQ(got[i * kDim + k], want[k]) << "rank " << from << " row " << i;
          }
        }
      }
      // The count, then (4 + the wire's bytes a row) a row, padded to 4 bytes, to each other rank.
      const int64_t row_bytes = HotWireRowBytes(wire, kDim);
      EXPECT_EQ(row_bytes, wire == HotWire::kFp8 ? 4 + kDim : 2 * kDim);
      const int64_t c = static_cast<int64_t>(local[r].rows.size());
      EXPECT_EQ(sent[r], (kWorld - 1) * (4 + 4 * c + (c * row_bytes + 3) / 4 * 4));
      EXPECT_LT(sent[r], static_cast<int64_t>((kWorld - 1) * (4 + c * (4 + 4 * kDim)) * 0.6));
    }
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

// A peer that is stopped (SIGSTOP, a hung host), not dead, keeps its sockets open: a collective
// with it waits out its op timeout (two minutes in a worker), and a run the coordinator replaced
// sat in it that long. Abort, from another thread, ends a direct-exchange collective in flight at
// once, and every later one (a ring collective's buffers are Gloo's own: it still ends at its op
// timeout).
TEST_F(GlooAllReducerTest, AbortEndsACollectiveWithAStoppedPeerAtOnce) {
  for (const int count : {1000, 1}) {
    const std::optional<size_t> direct;
    const std::string prefix = absl::StrCat("job/abort-", count, "/gloo/");
    std::vector<std::unique_ptr<GlooAllReducer>> reducers(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        GlooAllReducerOptions options = Options(r, 2, prefix, direct);
        options.op_timeout = absl::Seconds(60);
        auto reducer = GlooAllReducer::Create(options);
        ASSERT_TRUE(reducer.ok()) << reducer.status();
        reducers[r] = std::move(*reducer);
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(reducers[0] != nullptr && reducers[1] != nullptr);
    // Rank 1 never joins the collective; its connections stay open.
    std::vector<float> data(count, 1.0f);
    const absl::Time start = absl::Now();
    std::thread aborter([&] {
      absl::SleepFor(absl::Milliseconds(300));
      reducers[0]->Abort("the run was replaced");
    });
    const absl::Status status = reducers[0]->AllReduceSum(data.data(), data.size());
    aborter.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited for the op timeout";
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("the run was replaced"));
    EXPECT_EQ(reducers[0]->AllReduceSum(data.data(), data.size()).code(),
              absl::StatusCode::kUnavailable);
  }
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

// Workers that would choose differently between the direct exchange and the ring for one size
// (--ring-collectives on some only) would wait on each other until the collective timeout: they
// are refused when they connect, with the two limits named.
TEST_F(GlooAllReducerTest, RanksWithDifferentDirectLimitsAreRefusedWhenTheyConnect) {
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = GlooAllReducer::Create(Options(r, 2, "job/mixed/gloo/",
                                                 r == 0 ? std::nullopt : std::optional<size_t>(0)))
                      .status();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(status[0])) << status[0];
  EXPECT_TRUE(absl::IsFailedPrecondition(status[1])) << status[1];
  EXPECT_NE(status[0].message().find("rank 1 sends collectives of up to 0 bytes by direct "
                                     "exchange and rank 0 up to 4194304"),
            std::string::npos)
      << status[0];
  EXPECT_NE(status[1].message().find("--ring-collectives"), std::string::npos) << status[1];
}

TEST_F(GlooAllReducerTest, BadRankIsInvalidArgument) {
  EXPECT_EQ(GlooAllReducer::Create(Options(2, 2, "x/")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every stored float of every hot row, table after table.
std::vector<float> HotRowValues(const HotRowCache& cache) {
  std::vector<float> out;
  for (int t = 0; t < cache.num_tables(); ++t) {
    for (int64_t slot = 0; slot < cache.num_rows(t); ++slot) {
      const float* row = cache.StoredRow(t, static_cast<int32_t>(slot));
      out.insert(out.end(), row, row + cache.row_floats(t));
    }
  }
  return out;
}

// The hot-row exchange overlapped with compute (TrainerOptions::hot_allreducer, its own Gloo
// connections): a step leaves the hot rows as they were (its exchange is in flight; its update
// waits for the next step's pooling or a drain, however long the exchange took) and
// DrainHotExchange applies it, giving exactly the rows of the synchronous exchange after that
// step; after more steps, drained, the two ranks' replicas are equal bit for bit.
TEST_F(GlooAllReducerTest, OverlappedHotExchangeAppliesEachStepOnceItIsDrained) {
  constexpr int kWorld = 2;
  const std::string data = dir_ + "/train.tsv";
  ASSERT_TRUE(testing::GenerateCappedTsv(data, 3000, /*seed=*/4, 1000).ok());
  common::JobSpec spec = testing::SmallGeneratedJob(data, /*seed=*/6);
  auto dense = Connect(kWorld, "job/overlap/gloo/");
  auto hot = Connect(kWorld, "job/overlap/gloo-hot/");
  ASSERT_TRUE(dense[0] != nullptr && dense[1] != nullptr && hot[0] != nullptr && hot[1] != nullptr);

  // The hot set: every id of the first two batches (up to 64 a table), the same on both ranks.
  std::vector<std::vector<int64_t>> hot_ids(spec.tables.size());
  {
    auto probe = testing::MakeLocalRun(spec, data);
    Batch batch;
    for (int b = 0; b < 2; ++b) {
      ASSERT_TRUE(*probe->reader->Next(&batch));
      for (size_t t = 0; t < hot_ids.size(); ++t) {
        std::set<int64_t> ids(hot_ids[t].begin(), hot_ids[t].end());
        for (int64_t id : batch.sparse[t].ids) {
          if (ids.size() < 64) ids.insert(id);
        }
        hot_ids[t].assign(ids.begin(), ids.end());
      }
    }
  }
  // Each rank trains on batches of its own (rank 1 skips one) with the given hot collectives.
  auto make_run = [&](int rank, bool overlapped) {
    auto run = testing::MakeLocalRun(spec, data, [&](TrainerOptions& o) {
      o.allreducer = dense[rank].get();
      if (overlapped) o.hot_allreducer = hot[rank].get();
    });
    HotRowCacheOptions cache_options{.tables = TableConfigsFromSpec(spec),
                                     .optimizer = *SparseOptimizerFromSpec(spec),
                                     .seed = spec.seed};
    auto cache = HotRowCache::Create(cache_options, hot_ids);
    EXPECT_TRUE(cache.ok()) << cache.status();
    EXPECT_TRUE(run->trainer->SetHotRows(std::move(*cache)).ok());
    Batch skipped;
    if (rank == 1) {
      EXPECT_TRUE(*run->reader->Next(&skipped));
    }
    return run;
  };
  auto step = [](testing::LocalRun& run) -> absl::Status {
    Batch batch;
    DLRM_ASSIGN_OR_RETURN(bool more, run.reader->Next(&batch));
    if (!more) return absl::OutOfRangeError("out of batches");
    return run.trainer->Step(batch).status();
  };

  std::vector<std::unique_ptr<testing::LocalRun>> overlapped(kWorld), synchronous(kWorld);
  std::vector<std::vector<float>> initial(kWorld), after_one(kWorld), after_many(kWorld);
  std::vector<absl::Status> status = OnEveryRank(kWorld, [&](int r) -> absl::Status {
    overlapped[r] = make_run(r, /*overlapped=*/true);
    initial[r] = HotRowValues(*overlapped[r]->trainer->hot_rows());
    DLRM_RETURN_IF_ERROR(step(*overlapped[r]));
    // Time for the exchange to arrive: its update must still wait for the next step's pooling.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (HotRowValues(*overlapped[r]->trainer->hot_rows()) != initial[r]) {
      return absl::InternalError("the step's hot-row update was applied before the drain");
    }
    DLRM_RETURN_IF_ERROR(overlapped[r]->trainer->DrainHotExchange());
    after_one[r] = HotRowValues(*overlapped[r]->trainer->hot_rows());
    // The same after a step that follows a drain.
    DLRM_RETURN_IF_ERROR(step(*overlapped[r]));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (HotRowValues(*overlapped[r]->trainer->hot_rows()) != after_one[r]) {
      return absl::InternalError("the second step's update was applied before the next step");
    }
    for (int i = 0; i < 5; ++i) DLRM_RETURN_IF_ERROR(step(*overlapped[r]));
    DLRM_RETURN_IF_ERROR(overlapped[r]->trainer->DrainHotExchange());
    after_many[r] = HotRowValues(*overlapped[r]->trainer->hot_rows());
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << status[r];
  EXPECT_NE(after_one[0], initial[0]) << "the first step changed no hot row: a weak test";
  EXPECT_TRUE(after_many[0] == after_many[1]) << "the replicas differ";

  std::vector<std::vector<float>> sync_one(kWorld);
  status = OnEveryRank(kWorld, [&](int r) -> absl::Status {
    synchronous[r] = make_run(r, /*overlapped=*/false);
    DLRM_RETURN_IF_ERROR(step(*synchronous[r]));
    sync_one[r] = HotRowValues(*synchronous[r]->trainer->hot_rows());
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << status[r];
    EXPECT_TRUE(after_one[r] == sync_one[r]) << "rank " << r << ": one drained step is not the "
                                             << "synchronous exchange's";
  }
  // Both runs exchanged bytes for their hot rows, counted where they were sent.
  EXPECT_GT(overlapped[0]->trainer->counters().hot_sync_bytes, 0);
  EXPECT_GT(synchronous[0]->trainer->counters().hot_sync_bytes, 0);
}

}  // namespace
}  // namespace dlrm::worker
