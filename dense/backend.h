// The dense compute backend: one interface, a CPU implementation (the reference, BLAS sgemm) and
// a CUDA one (cuBLAS, in dense/cuda/). Every pointer passed to a Backend lives in that backend's
// memory (host memory for the CPU backend, device memory for CUDA), allocated by Allocate().
// Matrices are row-major float32. Calls are issued in order on the backend's stream; results are
// visible to the host after Synchronize() (the CPU backend is synchronous).
//
// A Backend is used by one thread at a time (a trainer owns its own). It never includes CUDA
// headers here: dense/cuda/ implements it behind the factory in dense/backend_factory.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dense/optimizer_options.h"

namespace dlrm::dense {

enum class Device { kCpu, kCuda };

// Precision of the GEMMs on backends that have a choice (CUDA). fp32 is the default.
enum class MathMode { kFp32, kTf32, kBf16 };

// "fp32", "tf32", "bf16" (ParseMathMode in dense/backend_factory.h reads them back).
inline const char* MathModeName(MathMode mode) {
  switch (mode) {
    case MathMode::kFp32:
      return "fp32";
    case MathMode::kTf32:
      return "tf32";
    case MathMode::kBf16:
      return "bf16";
  }
  return "unknown";
}

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // --- memory ---
  // Returns `count` floats of backend memory (never nullptr for count > 0; aborts on OOM).
  virtual float* Allocate(size_t count) = 0;
  virtual void Deallocate(float* ptr) = 0;
  // The host buffer may be freed or reused as soon as CopyFromHost returns (callers pass stack
  // and temporary buffers). CopyToHost's result is in host_dst after Synchronize().
  virtual void CopyFromHost(const float* host_src, float* dst, size_t count) = 0;
  virtual void CopyToHost(const float* src, float* host_dst, size_t count) = 0;
  virtual void Copy(const float* src, float* dst, size_t count) = 0;
  virtual void Fill(float* dst, size_t count, float value) = 0;
  // Waits until every call issued so far has finished.
  virtual void Synchronize() = 0;

  // --- layers ---
  // c[m x n] = alpha * op(a) * op(b) + beta * c. op(a) is m x k, op(b) is k x n; a is stored
  // k x m when trans_a, b is stored n x k when trans_b.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[rows x cols] += bias[cols] (broadcast over rows), then y = max(y, 0) when relu.
  virtual void BiasActivation(float* y, const float* bias, int rows, int cols, bool relu) = 0;
  // A linear layer's forward: y[batch x out] = x[batch x in] w^T, with w stored [out x in]; then,
  // when bias is not null, BiasActivation(y, bias, batch, out, relu) (relu is ignored without a
  // bias: the GEMM-only bound calls it so). Backends may fuse the bias and the ReLU into the GEMM
  // (the CPU backend's oneDNN path does); the result is the same up to the GEMM's rounding.
  virtual void LinearForward(const float* x, const float* w, const float* bias, int batch, int in,
                             int out, bool relu, float* y) {
    Gemm(/*trans_a=*/false, /*trans_b=*/true, batch, out, in, 1.0f, x, w, 0.0f, y);
    if (bias != nullptr) BiasActivation(y, bias, batch, out, relu);
  }
  // dy[i] = y[i] > 0 ? dy[i] : 0, with y the ReLU output.
  virtual void ReluBackward(const float* y, float* dy, size_t count) = 0;
  // db[cols] = sum over rows of dy[rows x cols] (overwrites db).
  virtual void ColumnSum(const float* dy, int rows, int cols, float* db) = 0;
  // ReluBackward(y, dy, rows * cols), then ColumnSum(dy, rows, cols, db): a ReLU layer's bias
  // gradient. Backends may do both in one pass over dy; the results are the same bits.
  virtual void ReluBackwardColumnSum(const float* y, float* dy, int rows, int cols, float* db) {
    ReluBackward(y, dy, static_cast<size_t>(rows) * cols);
    ColumnSum(dy, rows, cols, db);
  }

  // dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols (strides in floats,
  // >= cols): moves blocks of columns between row-major matrices (concatenation and its split).
  virtual void Copy2D(const float* src, int src_stride, float* dst, int dst_stride, int rows,
                      int cols) = 0;
  // y[i] += alpha * x[i].
  virtual void Axpy(float alpha, const float* x, float* y, size_t count) = 0;

  // One DCNv2 cross layer's element-wise part: out[i] = x0[i] * h[i] + xl[i], with h the layer's
  // low-rank projection plus bias. out may alias xl.
  virtual void CrossCombine(const float* x0, const float* h, const float* xl, float* out,
                            size_t count) = 0;
  // Its gradient: with g = d loss / d out, dh[i] = g[i] * x0[i] (overwritten) and
  // dx0[i] += g[i] * h[i] (accumulated).
  virtual void CrossCombineBackward(const float* x0, const float* h, const float* g, float* dh,
                                    float* dx0, size_t count) = 0;

  // DLRM dot interaction. z_b = [bottom_b, emb_b,0, ..., emb_b,T-1] are T+1 vectors of `dim`.
  // out[b] = [bottom_b, dot(z_i, z_j) for i = 1..T, j = 0..i-1 (row-major lower triangle)],
  // so out has dim + (T+1)*T/2 columns. bottom is [batch x dim], emb is [batch x T x dim].
  virtual void InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                                  int dim, float* out) = 0;
  // Gradients of the above: dbottom [batch x dim] and demb [batch x T x dim] (both overwritten).
  virtual void InteractionBackward(const float* bottom, const float* emb, const float* dout,
                                   int batch, int num_tables, int dim, float* dbottom,
                                   float* demb) = 0;

  // probs = sigmoid(logits); dlogits = (probs - labels) / batch (gradient of the mean BCE).
  // Returns the summed (not mean) binary cross-entropy, computed stably from the logits.
  virtual double SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                           float* probs, float* dlogits) = 0;
  // The same without waiting for the loss: probs and dlogits are written (in stream order) as
  // above, and TakeLoss() returns the summed loss, waiting for that value alone, so that the
  // work issued in between (the backward) is queued while the device computes. One loss is
  // pending at a time: the next Start replaces it. The default computes it at once.
  virtual void StartSigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                              float* probs, float* dlogits) {
    pending_loss_ = SigmoidBinaryCrossEntropy(logits, labels, batch, probs, dlogits);
  }
  virtual double TakeLoss() { return pending_loss_; }

  // One optimizer step over `count` parameters. `state` holds
  // DenseOptimizerStateFloats(options.type) * count floats, zero-initialised by the caller;
  // `step` counts from 1 (Adam's bias correction). Every backend uses the same state layout, so
  // checkpoints move between them: Adagrad [sum of g^2]; Adam [m (count floats), v (count)].
  // With g = grads + weight_decay * params:
  //   SGD:     p -= lr g
  //   Adagrad: h += g^2; p -= lr g / (sqrt(h) + eps)
  //   Adam:    m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //            p -= lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
  virtual void OptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                             const float* grads, float* state, size_t count) = 0;

 private:
  double pending_loss_ = 0;  // StartSigmoidBinaryCrossEntropy's, by default
};

}  // namespace dlrm::dense
