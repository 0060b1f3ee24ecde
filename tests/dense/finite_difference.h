// Central finite differences of a scalar objective evaluated on a Backend, for checking backward
// passes. Networks with ReLUs are piecewise smooth: a coordinate whose +-h perturbation flips any
// ReLU (the objective reports its activation pattern) is skipped, and the caller asserts that only
// a few were.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "dense/backend.h"
#include "gtest/gtest.h"

namespace dlrm::dense::testing {

struct Evaluation {
  double value = 0.0;
  std::vector<bool> relu_pattern;  // empty when the objective has no kinks
};

struct FiniteDifferenceResult {
  int checked = 0;
  int skipped = 0;
};

// For each index in `indices`: perturbs x[index] (backend memory) by +-h, evaluates, restores, and
// expects |analytic[index] - numeric| <= abs_tol + rel_tol * |analytic[index]|.
inline FiniteDifferenceResult CheckFiniteDifferences(Backend* backend, float* x,
                                                     const std::vector<size_t>& indices,
                                                     const std::vector<float>& analytic, float h,
                                                     double abs_tol, double rel_tol,
                                                     const std::function<Evaluation()>& objective,
                                                     const std::string& what) {
  FiniteDifferenceResult result;
  const Evaluation base = objective();
  for (size_t index : indices) {
    float x0 = 0.0f;
    backend->CopyToHost(x + index, &x0, 1);
    backend->Synchronize();
    const float plus_value = x0 + h, minus_value = x0 - h;
    backend->CopyFromHost(&plus_value, x + index, 1);
    const Evaluation plus = objective();
    backend->CopyFromHost(&minus_value, x + index, 1);
    const Evaluation minus = objective();
    backend->CopyFromHost(&x0, x + index, 1);
    if (plus.relu_pattern != base.relu_pattern || minus.relu_pattern != base.relu_pattern) {
      ++result.skipped;
      continue;
    }
    ++result.checked;
    // (x0 + h) - (x0 - h) in float is not exactly 2h: divide by the step actually taken.
    const double numeric = (plus.value - minus.value) /
                           (static_cast<double>(plus_value) - static_cast<double>(minus_value));
    EXPECT_NEAR(analytic[index], numeric, abs_tol + rel_tol * std::fabs(analytic[index]))
        << what << "[" << index << "]";
  }
  return result;
}

// Every index of a buffer of `count`, or `samples` of them spread evenly when count is larger.
inline std::vector<size_t> SampleIndices(size_t count, size_t samples) {
  std::vector<size_t> indices;
  if (count <= samples) {
    for (size_t i = 0; i < count; ++i) indices.push_back(i);
  } else {
    for (size_t i = 0; i < samples; ++i)
      indices.push_back(std::min(count - 1, i * count / samples + (i * 7) % 3));
  }
  return indices;
}

}  // namespace dlrm::dense::testing
