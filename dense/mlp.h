// Fully connected layers on a Backend.
//
// Convention (PyTorch's nn.Linear): W is [out x in] row-major, y = act(x W^T + b), with x
// [batch x in] and y [batch x out]. A layer's parameters in its ParameterSlice are W followed by b
// (out * in + out floats); its gradients sit at the same offsets of the gradient buffer.
//
// Backward OVERWRITES the parameter gradients with those of the last batch (no accumulation, so no
// zeroing pass is needed between steps); dx is written (overwritten) as well.
//
// Layers keep their outputs in buffers allocated once for max_batch rows; a Forward's output and
// the input pointer it was given must stay valid and unchanged until the matching Backward. Not
// thread-safe: one thread drives a layer at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/backend.h"
#include "dense/parameter_buffer.h"
#include "dense/tensor.h"

namespace dlrm::dense {

class Linear {
 public:
  static size_t NumParams(int in, int out) {
    return static_cast<size_t>(out) * in + static_cast<size_t>(out);
  }

  // `slice.count` must equal NumParams(in, out) and in, out, max_batch be positive (checked: the
  // Mlp factory validates user-facing shapes first). `backend` must outlive the layer.
  Linear(Backend* backend, int in, int out, bool relu, int max_batch, ParameterSlice slice);

  // DLRM's initialisation: W ~ N(0, sqrt(2 / (in + out))), b ~ N(0, sqrt(1 / out)), drawn on the
  // host from `rng` (W row-major first, then b) and copied to the backend.
  void Initialize(std::mt19937_64& rng);

  // y = act(x W^T + b) for batch rows (0 <= batch <= max_batch). Returns y (backend memory, owned
  // by the layer, valid until the next Forward).
  const float* Forward(const float* x, int batch);
  // dy: d loss / d y [batch x out], used as scratch (clobbered). Writes dW and db, and dx
  // [batch x in] unless dx is nullptr (the input needs no gradient).
  void Backward(float* dy, int batch, float* dx);

  // Exactly the GEMMs of Forward / Backward (same shapes, same buffers; the forward through
  // LinearForward without its bias and ReLU) and nothing else.
  void GemmOnlyForward(const float* x, int batch);
  void GemmOnlyBackward(float* dy, int batch, float* dx);

  int in() const { return in_; }
  int out() const { return out_; }
  bool relu() const { return relu_; }
  const float* weights() const { return slice_.params; }
  const float* bias() const { return slice_.params + static_cast<size_t>(out_) * in_; }
  const float* weight_grads() const { return slice_.grads; }
  const float* bias_grads() const { return slice_.grads + static_cast<size_t>(out_) * in_; }
  const float* output() const { return y_.data(); }

 private:
  // y = x W^T, then act(y + b) unless gemm_only.
  void ForwardGemm(const float* x, int batch, bool gemm_only);
  void WeightGradGemm(const float* dy, int batch);
  void InputGradGemm(const float* dy, int batch, float* dx);

  Backend* backend_;
  int in_;
  int out_;
  bool relu_;
  int max_batch_;
  ParameterSlice slice_;
  Tensor y_;                  // [max_batch x out]
  const float* x_ = nullptr;  // input of the last Forward
};

struct MlpOptions {
  int input_width = 0;
  // Output width of each layer (not counting the input); at least one.
  std::vector<int> widths;
  // ReLU after every layer when true; after all but the last when false.
  bool relu_on_last = true;
};

class Mlp {
 public:
  static size_t NumParams(const MlpOptions& options);
  // Floats of the work buffers Create allocates for `max_batch` rows: each layer's output and
  // the gradient below every layer but the first (DlrmDenseModel::MemoryFloats adds them up).
  static size_t WorkFloats(const MlpOptions& options, int max_batch);

  // INVALID_ARGUMENT for non-positive widths or max_batch, an empty widths list, or a slice whose
  // count is not NumParams(options). `backend` is not owned and must outlive the Mlp.
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(Backend* backend, const MlpOptions& options,
                                                     int max_batch, ParameterSlice slice);

  // Initialises the layers in order from `rng` (see Linear::Initialize).
  void Initialize(std::mt19937_64& rng);

  // Returns the output [batch x output_width()] (backend memory owned by the Mlp). `x` must stay
  // valid and unchanged until Backward.
  const float* Forward(const float* x, int batch);
  // dy [batch x output_width()] is clobbered. Overwrites all parameter gradients; writes dx
  // [batch x input_width()] unless dx is nullptr (which also skips the first layer's input GEMM).
  // Reports each layer's gradients to `ready` (when not null) as they are written, last layer
  // first.
  void Backward(float* dy, int batch, float* dx, const GradientsReady* ready = nullptr);

  // Exactly the Gemm calls of Forward / Backward, same shapes and buffers, nothing else.
  void GemmOnlyForward(const float* x, int batch);
  void GemmOnlyBackward(float* dy, int batch, float* dx);

  int input_width() const { return options_.input_width; }
  int output_width() const { return options_.widths.back(); }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Linear& layer(int i) { return *layers_[i]; }
  const MlpOptions& options() const { return options_; }

 private:
  Mlp(Backend* backend, const MlpOptions& options, int max_batch, ParameterSlice slice);

  MlpOptions options_;
  std::vector<std::unique_ptr<Linear>> layers_;
  std::vector<Tensor> dgrads_;  // d loss / d output of layer i, for i < num_layers - 1
};

}  // namespace dlrm::dense
