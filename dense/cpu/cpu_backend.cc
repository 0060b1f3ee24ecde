#include "dense/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/denormals.h"
#include "common/logging.h"
#include "common/parallel.h"
#include "dense/cpu/blas_env.h"
#include "dense/cpu/cpu_matmuls.h"
#include "dense/cpu/interaction_avx2.h"
#include "dense/cpu/interaction_avx512.h"

namespace dlrm::dense {
namespace {

constexpr size_t kAlignment = 64;

// ColumnSum's block of rows (see there).
constexpr int64_t kColumnSumRows = 128;

// The dense optimizers' loops over one part of the parameters. They are free functions of
// restrict pointers and plain values so that the compiler vectorises them, sqrt and division
// included (this file is built with -fno-math-errno); a lambda's captured references kept Adam's
// loop scalar. Vector sqrt and division round as the scalar ones do, so the bits do not change.
void AdagradPart(float* __restrict p, const float* __restrict g, float* __restrict h, int64_t n,
                 float lr, float wd, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    h[i] += gi * gi;
    p[i] -= lr * gi / (std::sqrt(h[i]) + eps);
  }
}

// p -= lr * m_hat / (sqrt(v_hat) + eps), with m_hat = m / bc1 and v_hat = v / bc2.
void AdamPart(float* __restrict p, const float* __restrict g, float* __restrict m,
              float* __restrict v, int64_t n, float lr, float wd, float b1, float b2, float eps,
              float inv_bc1, float inv_sqrt_bc2) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * inv_bc1) / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// The interaction kernels, templated on the embedding width so that the common widths get fully
// unrolled inner loops; kDim == 0 means "runtime width".
template <int kDim>
void InteractionForwardImpl(const float* __restrict bottom, const float* __restrict emb, int batch,
                            int num_tables, int runtime_dim, float* __restrict out,
                            float* __restrict zt) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int n = num_tables + 1;
  const int out_cols = dim + n * num_tables / 2;
  // zt ([dim x n] scratch) is Z transposed so that the pair loop runs over contiguous j.
  for (int b = 0; b < batch; ++b) {
    const float* __restrict x = bottom + static_cast<size_t>(b) * dim;
    const float* __restrict e = emb + static_cast<size_t>(b) * num_tables * dim;
    float* __restrict o = out + static_cast<size_t>(b) * out_cols;
    for (int d = 0; d < dim; ++d) {
      o[d] = x[d];
      zt[d * n] = x[d];
    }
    for (int t = 0; t < num_tables; ++t) {
      for (int d = 0; d < dim; ++d) zt[d * n + t + 1] = e[t * dim + d];
    }
    float* __restrict pairs = o + dim;
    for (int i = 1; i < n; ++i) {
      float* __restrict row = pairs + i * (i - 1) / 2;
      for (int j = 0; j < i; ++j) row[j] = 0.0f;
      for (int d = 0; d < dim; ++d) {
        const float zi = zt[d * n + i];
        const float* __restrict ztd = zt + d * n;
        for (int j = 0; j < i; ++j) row[j] += zi * ztd[j];
      }
    }
  }
}

template <int kDim>
void InteractionBackwardImpl(const float* __restrict bottom, const float* __restrict emb,
                             const float* __restrict dout, int batch, int num_tables,
                             int runtime_dim, float* __restrict dbottom, float* __restrict demb,
                             float* __restrict s) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int n = num_tables + 1;
  const int out_cols = dim + n * num_tables / 2;
  // s ([n x n] scratch) is the symmetric matrix of pair gradients (zero diagonal): dZ = S Z.
  for (int i = 0; i < n * n; ++i) s[i] = 0.0f;
  for (int b = 0; b < batch; ++b) {
    const float* __restrict x = bottom + static_cast<size_t>(b) * dim;
    const float* __restrict e = emb + static_cast<size_t>(b) * num_tables * dim;
    const float* __restrict g = dout + static_cast<size_t>(b) * out_cols;
    const float* __restrict gp = g + dim;
    for (int i = 1; i < n; ++i) {
      const float* __restrict row = gp + i * (i - 1) / 2;
      for (int j = 0; j < i; ++j) {
        s[i * n + j] = row[j];
        s[j * n + i] = row[j];
      }
    }
    auto z = [&](int j) { return j == 0 ? x : e + (j - 1) * dim; };
    float* __restrict db = dbottom + static_cast<size_t>(b) * dim;
    float* __restrict de = demb + static_cast<size_t>(b) * num_tables * dim;
    for (int i = 0; i < n; ++i) {
      float* __restrict acc = i == 0 ? db : de + (i - 1) * dim;
      if (i == 0) {
        for (int d = 0; d < dim; ++d) acc[d] = g[d];  // the bottom output passes straight through
      } else {
        for (int d = 0; d < dim; ++d) acc[d] = 0.0f;
      }
      const float* __restrict si = s + i * n;
      for (int j = 0; j < n; ++j) {
        if (j == i) continue;
        const float sij = si[j];
        const float* __restrict zj = z(j);
        for (int d = 0; d < dim; ++d) acc[d] += sij * zj[d];
      }
    }
  }
}

