// OpenBLAS's thread settings, which must be in the environment before the library starts.
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
#pragma once

#include <string>

namespace dlrm::dense {

// The value ReexecWithBlasDefaults sets when the environment has none.
inline constexpr char kDefaultBlasThreadTimeout[] = "4";

// When OPENBLAS_THREAD_TIMEOUT is unset: sets it and replaces this process with a fresh run of
// the same executable and arguments (execv of /proc/self/exe; same pid, descriptors and the
// rest of the environment). Returns only when the variable was already set or the exec failed
// (then the process goes on with OpenBLAS's default). Call first thing in main.
void ReexecWithBlasDefaults(char** argv);

// OPENBLAS_THREAD_TIMEOUT as OpenBLAS read it at start-up ("" when unset: OpenBLAS's default).
std::string BlasThreadTimeout();

// The kernels OpenBLAS runs (openblas_get_corename(): "Haswell", "SkylakeX", "Cooperlake", ...):
// its own choice for this CPU, or the one OPENBLAS_CORETYPE asked for. The GEMMs of model1 take
// about twice as long with the AVX2 "Haswell" kernels as with the AVX-512 ones on the same cores
// (docs/BENCHMARKS.md), so benchmark reports show it.
std::string BlasCoreName();

}  // namespace dlrm::dense
