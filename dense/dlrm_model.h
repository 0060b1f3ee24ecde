// DlrmDenseModel: the dense part of DLRM on one Backend.
//
//   bottom MLP (ReLU after every layer; output width = embedding_dim)
//   -> interaction with the T embeddings, one of
//        dot:    [bottom, lower-triangle dots of the T + 1 vectors] (backend.h), the 2019 DLRM;
//        dcnv2:  DCNv2 cross layers (cross_net.h) over the concatenation [bottom, emb_0..emb_T-1],
//                DLRM-DCNv2 as in MLPerf Training and TorchRec's DLRM_DCN
//   -> top MLP (ReLU after all but the last layer; last width 1) -> sigmoid -> binary cross-entropy
//
// Every parameter lives in one ParameterBuffer (bottom MLP first, then the cross layers when
// there are any, then the top MLP; each layer W then b), so params() / grads() are single
// contiguous buffers of num_params() floats: a distributed worker allreduces grads() in one call
// between TrainStep() and ApplyOptimizer().
//
// All pointers passed in or returned are in the backend's memory (host for the CPU backend,
// device for CUDA). Inputs: dense_in [batch x num_dense_features], emb [batch x T x dim] (sample
// major: sample b's table t vector at (b * T + t) * dim), labels [batch] in {0, 1}. Work buffers
// are allocated once for max_batch_size; 0 <= batch <= max_batch_size is a precondition (checked).
// Not thread-safe: one thread drives a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/backend.h"
#include "dense/cross_net.h"
#include "dense/dense_optimizer.h"
#include "dense/mlp.h"
#include "dense/optimizer_options.h"
#include "dense/parameter_buffer.h"
#include "dense/tensor.h"

namespace dlrm::dense {

enum class Interaction { kDot, kDcnV2 };

struct DlrmDenseModelOptions {
  int num_dense_features = 13;
  // Bottom MLP output widths, not counting the input; the last must equal embedding_dim.
  std::vector<int> bottom_widths = {512, 256, 64, 16};
  // Top MLP output widths, not counting the input (InteractionWidth()); the last must be 1.
  std::vector<int> top_widths = {512, 256, 1};
  int num_tables = 26;
  int embedding_dim = 16;
  Interaction interaction = Interaction::kDot;
  // DCNv2 only: number of cross layers and the rank of their U V factorisation.
  int cross_layers = 3;
  int low_rank = 512;
  int max_batch_size = 2048;
  // Parameters are drawn from std::mt19937_64(seed): the same seed gives the same model.
  uint64_t seed = 0;
  DenseOptimizerOptions optimizer;
};

class DlrmDenseModel {
 public:
  // INVALID_ARGUMENT naming the bad field for inconsistent shapes or optimizer options. `backend`
  // is not owned and must outlive the model.
  static absl::StatusOr<std::unique_ptr<DlrmDenseModel>> Create(
      Backend* backend, const DlrmDenseModelOptions& options);
  // Floats of backend memory Create allocates for `options` (0 for options it refuses): the
  // parameters and their gradients, the optimizer's state, and every work buffer sized by
  // max_batch_size. What a caller checks against the memory it has before creating a model
  // (Trainer::Create); a test holds it to the CPU backend's count of what Create allocates.
  static size_t MemoryFloats(const DlrmDenseModelOptions& options);

  // --- one training step ---
  // Forward, loss and backward. Leaves d loss / d params in grads() (overwritten, not
  // accumulated) and writes d loss / d emb [batch x T x dim] to demb (nullptr: not needed).
  // Returns the mean BCE over the batch. Does not apply the optimizer. `ready` (when set) hears
  // of each layer's gradients as soon as the backward has written them: parts of grads() that
  // together cover it once, from its end to its start, each adjacent to the one before (the
  // top MLP's last layer first, the bottom MLP's first layer last).
  float TrainStep(const float* dense_in, const float* emb, const float* labels, int batch,
                  float* demb, const GradientsReady& ready = nullptr);
  // TrainStep in two halves: StartTrainStep issues the forward, loss and backward without
  // waiting for the device (Backend::StartSigmoidBinaryCrossEntropy), TakeTrainLoss waits for
  // the loss alone and returns its mean. Work issued in between (the optimizers) queues behind
  // the backward instead of after a wait.
  void StartTrainStep(const float* dense_in, const float* emb, const float* labels, int batch,
                      float* demb, const GradientsReady& ready = nullptr);
  float TakeTrainLoss();
  // One optimizer step on params() from grads(); increments the step counter.
  void ApplyOptimizer();

