#include "common/lr_schedule.h"

#include <cmath>
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;

// The schedule of DLRM's reference on Criteo Terabyte (facebookresearch/dlrm's
// run_and_time.sh: 2750 warm-up steps, decay from 49315 over 27772), written out for the
// updates c = step + 1 from the formula in lr_schedule.h.
TEST(LrSchedule, WarmsUpLinearlyHoldsThenDecaysToItsFloor) {
  const LrSchedule s{.warmup_steps = 2750,
                     .decay_start = 49315,
                     .decay_steps = 27772,
                     .decay_power = 2.0,
                     .end_factor = 0.01};
  EXPECT_DOUBLE_EQ(LrFactor(s, 0), 1.0 / 2750);
  EXPECT_DOUBLE_EQ(LrFactor(s, 999), 1000.0 / 2750);
  EXPECT_DOUBLE_EQ(LrFactor(s, 2749), 1.0);  // the last warm-up update is at the full rate
  EXPECT_DOUBLE_EQ(LrFactor(s, 2750), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(s, 49314), 1.0);  // update 49315: the decay has not begun
  const auto decayed = [&](int64_t c) {
    const double r = static_cast<double>(49315 + 27772 - c) / 27772;
    return 0.01 + 0.99 * r * r;
  };
  EXPECT_DOUBLE_EQ(LrFactor(s, 49315), decayed(49316));
  EXPECT_DOUBLE_EQ(LrFactor(s, 60000), decayed(60001));
  EXPECT_DOUBLE_EQ(LrFactor(s, 49315 + 27772 - 1), 0.01);  // the decay's last update
  EXPECT_DOUBLE_EQ(LrFactor(s, 200000), 0.01);             // and every one after it
  // Monotone: never up during the decay.
  for (int64_t step = 49315; step < 49315 + 27772; step += 97) {
    EXPECT_GE(LrFactor(s, step), LrFactor(s, step + 1)) << step;
  }
}

TEST(LrSchedule, DecayAloneAndOtherPowers) {
  const LrSchedule linear{.decay_start = 10, .decay_steps = 4, .decay_power = 1.0};
  EXPECT_DOUBLE_EQ(LrFactor(linear, 0), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 9), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 10), 0.75);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 11), 0.5);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 12), 0.25);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 13), 0.0);
  EXPECT_DOUBLE_EQ(LrFactor(linear, 14), 0.0);
  const LrSchedule warmup_only{.warmup_steps = 4};
  EXPECT_DOUBLE_EQ(LrFactor(warmup_only, 0), 0.25);
  EXPECT_DOUBLE_EQ(LrFactor(warmup_only, 3), 1.0);
  EXPECT_DOUBLE_EQ(LrFactor(warmup_only, 1000000), 1.0);
}

TEST(LrSchedule, NoScheduleAndTheFullRateLeaveTheRateBitForBit) {
  const float rate = 0.0123456789f;
  EXPECT_TRUE(LrSchedule{}.empty());
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 40}) {
    EXPECT_EQ(ScheduledRate(rate, LrSchedule{}, step), rate);
  }
  const LrSchedule warmup{.warmup_steps = 8};
  EXPECT_EQ(ScheduledRate(rate, warmup, 7), rate);
  EXPECT_EQ(ScheduledRate(rate, warmup, 500), rate);
  EXPECT_EQ(ScheduledRate(rate, warmup, 1), static_cast<float>(rate * 0.25));
}

constexpr char kSpec[] = R"(
model: {bottom_mlp: [16], top_mlp: [1], embedding_dim: 16}
tables: {cardinalities: [10, 20]}
optimizer:
  dense: {type: sgd, learning_rate: 0.5}
  sparse: {type: sgd, learning_rate: 0.25}
)";

absl::StatusOr<JobSpec> WithSchedule(const std::string& schedule) {
  return ParseJobSpec(std::string(kSpec) + "  schedule: " + schedule + "\n");
}

TEST(LrScheduleSpec, IsReadAndRoundTripsThroughYaml) {
  auto spec = WithSchedule(
      "{warmup_steps: 100, decay_start: 1000, decay_steps: 500, decay_power: 1.5, "
      "end_factor: 0.05}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const LrSchedule expected{.warmup_steps = 100,
                            .decay_start = 1000,
                            .decay_steps = 500,
                            .decay_power = 1.5,
                            .end_factor = 0.05};
  EXPECT_EQ(spec->lr_schedule, expected);
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(again->lr_schedule, expected);
  // No schedule: none written, none read back.
  auto plain = ParseJobSpec(kSpec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->lr_schedule.empty());
  EXPECT_THAT(JobSpecToYaml(*plain), ::testing::Not(HasSubstr("schedule")));
}

TEST(LrScheduleSpec, BadValuesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"{warmup_steps: -1}", "optimizer.schedule.warmup_steps: must be >= 0, got -1"},
      {"{decay_steps: -5}", "optimizer.schedule.decay_steps: must be >= 0, got -5"},
      {"{warmup_steps: 100, decay_start: 50, decay_steps: 10}",
       "optimizer.schedule.decay_start: 50 is inside the warm-up of 100 steps"},
      {"{decay_steps: 10, decay_power: 0}", "optimizer.schedule.decay_power: must be in (0, 100]"},
      {"{decay_steps: 10, decay_power: .nan}",
       "optimizer.schedule.decay_power: must be in (0, 100]"},
      {"{decay_steps: 10, end_factor: 1.5}", "optimizer.schedule.end_factor: must be in [0, 1]"},
      {"{warmup_steps: 2000000000000}", "kMaxScheduleSteps"},
      {"{warmup: 10}", "warmup"},
      {"[1, 2]", "optimizer.schedule: must be a map"},
      {"{warmup_steps: ten}", "optimizer.schedule.warmup_steps"},
  };
  for (const auto& [schedule, message] : cases) {
    auto spec = WithSchedule(schedule);
    ASSERT_FALSE(spec.ok()) << schedule;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(message)) << schedule;
  }
}

}  // namespace
}  // namespace dlrm::common
