// The CPU dense backend: the reference implementation of Backend. GEMMs go to oneDNN (dnnl_sgemm,
// row-major; its brgemm kernels for the CPU's widest ISA) or, when asked, to OpenBLAS
// (cblas_sgemm); everything else is plain loops written so the compiler vectorises the inner
// dimension. Memory is 64-byte aligned host memory, and every call is synchronous.
//
// The element-wise, interaction and optimizer loops of large arrays are split into contiguous
// parts that the calling thread and the backend's own helper threads (threads - 1 of them) run;
// every output element is computed by the same operations in the same order whatever the split,
// so results do not depend on the thread count. The interaction uses AVX-512 or AVX2 kernels when
// the CPU has them (checked at run time). Not thread-safe: one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dense/backend.h"

namespace dlrm::common {
class ParallelPool;
}  // namespace dlrm::common

namespace dlrm::dense {

// The library that runs the CPU backend's GEMMs. oneDNN's are the faster here: 1.1-1.4x
// OpenBLAS's AVX-512 kernels on the kaggle-shape MLPs, and 2-4x on their thin layers
// (docs/BENCHMARKS.md, "The dense Adam vectorised, oneDNN's GEMMs, an AVX-512 interaction").
enum class CpuGemmLibrary { kOneDnn, kOpenBlas };

// "onednn" or "openblas"; anything else is INVALID_ARGUMENT naming it.
absl::StatusOr<CpuGemmLibrary> ParseCpuGemmLibrary(const std::string& name);
const char* CpuGemmLibraryName(CpuGemmLibrary library);

// How a linear layer's forward (Backend::LinearForward) runs on oneDNN: a matmul primitive with
// the bias and the ReLU fused as post-ops, or the GEMM (dnnl_sgemm; with math_mode bf16 the bf16
// matmul) then the bias pass. kAuto fuses layers of at least kMinFusedOutputs outputs and at most
// kMaxFusedInputs inputs, a rule that follows timings on this machine (docs/BENCHMARKS.md): the
// fused matmul was the faster on every layer of kaggle-shape and on model1's 512-input ones,
// dnnl_sgemm and the bias pass on a single output column (2-4x) and on model1's 1024 x 1024
// layers (its step was 2 % longer with them fused). A rule of the shape and not a timing at run
// time, because the two ways round differently: every process (a resumed job, the other workers)
// must run the same kernels to get the same bits. The GEMM-only bound's calls (no bias) change no
// model: there kAuto times the plain matmul against the GEMM on the first call of each shape and
// keeps the faster, so the bound takes the faster GEMM.
enum class CpuLinearForward { kAuto, kFusedMatmul, kGemmThenBias };

struct CpuBackendOptions {
  // GEMM threads (oneDNN's OpenMP threads and OpenBLAS's); 0 keeps the libraries' default (all
  // cores). OpenBLAS's count is process-wide: the last CpuBackend created with threads > 0 sets
  // it for every backend. oneDNN's is set on the thread that calls each GEMM. The element-wise
  // loops use as many threads (this backend's own).
  int threads = 0;
  // Unset: the environment's DLRM_CPU_GEMM (onednn or openblas) when set, else oneDNN.
  std::optional<CpuGemmLibrary> gemm = std::nullopt;
  // kBf16: the GEMMs read their inputs rounded to bfloat16 (nearest even) and accumulate and
  // write fp32, as autocast does on CPUs and cuBLAS's bf16 compute mode on GPUs; oneDNN only, on
  // a CPU with AVX512_BF16 or AMX (FAILED_PRECONDITION otherwise). kTf32 has no CPU kernels and
  // runs as kFp32.
  MathMode math_mode = MathMode::kFp32;
  // See CpuLinearForward; tests force each way.
  CpuLinearForward linear_forward = CpuLinearForward::kAuto;
  // Use the AVX2 interaction kernels when the CPU has them; false forces the portable loops
  // (tests compare the two).
  bool allow_avx2 = true;
  // Use the AVX-512 interaction kernels (widths that are multiples of 16) when the CPU has them;
  // false leaves the AVX2 ones (tests compare the three).
  bool allow_avx512 = true;
};

class CpuBackend final : public Backend {
 public:
  // INVALID_ARGUMENT for negative threads, and for a DLRM_CPU_GEMM that names no library.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const CpuBackendOptions& options);
  ~CpuBackend() override;

  Device device() const override { return Device::kCpu; }
  std::string name() const override;

