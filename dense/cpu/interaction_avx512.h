// AVX-512 kernels of the DLRM dot interaction for the CPU backend (see Backend::Interaction*):
// the AVX2 kernels' scheme (interaction_avx2.h) with 16-float registers, so a 16-wide embedding
// (kaggle-shape, `make demo`) is one register instead of two. They live in their own translation
// unit, compiled with -mavx512f, and are only called after a runtime check of the CPU.
#pragma once

#include <cstddef>

namespace dlrm::dense::cpu {

// True when the running CPU has AVX-512F.
bool CpuHasAvx512F();

// Whether the AVX-512 kernels handle this shape: a width that is a multiple of 16, up to 64, or a
// multiple of 64 up to 512 (the backward takes 64 columns at a time), and at most 511 tables.
inline bool Avx512InteractionSupports(int num_tables, int dim) {
  return dim > 0 && dim % 16 == 0 && (dim <= 64 || dim % 64 == 0) && dim <= 512 &&
         num_tables >= 0 && num_tables <= 511;
}

// Floats of scratch memory the kernels need for num_tables tables of width dim.
size_t Avx512InteractionScratchFloats(int num_tables, int dim);

// Same contracts as Backend::InteractionForward / InteractionBackward; `scratch` holds
// Avx512InteractionScratchFloats(num_tables, dim) floats. Preconditions: CpuHasAvx512F() and
// Avx512InteractionSupports(num_tables, dim).
void Avx512InteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                              int dim, float* out, float* scratch);
void Avx512InteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int dim, float* dbottom, float* demb,
                               float* scratch);

}  // namespace dlrm::dense::cpu
