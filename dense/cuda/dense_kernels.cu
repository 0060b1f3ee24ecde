// Element-wise, reduction, loss and optimizer kernels of the CUDA dense backend.
#include <cmath>
#include <cstdint>

#include "dense/cuda/cuda_util.h"
#include "dense/cuda/dense_kernels.h"

namespace dlrm::dense::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cap the grid: enough blocks to fill an H200 (132 SMs x 8 blocks) several times.
constexpr size_t kMaxBlocks = 4096;

int GridFor(size_t work_items) {
  size_t blocks = (work_items + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void FillKernel(float* dst, size_t count, float value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = value;
  }
}

__global__ void ScaleKernel(float* data, size_t count, float alpha) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    data[i] *= alpha;
  }
}

__global__ void AxpyKernel(float alpha, const float* x, float* y, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    y[i] += alpha * x[i];
  }
}

// out may alias xl: each thread reads xl[i] before it writes out[i].
__global__ void CrossCombineKernel(const float* x0, const float* h, const float* xl, float* out,
                                   size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = x0[i] * h[i] + xl[i];
  }
}

__global__ void CrossCombineBackwardKernel(const float* __restrict__ x0,
                                           const float* __restrict__ h, const float* __restrict__ g,
                                           float* __restrict__ dh, float* __restrict__ dx0,
                                           size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const float gi = g[i];
    dh[i] = gi * x0[i];
    dx0[i] += gi * h[i];
  }
}

template <bool kRelu>
__global__ void BiasActivationVec4Kernel(float4* y, const float4* bias, size_t vectors,
                                         int col_vectors) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < vectors;
       i += size_t{gridDim.x} * blockDim.x) {
    float4 v = y[i];
    const float4 b = __ldg(&bias[i % col_vectors]);
    v.x += b.x;
    v.y += b.y;
    v.z += b.z;
    v.w += b.w;
    if (kRelu) {
      v.x = fmaxf(v.x, 0.0f);
      v.y = fmaxf(v.y, 0.0f);
      v.z = fmaxf(v.z, 0.0f);
      v.w = fmaxf(v.w, 0.0f);
    }
    y[i] = v;
  }
}

template <bool kRelu>
__global__ void BiasActivationKernel(float* y, const float* bias, size_t count, int cols) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    float v = y[i] + __ldg(&bias[i % cols]);
    y[i] = kRelu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void ReluBackwardVec4Kernel(const float4* y, float4* dy, size_t vectors) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < vectors;
       i += size_t{gridDim.x} * blockDim.x) {
    const float4 a = y[i];
    float4 g = dy[i];
    g.x = a.x > 0.0f ? g.x : 0.0f;
    g.y = a.y > 0.0f ? g.y : 0.0f;
    g.z = a.z > 0.0f ? g.z : 0.0f;
    g.w = a.w > 0.0f ? g.w : 0.0f;
    dy[i] = g;
  }
}

__global__ void ReluBackwardKernel(const float* y, float* dy, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

// Column sums: a block covers 32 columns and one chunk of rows; 8 row lanes per column each sum
// every 8th row of the chunk, then the 8 partials are added in a fixed order.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int kRowsPerChunk = 512;

__global__ void ColumnSumKernel(const float* dy, int rows, int cols, float* out) {
  __shared__ float partial[kRowLanes][kColTile + 1];
  const int col = blockIdx.x * kColTile + threadIdx.x;
  const int row_begin = blockIdx.y * kRowsPerChunk;
  const int row_end = min(rows, row_begin + kRowsPerChunk);
  float sum = 0.0f;
  if (col < cols) {
    for (int r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      sum += dy[static_cast<size_t>(r) * cols + col];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int i = 0; i < kRowLanes; ++i) total += partial[i][threadIdx.x];
    out[static_cast<size_t>(blockIdx.y) * cols + col] = total;
  }
}

__global__ void ColumnSumFinishKernel(const float* partial, int chunks, int cols, float* db) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) total += partial[static_cast<size_t>(c) * cols + col];
  db[col] = total;
}

constexpr int kBceThreads = 1024;

__global__ void __launch_bounds__(kBceThreads)
    SigmoidBceKernel(const float* logits, const float* labels, int batch, float* probs,
                     float* dlogits, double* loss_sum) {
  __shared__ double partial[kBceThreads];
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double sum = 0.0;
  for (int i = threadIdx.x; i < batch; i += kBceThreads) {
    const float x = logits[i];
    const float y = labels[i];
    // sigmoid without overflow: exp of a non-positive number only.
    const float e = expf(-fabsf(x));
    const float p = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    probs[i] = p;
    dlogits[i] = (p - y) * inv_batch;
    // BCE(x, y) = max(x, 0) - x*y + log(1 + exp(-|x|)), stable for any x.
    // Terms in double, as the CPU reference: -x*y and max(x, 0) nearly cancel for large |x|.
    sum += static_cast<double>(fmaxf(x, 0.0f)) - static_cast<double>(x) * y +
           log1p(static_cast<double>(e));
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kBceThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum = partial[0];
}

__global__ void SgdKernel(float* params, const float* grads, size_t count, float lr, float wd) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const float p = params[i];
    params[i] = p - lr * (grads[i] + wd * p);
  }
}

// state = [sum of squares (count)].
__global__ void AdagradKernel(float* params, const float* grads, float* acc, size_t count, float lr,
                              float eps, float wd) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const float p = params[i];
    const float g = grads[i] + wd * p;
    const float a = acc[i] + g * g;
    acc[i] = a;
    params[i] = p - lr * g / (sqrtf(a) + eps);
  }
}

