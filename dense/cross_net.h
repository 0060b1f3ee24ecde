// CrossNet: DCNv2's low-rank cross layers (Wang et al. 2021, "DCN V2"; TorchRec's LowRankCrossNet),
// the interaction of DLRM-DCNv2 (MLPerf Training's recommendation benchmark since v3.0).
//
//   x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l      (* is element-wise)
//
// x_0 [batch x width] is the concatenation of the bottom MLP output and the pooled embeddings;
// the output x_L has the same width and feeds the top MLP. V_l is [rank x width] and U_l
// [width x rank] (PyTorch's nn.Linear convention, W [out x in]); b_l is [width]. A layer's
// parameters in its ParameterSlice are V, then U, then b (2 * rank * width + width floats); the
// gradients sit at the same offsets. Initialisation as TorchRec's: V and U Xavier-normal, b = 0.
//
// Like Mlp, Backward OVERWRITES the parameter gradients, the input pointer of Forward must stay
// valid and unchanged until the matching Backward, and one thread drives a CrossNet.
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

struct CrossNetOptions {
  int width = 0;   // of x_0 and of every layer's output
  int layers = 3;  // at least one
  int rank = 512;  // of V and U; a rank >= width is allowed (then nothing is "low" about it)
};

class CrossNet {
 public:
  static size_t NumParams(const CrossNetOptions& options);
  // Floats of the work buffers Create allocates for `max_batch` rows (t_, h_, xs_, dh_, dt_).
  static size_t WorkFloats(const CrossNetOptions& options, int max_batch);

  // INVALID_ARGUMENT naming the field for a non-positive width, layer count, rank or max_batch,
  // or a slice whose count is not NumParams(options). `backend` must outlive the CrossNet.
  static absl::StatusOr<std::unique_ptr<CrossNet>> Create(Backend* backend,
                                                          const CrossNetOptions& options,
                                                          int max_batch, ParameterSlice slice);

  // V and U ~ N(0, sqrt(2 / (in + out))) drawn from `rng` in layer order (V then U), b = 0.
  void Initialize(std::mt19937_64& rng);

  // Returns x_L [batch x width] (backend memory owned by the CrossNet, valid until the next
  // Forward).
  const float* Forward(const float* x0, int batch);
  // g = d loss / d x_L [batch x width] is clobbered. Overwrites every parameter gradient and
  // writes d loss / d x_0 to dx0 [batch x width]. Reports each layer's gradients to `ready`
  // (when not null) as they are written, last layer first.
  void Backward(float* g, int batch, float* dx0, const GradientsReady* ready = nullptr);

  // Exactly the Gemm calls of Forward / Backward (same shapes, same buffers) and nothing else.
  // Returns where Forward leaves x_L (its contents are not computed here).
  const float* GemmOnlyForward(const float* x0, int batch);
  void GemmOnlyBackward(float* g, int batch);

  const CrossNetOptions& options() const { return options_; }
  // Layer l's slice of the parameters (V, U, b) and of the gradients.
  ParameterSlice layer_slice(int l) const;

 private:
  CrossNet(Backend* backend, const CrossNetOptions& options, int max_batch, ParameterSlice slice);

  const float* V(int l) const { return layer_slice(l).params; }
  const float* U(int l) const { return V(l) + RankTimesWidth(); }
  const float* B(int l) const { return U(l) + RankTimesWidth(); }
  size_t RankTimesWidth() const { return static_cast<size_t>(options_.rank) * options_.width; }
  // The input x_l of layer l: x_0 for the first, the previous layer's output after that.
  const float* LayerInput(int l) const { return l == 0 ? x0_ : xs_[l - 1].data(); }
  void ProjectionGemms(int l, int batch);
  void BackwardGemms(int l, int batch, float* g);

  Backend* backend_;
  CrossNetOptions options_;
  int max_batch_;
  ParameterSlice slice_;
  std::vector<Tensor> t_;   // V_l x_l per layer [max_batch x rank]
  std::vector<Tensor> h_;   // U_l t_l + b_l per layer [max_batch x width]
  std::vector<Tensor> xs_;  // x_{l+1} per layer [max_batch x width]
  Tensor dh_;               // [max_batch x width]
  Tensor dt_;               // [max_batch x rank]
  const float* x0_ = nullptr;
};

}  // namespace dlrm::dense
