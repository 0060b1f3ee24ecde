// The GEMM libraries' thread settings, which must be in the environment before the libraries
// start, and what the backend's name reports of them.
//
// OpenBLAS reads OPENBLAS_THREAD_TIMEOUT once, when the library is loaded (before main). By
// default its idle worker threads spin, calling sched_yield, for about 2^28 cycles after each
// GEMM before they sleep. Between the GEMMs of a training step that spin takes a share of the
// cores from the embedding pooling, the sparse optimizer and the RPC threads that run there
// (docs/BENCHMARKS.md, "Single-process training step": about 0.035 of model1's step / GEMM-only
// ratio on 2 cores). A value set now, in main, would come too late, and glibc resets the
// environment after an executable's .preinit_array has run, so ReexecWithBlasDefaults starts
// the program again with OPENBLAS_THREAD_TIMEOUT=4 (sleep after 2^4 cycles) when the variable is
// unset. A value the user has set is kept: OPENBLAS_THREAD_TIMEOUT=28 restores OpenBLAS's spin.
//
// oneDNN's threads are OpenMP's (libgomp), which read OMP_WAIT_POLICY when they load. Their
// default also spins after each parallel region, and on 2 cores that cost kaggle-shape's step
// 0.65-0.71 of its GEMM-only bound against 0.76-0.79 with OMP_WAIT_POLICY=passive (sleep at once;
// docs/BENCHMARKS.md, nineteenth session), so the same restart sets OMP_WAIT_POLICY=passive when it
// is unset. OMP_WAIT_POLICY=active restores the spin.
#pragma once

#include <string>

namespace dlrm::dense {

// The values ReexecWithBlasDefaults sets when the environment has none.
inline constexpr char kDefaultBlasThreadTimeout[] = "4";
inline constexpr char kDefaultOmpWaitPolicy[] = "passive";

// When OPENBLAS_THREAD_TIMEOUT or OMP_WAIT_POLICY is unset: sets what is missing and replaces this
// process with a fresh run of the same executable and arguments (execv of /proc/self/exe; same
// pid, descriptors and the rest of the environment). Returns only when both variables were
// already set or the exec failed (then the process goes on with the libraries' defaults). Call
// first thing in main.
void ReexecWithBlasDefaults(char** argv);

// OPENBLAS_THREAD_TIMEOUT as OpenBLAS read it at start-up ("" when unset: OpenBLAS's default).
std::string BlasThreadTimeout();

// The kernels OpenBLAS runs (openblas_get_corename(): "Haswell", "SkylakeX", "Cooperlake", ...):
// its own choice for this CPU, or the one OPENBLAS_CORETYPE asked for. The GEMMs of model1 take
// about twice as long with the AVX2 "Haswell" kernels as with the AVX-512 ones on the same cores
// (docs/BENCHMARKS.md), so benchmark reports show it.
std::string BlasCoreName();

// OMP_WAIT_POLICY as libgomp read it at start-up ("" when unset).
std::string OmpWaitPolicy();

// The instruction set oneDNN's kernels use on this CPU ("avx512_core_bf16", "avx2", ...).
std::string OneDnnIsaName();

}  // namespace dlrm::dense
