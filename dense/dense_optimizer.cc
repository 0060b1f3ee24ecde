#include "dense/dense_optimizer.h"

namespace dlrm::dense {

DenseOptimizer::DenseOptimizer(Backend* backend, const DenseOptimizerOptions& options, size_t count)
    : backend_(backend),
      options_(options),
      count_(count),
      state_(backend, 1, static_cast<int>(DenseOptimizerStateFloats(options.type) * count)) {}

void DenseOptimizer::Step(float* params, const float* grads) {
  ++step_;
  backend_->OptimizerStep(options_, step_, params, grads, state_.data(), count_);
}

}  // namespace dlrm::dense