template <typename Fn>
void DispatchDim(int dim, Fn&& fn) {
  switch (dim) {
    case 4:
      fn(std::integral_constant<int, 4>());
      break;
    case 8:
      fn(std::integral_constant<int, 8>());
      break;
    case 16:
      fn(std::integral_constant<int, 16>());
      break;
    case 32:
      fn(std::integral_constant<int, 32>());
      break;
    case 64:
      fn(std::integral_constant<int, 64>());
      break;
    case 128:
      fn(std::integral_constant<int, 128>());
      break;
    default:
      fn(std::integral_constant<int, 0>());
  }
}

}  // namespace

absl::StatusOr<CpuGemmLibrary> ParseCpuGemmLibrary(const std::string& name) {
  if (name == "onednn") return CpuGemmLibrary::kOneDnn;
  if (name == "openblas") return CpuGemmLibrary::kOpenBlas;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU GEMM library '", name, "' (expected onednn or openblas)"));
}

const char* CpuGemmLibraryName(CpuGemmLibrary library) {
  return library == CpuGemmLibrary::kOneDnn ? "onednn" : "openblas";
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const CpuBackendOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: threads must be >= 0 (0 = all cores), got ", options.threads));
  }
  CpuGemmLibrary gemm = CpuGemmLibrary::kOneDnn;
  if (options.gemm.has_value()) {
    gemm = *options.gemm;
  } else if (const char* env = std::getenv("DLRM_CPU_GEMM"); env != nullptr && *env != '\0') {
    auto parsed = ParseCpuGemmLibrary(env);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("DLRM_CPU_GEMM: ", parsed.status().message()));
    }
    gemm = *parsed;
  }
  const bool bf16 = options.math_mode == MathMode::kBf16;
  if (bf16) {
    if (gemm != CpuGemmLibrary::kOneDnn) {
      return absl::FailedPreconditionError(
          "cpu backend: math_mode bf16 runs on oneDNN's GEMMs, not with DLRM_CPU_GEMM=openblas");
    }
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
      return absl::FailedPreconditionError(
          absl::StrCat("cpu backend: math_mode bf16 needs a CPU with AVX512_BF16 or AMX; oneDNN "
                       "found ",
                       OneDnnIsaName(), " here (use fp32)"));
    }
  }
  if (options.threads > 0) openblas_set_num_threads(options.threads);
  return std::unique_ptr<CpuBackend>(new CpuBackend(
      options.threads, options.allow_avx2 && cpu::CpuHasAvx2Fma(),
      options.allow_avx512 && cpu::CpuHasAvx512F(), gemm, bf16, options.linear_forward));
}

CpuBackend::CpuBackend(int threads, bool avx2, bool avx512, CpuGemmLibrary gemm, bool bf16,
                       CpuLinearForward linear_forward)
    : threads_(threads),
      avx2_(avx2),
      avx512_(avx512),
      gemm_(gemm),
      bf16_(bf16),
      linear_forward_(linear_forward) {
  const int total = threads > 0 ? threads : openblas_get_num_threads();
  if (total > 1) pool_ = std::make_unique<common::ParallelPool>(total - 1);
  if (gemm == CpuGemmLibrary::kOneDnn) matmuls_ = std::make_unique<Matmuls>();
}

CpuBackend::~CpuBackend() = default;

float* CpuBackend::Scratch(size_t count, int part) {
  std::vector<float>& s = scratch_[part];
  if (s.size() < count) s.resize(count);
  return s.data();
}

void CpuBackend::ForParts(int64_t n, int64_t min_per_part,
                          const std::function<void(int64_t, int64_t, int)>& fn) {
  // Twice as many parts as threads, so that a helper that wakes late costs at most a small part
  // (the caller takes the parts nobody has started).
  const int64_t parts = pool_ == nullptr
                            ? 1
                            : std::min<int64_t>({kMaxParts, 2 * (pool_->num_threads() + 1),
                                                 n / std::max<int64_t>(1, min_per_part)});
  if (parts < 2) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  pool_->ParallelFor(
      parts, [&](int64_t p) { fn(n * p / parts, n * (p + 1) / parts, static_cast<int>(p)); });
}

