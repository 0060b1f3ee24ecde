// AVX2+FMA kernels of the DLRM dot interaction for the CPU backend (see Backend::Interaction*).
// They live in their own translation unit, compiled with -mavx2 -mfma, and are only called after
// a runtime check of the CPU, so the library still runs on CPUs without AVX2 (the portable loops
// in cpu_backend.cc are used there).
#pragma once

#include <cstddef>

namespace dlrm::dense::cpu {

// True when the running CPU has AVX2 and FMA.
bool CpuHasAvx2Fma();

// Whether the AVX2 kernels handle this shape: a width of 8, 16, 24, 32 or a multiple of 32 up
// to 512 (the backward takes 32 columns at a time), and at most 511 tables.
inline bool Avx2InteractionSupports(int num_tables, int dim) {
  return dim > 0 && dim % 8 == 0 && (dim <= 32 || dim % 32 == 0) && dim <= 512 && num_tables >= 0 &&
         num_tables <= 511;
}

// Floats of scratch memory the kernels need for num_tables tables of width dim.
size_t Avx2InteractionScratchFloats(int num_tables, int dim);

// Same contracts as Backend::InteractionForward / InteractionBackward; `scratch` holds
// Avx2InteractionScratchFloats(num_tables, dim) floats. Preconditions: CpuHasAvx2Fma() and
// Avx2InteractionSupports(num_tables, dim).
void Avx2InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                            int dim, float* out, float* scratch);
void Avx2InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                             int num_tables, int dim, float* dbottom, float* demb, float* scratch);

}  // namespace dlrm::dense::cpu
