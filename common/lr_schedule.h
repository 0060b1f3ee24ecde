// A job's learning-rate schedule: a linear warm-up, a constant stretch, then a polynomial decay
// to a floor. It is the schedule of DLRM's reference code (facebookresearch/dlrm's
// LRPolicyScheduler), of TorchRec's DLRM example and of HugeCTR's solver, and MLPerf's DLRM
// benchmarks log the same three numbers (opt_learning_rate_warmup_steps,
// opt_learning_rate_decay_start_step, opt_learning_rate_decay_steps). One schedule scales both
// optimizers' learning rates: the dense one on the workers and the sparse one wherever rows are
// updated (in process, hot rows on the workers, cold rows on the parameter servers).
//
// Steps are counted over the whole job (a resumed job goes on from its checkpoint's step), with
// c = step + 1 the number of the update being made:
//   c <= warmup_steps:                            factor = c / warmup_steps
//   decay_steps > 0, c > decay_start:             factor = end_factor + (1 - end_factor) * r^power,
//                                                 r = max(0, (decay_start + decay_steps - c)) /
//                                                     decay_steps
//   otherwise:                                    factor = 1
// so the decay reaches end_factor at update decay_start + decay_steps and stays there. An empty
// schedule (no warm-up, no decay) gives exactly 1 at every step: training is bit for bit what it
// is without one.
#pragma once

#include <cstdint>

namespace dlrm::common {

struct LrSchedule {
  int64_t warmup_steps = 0;  // 0 = no warm-up
  int64_t decay_start = 0;   // updates before the decay begins (>= warmup_steps)
  int64_t decay_steps = 0;   // 0 = no decay
  double decay_power = 2.0;  // > 0; 2 as in DLRM's reference and HugeCTR
  double end_factor = 0.0;   // in [0, 1]: the floor, a fraction of the configured rate

  bool empty() const { return warmup_steps == 0 && decay_steps == 0; }
  bool operator==(const LrSchedule&) const = default;
};

// The factor of the configured learning rate for the update at 0-based job step `step` (>= 0).
double LrFactor(const LrSchedule& schedule, int64_t step);

// `rate` scaled by the schedule at `step`, as the optimizers take it. Exactly `rate` where the
// factor is 1.
inline float ScheduledRate(float rate, const LrSchedule& schedule, int64_t step) {
  if (schedule.empty()) return rate;
  return static_cast<float>(static_cast<double>(rate) * LrFactor(schedule, step));
}

}  // namespace dlrm::common
