#include "dense/mlp.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dlrm::dense {

Linear::Linear(Backend* backend, int in, int out, bool relu, int max_batch, ParameterSlice slice)
    : backend_(backend),
      in_(in),
      out_(out),
      relu_(relu),
      max_batch_(max_batch),
      slice_(slice),
      y_(backend, max_batch, out) {
  DLRM_CHECK(in > 0 && out > 0 && max_batch > 0 && slice.count == NumParams(in, out))
      << "linear " << in << " -> " << out << ", max_batch " << max_batch << ", slice of "
      << slice.count;
}

void Linear::Initialize(std::mt19937_64& rng) {
  std::vector<float> host(NumParams(in_, out_));
  std::normal_distribution<float> w_dist(0.0f, std::sqrt(2.0f / static_cast<float>(in_ + out_)));
  std::normal_distribution<float> b_dist(0.0f, std::sqrt(1.0f / static_cast<float>(out_)));
  const size_t num_weights = static_cast<size_t>(out_) * in_;
  for (size_t i = 0; i < num_weights; ++i) host[i] = w_dist(rng);
  for (int i = 0; i < out_; ++i) host[num_weights + i] = b_dist(rng);
  backend_->CopyFromHost(host.data(), slice_.params, host.size());
}

void Linear::ForwardGemm(const float* x, int batch, bool gemm_only) {
  DLRM_CHECK(batch >= 0 && batch <= max_batch_) << "batch " << batch << " > max " << max_batch_;
  x_ = x;
  backend_->LinearForward(x, slice_.params, gemm_only ? nullptr : bias(), batch, in_, out_, relu_,
                          y_.data());
}

void Linear::WeightGradGemm(const float* dy, int batch) {
  // dW [out x in] = dy^T [out x batch] * x [batch x in]
  backend_->Gemm(/*trans_a=*/true, /*trans_b=*/false, out_, in_, batch, 1.0f, dy, x_, 0.0f,
                 slice_.grads);
}

void Linear::InputGradGemm(const float* dy, int batch, float* dx) {
  // dx [batch x in] = dy [batch x out] * W [out x in]
  backend_->Gemm(/*trans_a=*/false, /*trans_b=*/false, batch, in_, out_, 1.0f, dy, slice_.params,
                 0.0f, dx);
}

const float* Linear::Forward(const float* x, int batch) {
  ForwardGemm(x, batch, /*gemm_only=*/false);
  return y_.data();
}

void Linear::Backward(float* dy, int batch, float* dx) {
  DLRM_CHECK(batch >= 0 && batch <= max_batch_) << "batch " << batch << " > max " << max_batch_;
  float* db = slice_.grads + static_cast<size_t>(out_) * in_;
  if (relu_) {
    backend_->ReluBackwardColumnSum(y_.data(), dy, batch, out_, db);
  } else {
    backend_->ColumnSum(dy, batch, out_, db);
  }
  WeightGradGemm(dy, batch);
  if (dx != nullptr) InputGradGemm(dy, batch, dx);
}

void Linear::GemmOnlyForward(const float* x, int batch) {
  ForwardGemm(x, batch, /*gemm_only=*/true);
}

void Linear::GemmOnlyBackward(float* dy, int batch, float* dx) {
  WeightGradGemm(dy, batch);
  if (dx != nullptr) InputGradGemm(dy, batch, dx);
}

size_t Mlp::NumParams(const MlpOptions& options) {
  size_t total = 0;
  int in = options.input_width;
  for (int out : options.widths) {
    total += Linear::NumParams(in, out);
    in = out;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(Backend* backend, const MlpOptions& options,
                                                 int max_batch, ParameterSlice slice) {
  if (backend == nullptr) return absl::InvalidArgumentError("mlp: backend is null");
  if (options.input_width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: input width must be positive, got ", options.input_width));
  }
  if (options.widths.empty()) return absl::InvalidArgumentError("mlp: no layers");
  for (size_t i = 0; i < options.widths.size(); ++i) {
    if (options.widths[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp: layer ", i, " width must be positive, got ", options.widths[i]));
    }
  }
  if (max_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: max batch must be positive, got ", max_batch));
  }
  if (slice.count != NumParams(options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp: parameter slice has ", slice.count, " floats, the layers need ", NumParams(options)));
  }
  return std::unique_ptr<Mlp>(new Mlp(backend, options, max_batch, slice));
}

size_t Mlp::WorkFloats(const MlpOptions& options, int max_batch) {
  size_t per_row = 0;
  const size_t n = options.widths.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t out = static_cast<size_t>(std::max(0, options.widths[i]));
    per_row += i + 1 < n ? 2 * out : out;  // y_ of the layer, and dgrads_ below the next one
  }
  return per_row * static_cast<size_t>(std::max(0, max_batch));
}

Mlp::Mlp(Backend* backend, const MlpOptions& options, int max_batch, ParameterSlice slice)
    : options_(options) {
  size_t offset = 0;
  int in = options.input_width;
  const int n = static_cast<int>(options.widths.size());
  for (int i = 0; i < n; ++i) {
    const int out = options.widths[i];
    const size_t count = Linear::NumParams(in, out);
    const bool relu = i + 1 < n || options.relu_on_last;
    layers_.push_back(std::make_unique<Linear>(
        backend, in, out, relu, max_batch,
        ParameterSlice{slice.params + offset, slice.grads + offset, count}));
    if (i + 1 < n) dgrads_.emplace_back(backend, max_batch, out);
    offset += count;
    in = out;
  }
}

void Mlp::Initialize(std::mt19937_64& rng) {
  for (auto& layer : layers_) layer->Initialize(rng);
}

const float* Mlp::Forward(const float* x, int batch) {
  const float* h = x;
  for (auto& layer : layers_) h = layer->Forward(h, batch);
  return h;
}

void Mlp::Backward(float* dy, int batch, float* dx, const GradientsReady* ready) {
  float* g = dy;
  for (int i = num_layers() - 1; i >= 0; --i) {
    float* below = i > 0 ? dgrads_[i - 1].data() : dx;
    Linear& layer = *layers_[i];
    layer.Backward(g, batch, below);
    if (ready != nullptr)
      (*ready)(layer.weight_grads(), Linear::NumParams(layer.in(), layer.out()));
    g = below;
  }
}

void Mlp::GemmOnlyForward(const float* x, int batch) {
  const float* h = x;
  for (auto& layer : layers_) {
    layer->GemmOnlyForward(h, batch);
    h = layer->output();
  }
}

void Mlp::GemmOnlyBackward(float* dy, int batch, float* dx) {
  float* g = dy;
  for (int i = num_layers() - 1; i >= 0; --i) {
    float* below = i > 0 ? dgrads_[i - 1].data() : dx;
    layers_[i]->GemmOnlyBackward(g, batch, below);
    g = below;
  }
}

}  // namespace dlrm::dense
