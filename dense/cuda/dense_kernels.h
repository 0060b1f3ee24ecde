// Launchers of the CUDA dense kernels (private to dense/cuda/). Every launcher enqueues its work
// on `stream`, checks the launch (DLRM_CUDA_CHECK_LAUNCH) and returns without synchronising.
// Shapes and layouts are those of the Backend contract in dense/backend.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dense/optimizer_options.h"

namespace dlrm::dense::cuda {

void LaunchFill(float* dst, size_t count, float value, cudaStream_t stream);
// data[i] *= alpha.
void LaunchScale(float* data, size_t count, float alpha, cudaStream_t stream);
// y[i] += alpha * x[i].
void LaunchAxpy(float alpha, const float* x, float* y, size_t count, cudaStream_t stream);
// DCNv2 cross layer, element-wise (Backend::CrossCombine / CrossCombineBackward).
void LaunchCrossCombine(const float* x0, const float* h, const float* xl, float* out, size_t count,
                        cudaStream_t stream);
void LaunchCrossCombineBackward(const float* x0, const float* h, const float* g, float* dh,
                                float* dx0, size_t count, cudaStream_t stream);
void LaunchBiasActivation(float* y, const float* bias, int rows, int cols, bool relu,
                          cudaStream_t stream);
void LaunchReluBackward(const float* y, float* dy, size_t count, cudaStream_t stream);

// Floats of scratch LaunchColumnSum needs for this shape (0 when it reduces in one pass).
size_t ColumnSumScratchFloats(int rows, int cols);
// Deterministic: a fixed split of the rows into chunks, partial sums in `scratch`, then one
// ordered pass per column. The result does not depend on the launch timing.
void LaunchColumnSum(const float* dy, int rows, int cols, float* db, float* scratch,
                     cudaStream_t stream);

// Writes probs and dlogits; writes the summed BCE (double) to *loss_sum (device memory).
// One block, fixed reduction order: deterministic.
void LaunchSigmoidBce(const float* logits, const float* labels, int batch, float* probs,
                      float* dlogits, double* loss_sum, cudaStream_t stream);

void LaunchOptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                         const float* grads, float* state, size_t count, cudaStream_t stream);

// Dot interaction (interaction_kernels.cu): one warp per sample, its T+1 vectors in shared
// memory. Aborts (DLRM_CHECK) when one sample's vectors do not fit in the device's shared memory.
void LaunchInteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                              int dim, float* out, cudaStream_t stream);
void LaunchInteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int dim, float* dbottom, float* demb,
                               cudaStream_t stream);

}  // namespace dlrm::dense::cuda