std::string CpuBackend::name() const {
  const int threads = threads_ > 0 ? threads_ : openblas_get_num_threads();
  std::string gemm;
  if (gemm_ == CpuGemmLibrary::kOneDnn) {
    const std::string wait = OmpWaitPolicy();
    gemm = absl::StrCat(CpuGemmLibraryName(gemm_), " ", OneDnnIsaName(), ", threads=", threads,
                        wait.empty() ? "" : absl::StrCat(", omp_wait_policy=", wait));
  } else {
    const std::string timeout = BlasThreadTimeout();
    gemm = absl::StrCat(CpuGemmLibraryName(gemm_), " ", BlasCoreName(), ", threads=", threads,
                        timeout.empty() ? "" : absl::StrCat(", thread_timeout=", timeout));
  }
  if (bf16_) absl::StrAppend(&gemm, ", bf16");
  return absl::StrCat("cpu(", gemm, avx512_ ? ", avx512" : (avx2_ ? ", avx2" : ""),
                      common::DenormalsFlushedInThisThread() ? ", ftz)" : ")");
}

float* CpuBackend::Allocate(size_t count) {
  if (count == 0) return nullptr;
  allocated_floats_.fetch_add(count, std::memory_order_relaxed);
  const size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, bytes);
  DLRM_CHECK(ptr != nullptr) << "cpu backend: out of memory allocating " << bytes << " bytes";
  return static_cast<float*>(ptr);
}

void CpuBackend::Deallocate(float* ptr) { std::free(ptr); }

void CpuBackend::CopyFromHost(const float* host_src, float* dst, size_t count) {
  if (count > 0) std::memcpy(dst, host_src, count * sizeof(float));
}

void CpuBackend::CopyToHost(const float* src, float* host_dst, size_t count) {
  if (count > 0) std::memcpy(host_dst, src, count * sizeof(float));
}

void CpuBackend::Copy(const float* src, float* dst, size_t count) {
  if (count > 0 && src != dst) std::memmove(dst, src, count * sizeof(float));
}

void CpuBackend::Fill(float* dst, size_t count, float value) { std::fill(dst, dst + count, value); }

void CpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // c = beta * c; BLAS rejects the zero leading dimensions this would need
    const size_t count = static_cast<size_t>(m) * n;
    for (size_t i = 0; i < count; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  if (bf16_) {
    GemmBf16(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    return;
  }
  if (gemm_ == CpuGemmLibrary::kOneDnn) {
    UseOmpThreads();
    // Row-major, as cblas_sgemm with CblasRowMajor; the arguments were checked above and by the
    // callers' shapes, so a failure here is a bug.
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                            alpha, a, lda, b, ldb, beta, c, n);
    DLRM_CHECK(status == dnnl_success) << "dnnl_sgemm " << m << "x" << n << "x" << k
                                       << " failed with status " << static_cast<int>(status);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

void CpuBackend::UseOmpThreads() {
  // OpenMP's thread count is per calling thread (an ICV of its data environment): a count set on
  // the thread that made the backend does not reach the thread that trains, so it is set here.
  if (threads_ > 0 && omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

void CpuBackend::BiasActivation(float* y, const float* bias, int rows, int cols, bool relu) {
  ForParts(rows, std::max(1, kMinFloatsPerPart / std::max(1, cols)),
           [&](int64_t first, int64_t last, int) {
             for (int64_t r = first; r < last; ++r) {
               float* __restrict row = y + static_cast<size_t>(r) * cols;
               const float* __restrict bb = bias;
               if (relu) {
                 for (int c = 0; c < cols; ++c) row[c] = std::max(row[c] + bb[c], 0.0f);
               } else {
                 for (int c = 0; c < cols; ++c) row[c] += bb[c];
               }
             }
           });
}

void CpuBackend::ReluBackward(const float* y, float* dy, size_t count) {
  ForParts(static_cast<int64_t>(count), kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    const float* __restrict yy = y;
    float* __restrict g = dy;
    for (int64_t i = first; i < last; ++i) g[i] = yy[i] > 0.0f ? g[i] : 0.0f;
  });
}

void CpuBackend::ColumnSum(const float* dy, int rows, int cols, float* db) {
  MaskedColumnSum(nullptr, const_cast<float*>(dy), rows, cols, db);  // dy is only read
}

void CpuBackend::ReluBackwardColumnSum(const float* y, float* dy, int rows, int cols, float* db) {
  MaskedColumnSum(y, dy, rows, cols, db);
}

void CpuBackend::MaskedColumnSum(const float* y, float* dy, int rows, int cols, float* db) {
  // Rows are summed in fixed blocks of kColumnSumRows, in order, then the blocks' sums in order:
  // the same additions whatever the thread count, and blocks can go to different threads. With
  // y, each row is masked (ReluBackward's rule) just before it is added, in the same pass.
  const int64_t blocks = (std::max(rows, 1) + kColumnSumRows - 1) / kColumnSumRows;
  auto sum_block = [&](int64_t block, float* __restrict out) {
    std::fill(out, out + cols, 0.0f);
    const int last = std::min<int64_t>(rows, (block + 1) * kColumnSumRows);
    for (int r = static_cast<int>(block * kColumnSumRows); r < last; ++r) {
      float* __restrict row = dy + static_cast<size_t>(r) * cols;
      if (y != nullptr) {
        const float* __restrict yy = y + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) row[c] = yy[c] > 0.0f ? row[c] : 0.0f;
      }
      for (int c = 0; c < cols; ++c) out[c] += row[c];
    }
  };
  if (blocks == 1) {
    sum_block(0, db);
    return;
  }
  column_partials_.resize(static_cast<size_t>(blocks) * cols);
  float* partials = column_partials_.data();
  const int64_t rows_per_part = std::max<int64_t>(1, kMinFloatsPerPart / std::max(1, cols));
  ForParts(blocks, (rows_per_part + kColumnSumRows - 1) / kColumnSumRows,
           [&](int64_t first, int64_t last, int) {
             for (int64_t b = first; b < last; ++b) sum_block(b, partials + b * cols);
           });
  float* __restrict out = db;
  std::copy(partials, partials + cols, out);
  for (int64_t b = 1; b < blocks; ++b) {
    const float* __restrict part = partials + b * cols;
    for (int c = 0; c < cols; ++c) out[c] += part[c];
  }
}

void CpuBackend::Copy2D(const float* src, int src_stride, float* dst, int dst_stride, int rows,
                        int cols) {
  if (cols <= 0) return;
  for (int r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r) * dst_stride,
                src + static_cast<size_t>(r) * src_stride,
                static_cast<size_t>(cols) * sizeof(float));
  }
}

void CpuBackend::Axpy(float alpha, const float* x, float* y, size_t count) {
  ForParts(static_cast<int64_t>(count), kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    const float* __restrict xx = x;
    float* __restrict yy = y;
    for (int64_t i = first; i < last; ++i) yy[i] += alpha * xx[i];
  });
}

void CpuBackend::CrossCombine(const float* x0, const float* h, const float* xl, float* out,
                              size_t count) {
  ForParts(static_cast<int64_t>(count), kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    // out may alias xl (element i reads xl[i] before writing out[i]), so no __restrict on them.
    const float* __restrict a = x0;
    const float* __restrict b = h;
    for (int64_t i = first; i < last; ++i) out[i] = a[i] * b[i] + xl[i];
  });
}

void CpuBackend::CrossCombineBackward(const float* x0, const float* h, const float* g, float* dh,
                                      float* dx0, size_t count) {
  ForParts(static_cast<int64_t>(count), kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    const float* __restrict a = x0;
    const float* __restrict b = h;
    const float* __restrict gg = g;
    float* __restrict da = dx0;
    float* __restrict db = dh;
    for (int64_t i = first; i < last; ++i) {
      db[i] = gg[i] * a[i];
      da[i] += gg[i] * b[i];
    }
  });
}

// Samples are independent: parts of the batch go to different threads, each with its own
// scratch, and each part is the same kernel over fewer samples.
void CpuBackend::ForSampleParts(int batch, int num_tables, int dim,
                                const std::function<void(int64_t, int, int)>& fn) {
  // About (T + 1)^2 dim multiply-adds a sample, each way.
  const int64_t per_sample = static_cast<int64_t>(num_tables + 1) * (num_tables + 1) * dim;
  ForParts(batch, std::max<int64_t>(1, kMinFloatsPerPart / per_sample),
           [&](int64_t first, int64_t last, int part) {
             fn(first, static_cast<int>(last - first), part);
           });
}

