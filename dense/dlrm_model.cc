#include "dense/dlrm_model.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::dense {
namespace {

MlpOptions BottomOptions(const DlrmDenseModelOptions& o) {
  return MlpOptions{
      .input_width = o.num_dense_features, .widths = o.bottom_widths, .relu_on_last = true};
}

int InteractionWidthOf(const DlrmDenseModelOptions& o) {
  return DlrmDenseModel::InteractionWidth(o.interaction, o.num_tables, o.embedding_dim);
}

MlpOptions TopOptions(const DlrmDenseModelOptions& o) {
  return MlpOptions{
      .input_width = InteractionWidthOf(o), .widths = o.top_widths, .relu_on_last = false};
}

CrossNetOptions CrossOptions(const DlrmDenseModelOptions& o) {
  return CrossNetOptions{
      .width = InteractionWidthOf(o), .layers = o.cross_layers, .rank = o.low_rank};
}

bool HasCrossNet(const DlrmDenseModelOptions& o) { return o.interaction == Interaction::kDcnV2; }

absl::Status Validate(const DlrmDenseModelOptions& o) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("dlrm dense model: ", parts...));
  };
  if (o.num_dense_features <= 0) {
    return bad("num_dense_features must be positive, got ", o.num_dense_features);
  }
  if (o.num_tables < 0) return bad("num_tables must be >= 0, got ", o.num_tables);
  if (o.embedding_dim <= 0) return bad("embedding_dim must be positive, got ", o.embedding_dim);
  if (o.max_batch_size <= 0) {
    return bad("max_batch_size must be positive, got ", o.max_batch_size);
  }
  if (o.bottom_widths.empty() || o.bottom_widths.back() != o.embedding_dim) {
    return bad("the bottom MLP [", absl::StrJoin(o.bottom_widths, ", "),
               "] must end in embedding_dim ", o.embedding_dim);
  }
  if (o.top_widths.empty() || o.top_widths.back() != 1) {
    return bad("the top MLP [", absl::StrJoin(o.top_widths, ", "), "] must end in width 1");
  }
  for (int w : o.bottom_widths) {
    if (w <= 0) return bad("bottom MLP width ", w, " must be positive");
  }
  for (int w : o.top_widths) {
    if (w <= 0) return bad("top MLP width ", w, " must be positive");
  }
  if (HasCrossNet(o)) {
    if (o.cross_layers <= 0) return bad("cross_layers must be positive, got ", o.cross_layers);
    if (o.low_rank <= 0) return bad("low_rank must be positive, got ", o.low_rank);
  }
  return Annotate(ValidateDenseOptimizerOptions(o.optimizer), "dlrm dense model");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DlrmDenseModel>> DlrmDenseModel::Create(
    Backend* backend, const DlrmDenseModelOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("dlrm dense model: backend is null");
  DLRM_RETURN_IF_ERROR(Validate(options));
  const size_t num_bottom = Mlp::NumParams(BottomOptions(options));
  const size_t num_cross = HasCrossNet(options) ? CrossNet::NumParams(CrossOptions(options)) : 0;
  const size_t num_top = Mlp::NumParams(TopOptions(options));
  std::unique_ptr<DlrmDenseModel> model(
      new DlrmDenseModel(backend, options, num_bottom + num_cross + num_top));
  const int max_batch = options.max_batch_size;
  DLRM_ASSIGN_OR_RETURN(model->bottom_, Mlp::Create(backend, BottomOptions(options), max_batch,
                                                    model->parameters_.Slice(0, num_bottom)));
  if (HasCrossNet(options)) {
    DLRM_ASSIGN_OR_RETURN(model->cross_,
                          CrossNet::Create(backend, CrossOptions(options), max_batch,
                                           model->parameters_.Slice(num_bottom, num_cross)));
  }
  DLRM_ASSIGN_OR_RETURN(model->top_,
                        Mlp::Create(backend, TopOptions(options), max_batch,
                                    model->parameters_.Slice(num_bottom + num_cross, num_top)));
  std::mt19937_64 rng(options.seed);
  model->bottom_->Initialize(rng);
  if (model->cross_ != nullptr) model->cross_->Initialize(rng);
  model->top_->Initialize(rng);
  return model;
}