  // --- the same pieces, separately ---
  // Returns the logits [batch] (owned by the model, valid until the next Forward). dense_in and
  // emb must stay valid and unchanged until Backward.
  const float* Forward(const float* dense_in, const float* emb, int batch);
  // Sigmoid and BCE of the last Forward's logits: writes probabilities to probs ([batch], or
  // nullptr to skip), keeps d loss / d logits (of the MEAN loss) for Backward, and returns the
  // SUMMED BCE over the batch.
  double Loss(const float* labels, int batch, float* probs);
  // Backward of the last Forward and Loss (same batch); `ready` as for TrainStep.
  void Backward(int batch, float* demb, const GradientsReady& ready = nullptr);

  // --- evaluation ---
  // Forward + Loss: writes probs (may be nullptr) and returns the SUMMED BCE over the batch.
  double Evaluate(const float* dense_in, const float* emb, const float* labels, int batch,
                  float* probs);
  // Forward + sigmoid, without labels: writes probs [batch].
  void Predict(const float* dense_in, const float* emb, int batch, float* probs);

  // Issues exactly the Gemm calls of Forward + Backward (same order, shapes and buffers; the
  // bottom MLP reads dense_in, or a model-owned buffer of zeros when nullptr) and nothing else:
  // the dense-compute bound of a benchmark. The model's activations become garbage.
  void GemmOnlyStep(int batch, const float* dense_in = nullptr);

  // --- parameters ---
  float* params() { return parameters_.params(); }
  float* grads() { return parameters_.grads(); }
  size_t num_params() const { return parameters_.size(); }
  ParameterBuffer& parameters() { return parameters_; }
  // The weight matrices among the parameters, each a row-major rows x cols block at `offset` in
  // params() and grads(): every Linear's W (out x in) and every cross layer's V (rank x width)
  // and U (width x rank), in buffer order. Biases are not listed.
  struct WeightMatrix {
    size_t offset;
    int rows;
    int cols;
  };
  std::vector<WeightMatrix> WeightMatrices();
  DenseOptimizer& optimizer() { return optimizer_; }
  Mlp& bottom_mlp() { return *bottom_; }
  Mlp& top_mlp() { return *top_; }
  // The DCNv2 cross layers; nullptr for the dot interaction.
  CrossNet* cross_net() { return cross_.get(); }

  const DlrmDenseModelOptions& options() const { return options_; }
  Backend* backend() const { return backend_; }
  // The top MLP's input width: embedding_dim + (T + 1) T / 2 for dot, (T + 1) embedding_dim for
  // dcnv2.
  int interaction_width() const { return interaction_width_; }
  static int InteractionWidth(Interaction interaction, int num_tables, int embedding_dim) {
    return interaction == Interaction::kDot ? embedding_dim + (num_tables + 1) * num_tables / 2
                                            : (num_tables + 1) * embedding_dim;
  }

 private:
  DlrmDenseModel(Backend* backend, const DlrmDenseModelOptions& options, size_t num_params);
  void CheckBatch(int batch) const;

  Backend* backend_;
  DlrmDenseModelOptions options_;
  int interaction_width_;
  ParameterBuffer parameters_;
  DenseOptimizer optimizer_;
  std::unique_ptr<Mlp> bottom_;
  std::unique_ptr<CrossNet> cross_;  // dcnv2 only
  std::unique_ptr<Mlp> top_;

  const float* emb_ = nullptr;     // input of the last Forward
  const float* logits_ = nullptr;  // top MLP output of the last Forward
  Tensor interaction_;             // dot: the top MLP's input; dcnv2: x_0 of the cross layers
  Tensor dinteraction_;            // gradient of the top MLP's input
  Tensor dconcat_;                 // dcnv2: gradient of x_0 (both [max_batch x interaction_width])
  Tensor dbottom_;                 // [max_batch x dim]
  Tensor dlogits_;                 // [max_batch]
  Tensor probs_;                   // [max_batch] scratch when the caller wants no probabilities
  int loss_batch_ = 0;             // the batch of the last StartTrainStep
  Tensor zeros_;                   // [max_batch x max(1, num_dense)] labels for Predict, input
                                   // for GemmOnlyStep
  Tensor demb_scratch_;            // [max_batch x T x dim] when the caller passes demb = nullptr
};

}  // namespace dlrm::dense
