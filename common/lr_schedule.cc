#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace dlrm::common {

double LrFactor(const LrSchedule& s, int64_t step) {
  const int64_t c = std::max<int64_t>(step, 0) + 1;
  if (s.warmup_steps > 0 && c <= s.warmup_steps) {
    return static_cast<double>(c) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay_steps > 0 && c > s.decay_start) {
    const int64_t left = std::max<int64_t>(s.decay_start + s.decay_steps - c, 0);
    const double r = static_cast<double>(left) / static_cast<double>(s.decay_steps);
    return s.end_factor + (1.0 - s.end_factor) * std::pow(r, s.decay_power);
  }
  return 1.0;
}

}  // namespace dlrm::common