size_t DlrmDenseModel::MemoryFloats(const DlrmDenseModelOptions& options) {
  if (!Validate(options).ok()) return 0;  // Create refuses them, naming the field
  const int max_batch = options.max_batch_size;
  const size_t num_params =
      Mlp::NumParams(BottomOptions(options)) +
      (HasCrossNet(options) ? CrossNet::NumParams(CrossOptions(options)) : 0) +
      Mlp::NumParams(TopOptions(options));
  size_t floats = num_params * (2 + DenseOptimizerStateFloats(options.optimizer.type));
  floats += Mlp::WorkFloats(BottomOptions(options), max_batch) +
            Mlp::WorkFloats(TopOptions(options), max_batch);
  if (HasCrossNet(options)) floats += CrossNet::WorkFloats(CrossOptions(options), max_batch);
  // The model's own buffers, as the constructor below allocates them.
  const size_t width = static_cast<size_t>(InteractionWidthOf(options));
  const size_t per_row = width * (HasCrossNet(options) ? 3 : 2) + options.embedding_dim + 2 +
                         std::max(1, options.num_dense_features) +
                         std::max(1, options.num_tables * options.embedding_dim);
  return floats + per_row * static_cast<size_t>(std::max(0, max_batch));
}

DlrmDenseModel::DlrmDenseModel(Backend* backend, const DlrmDenseModelOptions& options,
                               size_t num_params)
    : backend_(backend),
      options_(options),
      interaction_width_(InteractionWidthOf(options)),
      parameters_(backend, num_params),
      optimizer_(backend, options.optimizer, num_params),
      interaction_(backend, options.max_batch_size, interaction_width_),
      dinteraction_(backend, options.max_batch_size, interaction_width_),
      dconcat_(backend, HasCrossNet(options) ? options.max_batch_size : 0, interaction_width_),
      dbottom_(backend, options.max_batch_size, options.embedding_dim),
      dlogits_(backend, options.max_batch_size, 1),
      probs_(backend, options.max_batch_size, 1),
      zeros_(backend, options.max_batch_size, std::max(1, options.num_dense_features)),
      demb_scratch_(backend, options.max_batch_size,
                    std::max(1, options.num_tables * options.embedding_dim)) {}

void DlrmDenseModel::CheckBatch(int batch) const {
  DLRM_CHECK(batch >= 0 && batch <= options_.max_batch_size)
      << "batch " << batch << " outside [0, max_batch_size " << options_.max_batch_size << "]";
}

const float* DlrmDenseModel::Forward(const float* dense_in, const float* emb, int batch) {
  CheckBatch(batch);
  emb_ = emb;
  const float* bottom_out = bottom_->Forward(dense_in, batch);
  const float* top_in = interaction_.data();
  if (cross_ == nullptr) {
    backend_->InteractionForward(bottom_out, emb, batch, options_.num_tables,
                                 options_.embedding_dim, interaction_.data());
  } else {
    // x_0 = [bottom_b, emb_b] row by row: emb's rows are already T * dim contiguous floats.
    const int dim = options_.embedding_dim;
    const int width = interaction_width_;
    backend_->Copy2D(bottom_out, dim, interaction_.data(), width, batch, dim);
    backend_->Copy2D(emb, width - dim, interaction_.data() + dim, width, batch, width - dim);
    top_in = cross_->Forward(interaction_.data(), batch);
  }
  logits_ = top_->Forward(top_in, batch);
  return logits_;
}

double DlrmDenseModel::Loss(const float* labels, int batch, float* probs) {
  CheckBatch(batch);
  DLRM_CHECK(logits_ != nullptr) << "Loss() before Forward()";
  return backend_->SigmoidBinaryCrossEntropy(
      logits_, labels, batch, probs != nullptr ? probs : probs_.data(), dlogits_.data());
}

