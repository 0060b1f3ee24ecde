#include "dense/cross_net.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dlrm::dense {

size_t CrossNet::NumParams(const CrossNetOptions& o) {
  if (o.width <= 0 || o.rank <= 0 || o.layers <= 0) return 0;
  const size_t w = static_cast<size_t>(o.width);
  return static_cast<size_t>(o.layers) * (2 * static_cast<size_t>(o.rank) * w + w);
}

size_t CrossNet::WorkFloats(const CrossNetOptions& o, int max_batch) {
  if (o.width <= 0 || o.rank <= 0 || o.layers <= 0 || max_batch <= 0) return 0;
  const size_t w = static_cast<size_t>(o.width);
  const size_t r = static_cast<size_t>(o.rank);
  return (w + r + static_cast<size_t>(o.layers) * (r + 2 * w)) * static_cast<size_t>(max_batch);
}

absl::StatusOr<std::unique_ptr<CrossNet>> CrossNet::Create(Backend* backend,
                                                           const CrossNetOptions& options,
                                                           int max_batch, ParameterSlice slice) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("cross net: ", parts...));
  };
  if (options.width <= 0) return bad("width must be positive, got ", options.width);
  if (options.layers <= 0) return bad("layers must be positive, got ", options.layers);
  if (options.rank <= 0) return bad("rank must be positive, got ", options.rank);
  if (max_batch <= 0) return bad("max_batch must be positive, got ", max_batch);
  if (slice.count != NumParams(options)) {
    return bad("parameter slice of ", slice.count, " floats, need ", NumParams(options));
  }
  return std::unique_ptr<CrossNet>(new CrossNet(backend, options, max_batch, slice));
}

CrossNet::CrossNet(Backend* backend, const CrossNetOptions& options, int max_batch,
                   ParameterSlice slice)
    : backend_(backend),
      options_(options),
      max_batch_(max_batch),
      slice_(slice),
      dh_(backend, max_batch, options.width),
      dt_(backend, max_batch, options.rank) {
  for (int l = 0; l < options.layers; ++l) {
    t_.emplace_back(backend, max_batch, options.rank);
    h_.emplace_back(backend, max_batch, options.width);
    xs_.emplace_back(backend, max_batch, options.width);
  }
}

ParameterSlice CrossNet::layer_slice(int l) const {
  const size_t per_layer = 2 * RankTimesWidth() + static_cast<size_t>(options_.width);
  const size_t offset = static_cast<size_t>(l) * per_layer;
  return ParameterSlice{
      .params = slice_.params + offset, .grads = slice_.grads + offset, .count = per_layer};
}

void CrossNet::Initialize(std::mt19937_64& rng) {
  const float scale = std::sqrt(2.0f / static_cast<float>(options_.width + options_.rank));
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> host(layer_slice(0).count, 0.0f);  // b stays 0
  const size_t kernels = 2 * RankTimesWidth();
  for (int l = 0; l < options_.layers; ++l) {
    for (size_t i = 0; i < kernels; ++i) host[i] = dist(rng);
    backend_->CopyFromHost(host.data(), layer_slice(l).params, host.size());
  }
}

void CrossNet::ProjectionGemms(int l, int batch) {
  const int w = options_.width;
  const int r = options_.rank;
  // t [batch x r] = x_l V^T, then h [batch x w] = t U^T.
  backend_->Gemm(false, true, batch, r, w, 1.0f, LayerInput(l), V(l), 0.0f, t_[l].data());
  backend_->Gemm(false, true, batch, w, r, 1.0f, t_[l].data(), U(l), 0.0f, h_[l].data());
}

void CrossNet::BackwardGemms(int l, int batch, float* g) {
  const int w = options_.width;
  const int r = options_.rank;
  float* dv = layer_slice(l).grads;
  float* du = dv + RankTimesWidth();
  // dU [w x r] = dh^T t;  dt [batch x r] = dh U;  dV [r x w] = dt^T x_l;
  // g += dt V: the gradient reaching x_l through the projection, on top of the residual's g.
  backend_->Gemm(true, false, w, r, batch, 1.0f, dh_.data(), t_[l].data(), 0.0f, du);
  backend_->Gemm(false, false, batch, r, w, 1.0f, dh_.data(), U(l), 0.0f, dt_.data());
  backend_->Gemm(true, false, r, w, batch, 1.0f, dt_.data(), LayerInput(l), 0.0f, dv);
  backend_->Gemm(false, false, batch, w, r, 1.0f, dt_.data(), V(l), 1.0f, g);
}

const float* CrossNet::Forward(const float* x0, int batch) {
  DLRM_CHECK(batch >= 0 && batch <= max_batch_) << "batch " << batch << " > max " << max_batch_;
  x0_ = x0;
  const size_t count = static_cast<size_t>(batch) * options_.width;
  for (int l = 0; l < options_.layers; ++l) {
    ProjectionGemms(l, batch);
    backend_->BiasActivation(h_[l].data(), B(l), batch, options_.width, /*relu=*/false);
    backend_->CrossCombine(x0, h_[l].data(), LayerInput(l), xs_[l].data(), count);
  }
  return xs_.back().data();
}

void CrossNet::Backward(float* g, int batch, float* dx0, const GradientsReady* ready) {
  DLRM_CHECK(batch >= 0 && batch <= max_batch_) << "batch " << batch << " > max " << max_batch_;
  DLRM_CHECK(x0_ != nullptr) << "CrossNet::Backward() before Forward()";
  const size_t count = static_cast<size_t>(batch) * options_.width;
  // dx0 collects x_0's gradient through every layer's product; g carries the gradient of the
  // current layer's output down the residual chain, and reaches x_0 itself after layer 0.
  backend_->Fill(dx0, count, 0.0f);
  for (int l = options_.layers - 1; l >= 0; --l) {
    backend_->CrossCombineBackward(x0_, h_[l].data(), g, dh_.data(), dx0, count);
    backend_->ColumnSum(dh_.data(), batch, options_.width,
                        layer_slice(l).grads + 2 * RankTimesWidth());
    BackwardGemms(l, batch, g);
    if (ready != nullptr) (*ready)(layer_slice(l).grads, layer_slice(l).count);
  }
  backend_->Axpy(1.0f, g, dx0, count);
}

const float* CrossNet::GemmOnlyForward(const float* x0, int batch) {
  x0_ = x0;
  for (int l = 0; l < options_.layers; ++l) ProjectionGemms(l, batch);
  return xs_.back().data();
}

void CrossNet::GemmOnlyBackward(float* g, int batch) {
  for (int l = options_.layers - 1; l >= 0; --l) BackwardGemms(l, batch, g);
}

}  // namespace dlrm::dense
