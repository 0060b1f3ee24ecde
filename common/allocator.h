// Process-wide allocator settings for a process that moves multi-megabyte buffers every step.
//
// glibc serves an allocation above its mmap threshold (128 KiB at first, raised as such blocks
// are freed, but only up to what was freed and undone by heap trimming) with a fresh mapping,
// which the kernel faults in page by page and unmaps on free. gRPC's receive buffers for a
// lookup answer (1-4 MB per kaggle-shape batch) and the trainer's per-step buffers are of that
// size, so a worker or parameter server would fault in every byte it receives, every step
// (measured: about a third of a parameter-server lookup's time on loopback, docs/BENCHMARKS.md).
// ConfigureAllocatorForLargeBuffers keeps such blocks on the heap and stops trimming it, so freed
// buffers are reused: the process keeps its peak heap instead of returning it to the system.
//
// Called first thing by the dlrm binary and the benchmarks; a no-op outside glibc. Setting the
// environment variable DLRM_DEFAULT_MALLOC=1 skips it (to measure the difference).
#pragma once

namespace dlrm::common {

void ConfigureAllocatorForLargeBuffers();

}  // namespace dlrm::common
