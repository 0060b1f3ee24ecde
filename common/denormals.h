// Denormal (subnormal) floats flushed to zero on the CPU, as TensorFlow does in its compute
// threads and torch.set_flush_denormal(True) does on request.
//
// An arithmetic instruction that reads or makes a float below 2^-126 takes a microcode assist on
// x86 cores, about a hundred times its usual cost. Training makes such values: the gradients of a
// converging model get small, their squares smaller, and the sparse optimizer's row updates and
// the GEMMs of the backward then slow down step after step (docs/BENCHMARKS.md, "Denormals
// flushed, and the element-wise loops on both cores": model1's row-wise Adagrad went from 25 to
// 100-130 ms a step over 60 steps). With flushing on, such
// values read and are written as zero (x86: MXCSR's FTZ and DAZ bits; AArch64: FPCR.FZ), which
// changes a result only where it is below 2^-126 in magnitude.
//
// The mode is a per-thread register that a new thread copies from the thread that creates it. Every
// dlrm executable sets it before any library starts a thread (common/denormals_at_start.cc, linked
// into each binary): OpenBLAS starts its workers while it loads, before main. DLRM_DENORMALS=keep
// in the environment keeps IEEE denormals (for comparing bits with another program).
#pragma once

namespace dlrm::common {

// Sets this thread's floating-point control so that denormals are flushed to zero.
void FlushDenormalsInThisThread();

// Whether this thread flushes denormals to zero now.
bool DenormalsFlushedInThisThread();

}  // namespace dlrm::common
