#include "worker/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A ProgressLine writing into a pipe (not a terminal: one full line per Update with force).
class ProgressLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe2(fds_, O_NONBLOCK), 0);
    line_ = std::make_unique<ProgressLine>(ProgressOptions{.fd = fds_[1]});
  }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  std::string Read() {
    char buf[4096];
    const ssize_t n = ::read(fds_[0], buf, sizeof(buf));
    return n > 0 ? std::string(buf, n) : std::string();
  }

  int fds_[2] = {-1, -1};
  std::unique_ptr<ProgressLine> line_;
};

// The shown loss follows the recent steps: one first step far above the rest weighs 1/50 of its
// excess at first and fades, where an average started at the first loss kept 0.56 of it after 30
// steps. A constant loss reads exactly as itself from the first step on.
// dlrm_hot_hit_ratio's window: each read is the share of what was added since the one before, so
// a hot set that stops serving reads 0 at the next report, not a slowly falling average.
TEST(RatioSinceLastReadTest, EachReadCoversOnlyWhatCameSinceTheLastOne) {
  RatioSinceLastRead ratio;
  EXPECT_EQ(ratio.Read(0, 0), std::nullopt);
  EXPECT_EQ(ratio.Read(990, 1000), 0.99);
  EXPECT_EQ(ratio.Read(990, 1000), std::nullopt) << "nothing added since";
  EXPECT_EQ(ratio.Read(990, 3000), 0.0) << "2000 ids, none hot: the share since job start is 0.33";
  EXPECT_EQ(ratio.Read(1490, 4000), 0.5);
}

TEST(LossAverageTest, TheFirstStepsFadeAndAConstantLossReadsAsItself) {
  LossAverage constant;
  EXPECT_EQ(constant.value(), 0);
  for (int i = 0; i < 5; ++i) {
    constant.Add(0.625);
    EXPECT_DOUBLE_EQ(constant.value(), 0.625) << i;
  }
  LossAverage falling;
  falling.Add(2.0);
  EXPECT_DOUBLE_EQ(falling.value(), 2.0);
  for (int i = 0; i < 29; ++i) falling.Add(0.5);
  // The exact weighted mean: weights 0.98^(30-k) of the losses k = 1..30, normalised.
  double sum = 0, weight = 0;
  for (int k = 1; k <= 30; ++k) {
    const double w = std::pow(0.98, 30 - k);
    sum += w * (k == 1 ? 2.0 : 0.5);
    weight += w;
  }
  EXPECT_NEAR(falling.value(), sum / weight, 1e-12);
  EXPECT_LT(falling.value(), 0.54);  // an average started at 2.0: 0.5 + 1.5 x 0.98^29 = 1.33
}

TEST_F(ProgressLineTest, TheEtaUsesTheRateTheCallerMeasured) {
  // 1000 of 2000 steps left at 10 steps/s: 1:40, whatever the steps since the first line say.
  line_->Update("job", 500, 1000, 0.5, 100, /*force=*/true, 2000);
  EXPECT_THAT(Read(), AllOf(HasSubstr("step 500/2000"), Not(HasSubstr("ETA"))));
  line_->Update("job", 1000, 2000, 0.5, 100, /*force=*/true, 2000, /*steps_per_sec=*/10.0);
  EXPECT_THAT(Read(), HasSubstr("[ 50%] step 1000/2000  samples 2000  loss 0.50000  100 "
                                "samples/s  ETA 1:40"));
  // A recovery took the job back below its first line's step: still an ETA at the given rate.
  line_->Update("job", 400, 2000, 0.5, 100, /*force=*/true, 2000, /*steps_per_sec=*/20.0);
  EXPECT_THAT(Read(), HasSubstr("ETA 1:20"));
  // Without a measured rate there, no ETA (the steps since the first line went back).
  line_->Update("job", 400, 2000, 0.5, 100, /*force=*/true, 2000);
  EXPECT_THAT(Read(), Not(HasSubstr("ETA")));
}

}  // namespace
}  // namespace dlrm::worker
