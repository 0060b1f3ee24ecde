// ParameterBuffer: every dense parameter of a model, and its gradient, in ONE contiguous backend
// buffer each, so that a distributed worker allreduces all dense gradients with one call and the
// optimizer runs as one kernel. Layers do not own parameters; they take slices of a buffer.
//
//   ParameterBuffer buffer(backend, Mlp::NumParams(bottom) + Mlp::NumParams(top));
//   auto bottom_mlp = Mlp::Create(backend, bottom, max_batch, buffer.Slice(0, n_bottom));
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "dense/backend.h"
#include "dense/tensor.h"

namespace dlrm::dense {

// A view of `count` parameters and their gradients, both in backend memory.
struct ParameterSlice {
  float* params = nullptr;
  float* grads = nullptr;
  size_t count = 0;
};

// Called by a backward as each layer's gradients become final: `count` gradients from `grads`
// (a part of ParameterBuffer::grads(); with a CUDA backend, final once the work enqueued so far
// has run). A distributed worker starts allreducing them while the backward goes on.
using GradientsReady = std::function<void(const float* grads, size_t count)>;

class ParameterBuffer {
 public:
  // Allocates `count` parameters and `count` gradients on `backend` (not owned, must outlive the
  // buffer), all zero.
  ParameterBuffer(Backend* backend, size_t count);

  size_t size() const { return params_.size(); }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }

  // [offset, offset + count) of both buffers; must lie inside (checked).
  ParameterSlice Slice(size_t offset, size_t count);

  void ZeroGrads() { grads_.Fill(0.0f); }
  std::vector<float> ParamsToHost() const { return params_.ToHost(); }
  std::vector<float> GradsToHost() const { return grads_.ToHost(); }
  // values.size() must equal size() (checked).
  void ParamsFromHost(absl::Span<const float> values) { params_.CopyFromHost(values); }

 private:
  Tensor params_;
  Tensor grads_;
};

}  // namespace dlrm::dense
