// DenseOptimizer: applies SGD, Adagrad or Adam to a contiguous parameter buffer on a Backend and
// owns the optimizer state (zero-initialised) and the step counter.
//
// State layout (identical on every backend, so checkpoints move between them): Adagrad keeps the
// sum of squared gradients [count]; Adam keeps m at [0, count) and v at [count, 2 count).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "dense/backend.h"
#include "dense/optimizer_options.h"
#include "dense/tensor.h"

namespace dlrm::dense {

class DenseOptimizer {
 public:
  // `backend` is not owned and must outlive the optimizer.
  DenseOptimizer(Backend* backend, const DenseOptimizerOptions& options, size_t count);

  // One step: increments step() and then updates params from grads (both `count` floats of
  // backend memory).
  void Step(float* params, const float* grads);

  const DenseOptimizerOptions& options() const { return options_; }
  // The learning rate may change between steps (schedules).
  void set_learning_rate(float lr) { options_.learning_rate = lr; }
  // Number of steps applied so far (Adam's bias correction uses step() after incrementing).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // DenseOptimizerStateFloats(type) * count floats (empty for SGD), backend memory.
  Tensor& state() { return state_; }
  const Tensor& state() const { return state_; }
  std::vector<float> StateToHost() const { return state_.ToHost(); }
  void StateFromHost(absl::Span<const float> values) { state_.CopyFromHost(values); }

 private:
  Backend* backend_;
  DenseOptimizerOptions options_;
  size_t count_;
  Tensor state_;
  int64_t step_ = 0;
};

}  // namespace dlrm::dense