void DlrmDenseModel::Backward(int batch, float* demb, const GradientsReady& ready) {
  CheckBatch(batch);
  DLRM_CHECK(logits_ != nullptr) << "Backward() before Forward()";
  const GradientsReady* report = ready ? &ready : nullptr;
  top_->Backward(dlogits_.data(), batch, dinteraction_.data(), report);
  float* demb_out = demb != nullptr ? demb : demb_scratch_.data();
  if (cross_ == nullptr) {
    backend_->InteractionBackward(bottom_->layer(bottom_->num_layers() - 1).output(), emb_,
                                  dinteraction_.data(), batch, options_.num_tables,
                                  options_.embedding_dim, dbottom_.data(), demb_out);
  } else {
    cross_->Backward(dinteraction_.data(), batch, dconcat_.data(), report);
    const int dim = options_.embedding_dim;
    const int width = interaction_width_;
    backend_->Copy2D(dconcat_.data(), width, dbottom_.data(), dim, batch, dim);
    backend_->Copy2D(dconcat_.data() + dim, width, demb_out, width - dim, batch, width - dim);
  }
  bottom_->Backward(dbottom_.data(), batch, /*dx=*/nullptr, report);
}

std::vector<DlrmDenseModel::WeightMatrix> DlrmDenseModel::WeightMatrices() {
  std::vector<WeightMatrix> out;
  const float* base = parameters_.params();
  auto add_mlp = [&](Mlp& mlp) {
    for (int i = 0; i < mlp.num_layers(); ++i) {
      Linear& l = mlp.layer(i);
      out.push_back({static_cast<size_t>(l.weights() - base), l.out(), l.in()});
    }
  };
  add_mlp(*bottom_);
  if (cross_ != nullptr) {
    const CrossNetOptions& o = cross_->options();
    for (int l = 0; l < o.layers; ++l) {
      const size_t v = static_cast<size_t>(cross_->layer_slice(l).params - base);
      out.push_back({v, o.rank, o.width});
      out.push_back({v + static_cast<size_t>(o.rank) * o.width, o.width, o.rank});
    }
  }
  add_mlp(*top_);
  return out;
}

float DlrmDenseModel::TrainStep(const float* dense_in, const float* emb, const float* labels,
                                int batch, float* demb, const GradientsReady& ready) {
  StartTrainStep(dense_in, emb, labels, batch, demb, ready);
  return TakeTrainLoss();
}

void DlrmDenseModel::StartTrainStep(const float* dense_in, const float* emb, const float* labels,
                                    int batch, float* demb, const GradientsReady& ready) {
  Forward(dense_in, emb, batch);
  backend_->StartSigmoidBinaryCrossEntropy(logits_, labels, batch, probs_.data(), dlogits_.data());
  Backward(batch, demb, ready);
  loss_batch_ = batch;
}

float DlrmDenseModel::TakeTrainLoss() {
  const double loss = backend_->TakeLoss();
  return loss_batch_ > 0 ? static_cast<float>(loss / loss_batch_) : 0.0f;
}

void DlrmDenseModel::ApplyOptimizer() {
  optimizer_.Step(parameters_.params(), parameters_.grads());
}

double DlrmDenseModel::Evaluate(const float* dense_in, const float* emb, const float* labels,
                                int batch, float* probs) {
  Forward(dense_in, emb, batch);
  return Loss(labels, batch, probs);
}

void DlrmDenseModel::Predict(const float* dense_in, const float* emb, int batch, float* probs) {
  Forward(dense_in, emb, batch);
  Loss(zeros_.data(), batch, probs);
}

void DlrmDenseModel::GemmOnlyStep(int batch, const float* dense_in) {
  CheckBatch(batch);
  bottom_->GemmOnlyForward(dense_in != nullptr ? dense_in : zeros_.data(), batch);
  const float* top_in =
      cross_ != nullptr ? cross_->GemmOnlyForward(interaction_.data(), batch) : interaction_.data();
  top_->GemmOnlyForward(top_in, batch);
  top_->GemmOnlyBackward(dlogits_.data(), batch, dinteraction_.data());
  if (cross_ != nullptr) cross_->GemmOnlyBackward(dinteraction_.data(), batch);
  bottom_->GemmOnlyBackward(dbottom_.data(), batch, /*dx=*/nullptr);
}

}  // namespace dlrm::dense