  float* Allocate(size_t count) override;
  void Deallocate(float* ptr) override;
  // Floats asked of Allocate since the backend was made (freed ones included): what a test
  // compares with a size computed ahead (DlrmDenseModel::MemoryFloats).
  size_t allocated_floats() const { return allocated_floats_.load(std::memory_order_relaxed); }
  void CopyFromHost(const float* host_src, float* dst, size_t count) override;
  void CopyToHost(const float* src, float* host_dst, size_t count) override;
  void Copy(const float* src, float* dst, size_t count) override;
  void Fill(float* dst, size_t count, float value) override;
  void Synchronize() override {}

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override;
  void BiasActivation(float* y, const float* bias, int rows, int cols, bool relu) override;
  void LinearForward(const float* x, const float* w, const float* bias, int batch, int in, int out,
                     bool relu, float* y) override;
  void ReluBackward(const float* y, float* dy, size_t count) override;
  void ColumnSum(const float* dy, int rows, int cols, float* db) override;
  void ReluBackwardColumnSum(const float* y, float* dy, int rows, int cols, float* db) override;
  void Copy2D(const float* src, int src_stride, float* dst, int dst_stride, int rows,
              int cols) override;
  void Axpy(float alpha, const float* x, float* y, size_t count) override;
  void CrossCombine(const float* x0, const float* h, const float* xl, float* out,
                    size_t count) override;
  void CrossCombineBackward(const float* x0, const float* h, const float* g, float* dh, float* dx0,
                            size_t count) override;
  void InteractionForward(const float* bottom, const float* emb, int batch, int num_tables, int dim,
                          float* out) override;
  void InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                           int num_tables, int dim, float* dbottom, float* demb) override;
  double SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int batch,
                                   float* probs, float* dlogits) override;
  void OptimizerStep(const DenseOptimizerOptions& options, int64_t step, float* params,
                     const float* grads, float* state, size_t count) override;

 private:
  CpuBackend(int threads, bool avx2, bool avx512, CpuGemmLibrary gemm, bool bf16,
             CpuLinearForward linear_forward);
  // LinearForward as one oneDNN matmul with the bias (when not null) and the ReLU (with a bias)
  // fused: fp32, or bf16 inputs with math_mode bf16.
  void FusedLinearForward(const float* x, const float* w, const float* bias, int batch, int in,
                          int out, bool relu, float* y);
  // Times the plain matmul primitive against the GEMM on this call's operands (writing y) and
  // returns whether the matmul was the faster.
  bool PlainMatmulIsFaster(const float* x, const float* w, int batch, int in, int out, float* y);
  // Sets OpenMP's thread count on the calling thread to threads_ (when > 0), before a oneDNN call.
  void UseOmpThreads();
  // The bf16 GEMM (math_mode bf16): oneDNN matmul primitives by shape, on the rounded inputs.
  // With a bias, c = act(alpha op(a) op(b) + beta c + bias) in the same primitive (a linear
  // layer's fused forward; act is the ReLU when relu).
  void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                const float* b, float beta, float* c, const float* bias = nullptr,
                bool relu = false);
  // Returns at least `count` floats of scratch memory for part `part` of a split loop, reused
  // across calls.
  float* Scratch(size_t count, int part = 0);
  // Runs fn(begin, end, part) over [0, n) in contiguous parts of at least min_per_part items (all
  // on the calling thread when n is below two of them); part < kMaxParts.
  void ForParts(int64_t n, int64_t min_per_part,
                const std::function<void(int64_t, int64_t, int)>& fn);

  // ColumnSum of dy, after dy = y > 0 ? dy : 0 when y is not null, row block by row block.
  void MaskedColumnSum(const float* y, float* dy, int rows, int cols, float* db);
  // ForParts over the samples of a batch for the interaction: fn(first sample, samples, part).
  void ForSampleParts(int batch, int num_tables, int dim,
                      const std::function<void(int64_t, int, int)>& fn);

  static constexpr int kMaxParts = 8;
  // Element-wise loops are split only into parts of at least this many floats (64 KB): below it,
  // waking a helper costs more than the part it would take.
  static constexpr int kMinFloatsPerPart = 1 << 14;
  static constexpr int kMinFusedOutputs = 16;  // CpuLinearForward::kAuto
  static constexpr int kMaxFusedInputs = 512;
  std::atomic<size_t> allocated_floats_{0};
  int threads_;
  bool avx2_;
  bool avx512_;
  CpuGemmLibrary gemm_;
  std::unique_ptr<common::ParallelPool> pool_;  // threads - 1 helpers; null with one thread
  std::vector<float> scratch_[kMaxParts];
  std::vector<float> column_partials_;  // ColumnSum's per-block sums
  struct Matmuls;                       // cpu_matmuls.h
  std::unique_ptr<Matmuls> matmuls_;    // null unless the GEMMs are oneDNN's
  bool bf16_;                           // math_mode bf16
  CpuLinearForward linear_forward_;
};

}  // namespace dlrm::dense