void CpuBackend::InteractionForward(const float* bottom, const float* emb, int batch,
                                    int num_tables, int dim, float* out) {
  const int64_t width = dim + static_cast<int64_t>(num_tables + 1) * num_tables / 2;
  ForSampleParts(batch, num_tables, dim, [&](int64_t first, int n, int part) {
    const float* b = bottom + first * dim;
    const float* e = emb + first * num_tables * dim;
    float* o = out + first * width;
    if (avx512_ && cpu::Avx512InteractionSupports(num_tables, dim)) {
      cpu::Avx512InteractionForward(
          b, e, n, num_tables, dim, o,
          Scratch(cpu::Avx512InteractionScratchFloats(num_tables, dim), part));
      return;
    }
    if (avx2_ && cpu::Avx2InteractionSupports(num_tables, dim)) {
      cpu::Avx2InteractionForward(
          b, e, n, num_tables, dim, o,
          Scratch(cpu::Avx2InteractionScratchFloats(num_tables, dim), part));
      return;
    }
    float* zt = Scratch(static_cast<size_t>(dim) * (num_tables + 1), part);
    DispatchDim(dim, [&](auto k) {
      InteractionForwardImpl<decltype(k)::value>(b, e, n, num_tables, dim, o, zt);
    });
  });
}

void CpuBackend::InteractionBackward(const float* bottom, const float* emb, const float* dout,
                                     int batch, int num_tables, int dim, float* dbottom,
                                     float* demb) {
  const int64_t width = dim + static_cast<int64_t>(num_tables + 1) * num_tables / 2;
  ForSampleParts(batch, num_tables, dim, [&](int64_t first, int n, int part) {
    const float* b = bottom + first * dim;
    const float* e = emb + first * num_tables * dim;
    const float* d = dout + first * width;
    float* db = dbottom + first * dim;
    float* de = demb + first * num_tables * dim;
    if (avx512_ && cpu::Avx512InteractionSupports(num_tables, dim)) {
      cpu::Avx512InteractionBackward(
          b, e, d, n, num_tables, dim, db, de,
          Scratch(cpu::Avx512InteractionScratchFloats(num_tables, dim), part));
      return;
    }
    if (avx2_ && cpu::Avx2InteractionSupports(num_tables, dim)) {
      cpu::Avx2InteractionBackward(
          b, e, d, n, num_tables, dim, db, de,
          Scratch(cpu::Avx2InteractionScratchFloats(num_tables, dim), part));
      return;
    }
    float* s = Scratch(static_cast<size_t>(num_tables + 1) * (num_tables + 1), part);
    DispatchDim(dim, [&](auto k) {
      InteractionBackwardImpl<decltype(k)::value>(b, e, d, n, num_tables, dim, db, de, s);
    });
  });
}

double CpuBackend::SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                             float* probs, float* dlogits) {
  double loss = 0.0;
  const float inv_batch = batch > 0 ? 1.0f / static_cast<float>(batch) : 0.0f;
  for (int i = 0; i < batch; ++i) {
    const float x = logits[i];
    const float y = labels[i];
    // sigmoid without overflow for large |x|
    const float ex = std::exp(-std::fabs(x));
    const float p = x >= 0.0f ? 1.0f / (1.0f + ex) : ex / (1.0f + ex);
    probs[i] = p;
    dlogits[i] = (p - y) * inv_batch;
    // BCE(x, y) = max(x, 0) - x y + log(1 + exp(-|x|))
    loss += static_cast<double>(std::max(x, 0.0f)) - static_cast<double>(x) * y +
            std::log1p(static_cast<double>(ex));
  }
  return loss;
}

void CpuBackend::OptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                               const float* grads, float* state, size_t count) {
  const float lr = options.learning_rate;
  const float wd = options.weight_decay;
  const float eps = options.epsilon;
  // Adam's bias corrections, once for all parts.
  const float b1 = options.beta1;
  const float b2 = options.beta2;
  const double t = static_cast<double>(step < 1 ? 1 : step);
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(b1, t)));
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(b2, t)));
  ForParts(static_cast<int64_t>(count), kMinFloatsPerPart, [&](int64_t first, int64_t last, int) {
    float* __restrict p = params;
    const float* __restrict g = grads;
    switch (options.type) {
      case DenseOptimizerType::kSgd:
        for (int64_t i = first; i < last; ++i) p[i] -= lr * (g[i] + wd * p[i]);
        return;
      case DenseOptimizerType::kAdagrad:
        AdagradPart(p + first, g + first, state + first, last - first, lr, wd, eps);
        return;
      case DenseOptimizerType::kAdam:
        AdamPart(p + first, g + first, state + first, state + count + first, last - first, lr, wd,
                 b1, b2, eps, inv_bc1, inv_sqrt_bc2);
        return;
    }
  });
}

}  // namespace dlrm::dense