// state = [m (count) | v (count)]; bc1 = 1 / (1 - beta1^t), bc2 = 1 / (1 - beta2^t).
__global__ void AdamKernel(float* params, const float* grads, float* m_state, float* v_state,
                           size_t count, float lr, float beta1, float beta2, float eps, float wd,
                           float bc1, float bc2) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const float p = params[i];
    const float g = grads[i] + wd * p;
    const float m = beta1 * m_state[i] + (1.0f - beta1) * g;
    const float v = beta2 * v_state[i] + (1.0f - beta2) * g * g;
    m_state[i] = m;
    v_state[i] = v;
    params[i] = p - lr * (m * bc1) / (sqrtf(v * bc2) + eps);
  }
}

}  // namespace

void LaunchFill(float* dst, size_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  FillKernel<<<GridFor(count), kThreads, 0, stream>>>(dst, count, value);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchScale(float* data, size_t count, float alpha, cudaStream_t stream) {
  if (count == 0) return;
  ScaleKernel<<<GridFor(count), kThreads, 0, stream>>>(data, count, alpha);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchAxpy(float alpha, const float* x, float* y, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  AxpyKernel<<<GridFor(count), kThreads, 0, stream>>>(alpha, x, y, count);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchCrossCombine(const float* x0, const float* h, const float* xl, float* out, size_t count,
                        cudaStream_t stream) {
  if (count == 0) return;
  CrossCombineKernel<<<GridFor(count), kThreads, 0, stream>>>(x0, h, xl, out, count);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchCrossCombineBackward(const float* x0, const float* h, const float* g, float* dh,
                                float* dx0, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  CrossCombineBackwardKernel<<<GridFor(count), kThreads, 0, stream>>>(x0, h, g, dh, dx0, count);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchBiasActivation(float* y, const float* bias, int rows, int cols, bool relu,
                          cudaStream_t stream) {
  const size_t count = static_cast<size_t>(rows) * cols;
  if (count == 0) return;
  if (cols % 4 == 0 && Aligned16(y) && Aligned16(bias)) {
    const size_t vectors = count / 4;
    auto* y4 = reinterpret_cast<float4*>(y);
    const auto* b4 = reinterpret_cast<const float4*>(bias);
    if (relu) {
      BiasActivationVec4Kernel<true>
          <<<GridFor(vectors), kThreads, 0, stream>>>(y4, b4, vectors, cols / 4);
    } else {
      BiasActivationVec4Kernel<false>
          <<<GridFor(vectors), kThreads, 0, stream>>>(y4, b4, vectors, cols / 4);
    }
  } else if (relu) {
    BiasActivationKernel<true><<<GridFor(count), kThreads, 0, stream>>>(y, bias, count, cols);
  } else {
    BiasActivationKernel<false><<<GridFor(count), kThreads, 0, stream>>>(y, bias, count, cols);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchReluBackward(const float* y, float* dy, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (count % 4 == 0 && Aligned16(y) && Aligned16(dy)) {
    ReluBackwardVec4Kernel<<<GridFor(count / 4), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(y), reinterpret_cast<float4*>(dy), count / 4);
  } else {
    ReluBackwardKernel<<<GridFor(count), kThreads, 0, stream>>>(y, dy, count);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

size_t ColumnSumScratchFloats(int rows, int cols) {
  const int chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return chunks > 1 ? static_cast<size_t>(chunks) * cols : 0;
}

void LaunchColumnSum(const float* dy, int rows, int cols, float* db, float* scratch,
                     cudaStream_t stream) {
  if (cols <= 0) return;
  if (rows <= 0) {
    DLRM_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * cols, stream));
    return;
  }
  const int chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  const dim3 grid((cols + kColTile - 1) / kColTile, chunks);
  const dim3 block(kColTile, kRowLanes);
  ColumnSumKernel<<<grid, block, 0, stream>>>(dy, rows, cols, chunks > 1 ? scratch : db);
  DLRM_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    ColumnSumFinishKernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
        scratch, chunks, cols, db);
    DLRM_CUDA_CHECK_LAUNCH();
  }
}

void LaunchSigmoidBce(const float* logits, const float* labels, int batch, float* probs,
                      float* dlogits, double* loss_sum, cudaStream_t stream) {
  if (batch <= 0) {
    DLRM_CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), stream));
    return;
  }
  SigmoidBceKernel<<<1, kBceThreads, 0, stream>>>(logits, labels, batch, probs, dlogits, loss_sum);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchOptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                         const float* grads, float* state, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  const int grid = GridFor(count);
  switch (options.type) {
    case DenseOptimizerType::kSgd:
      SgdKernel<<<grid, kThreads, 0, stream>>>(params, grads, count, options.learning_rate,
                                               options.weight_decay);
      break;
    case DenseOptimizerType::kAdagrad:
      AdagradKernel<<<grid, kThreads, 0, stream>>>(params, grads, state, count,
                                                   options.learning_rate, options.epsilon,
                                                   options.weight_decay);
      break;
    case DenseOptimizerType::kAdam: {
      // Bias corrections in double on the host: 1 - beta^t loses digits in float for small t.
      const double t = static_cast<double>(step < 1 ? 1 : step);
      const float bc1 = static_cast<float>(1.0 / (1.0 - std::pow(double{options.beta1}, t)));
      const float bc2 = static_cast<float>(1.0 / (1.0 - std::pow(double{options.beta2}, t)));
      AdamKernel<<<grid, kThreads, 0, stream>>>(params, grads, state, state + count, count,
                                                options.learning_rate, options.beta1, options.beta2,
                                                options.epsilon, options.weight_decay, bc1, bc2);
      break;
    }
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace dlrm::dense::cuda
