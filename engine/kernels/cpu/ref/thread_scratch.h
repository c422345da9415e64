// Scratch buffers kept per thread from one kernel run to the next (ref/common.cc). No inline
// code, so that the AVX-512-compiled kernel files may include it too.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu::ref {

/// The scratch buffers a thread's kernels share (an engine's kernels run one after another on
/// its calling thread, so one buffer per use serves them all, as large as the largest needs, and
/// stays in the cache from one kernel to the next; sessions on other threads have their own, and
/// so have the OpenMP threads a kernel runs on, which persist from one run to the next).
enum ThreadScratchSlot {
  kScratchConvSums,      // a bf16 / fp16 oneDNN convolution's fp32 sums
  kScratchConvWidenedX,  // an fp16 oneDNN convolution's X widened to fp32
  kScratchChainRows,     // the AVX-512 convolution chains' rows in flight
  kScratchGemmA,         // the AVX-512 GEMM's copy of A (the calling thread's, read by its team)
  kScratchGemmB,         // the AVX-512 GEMM's packed B strip (each thread's)
  kScratchGemmC,         // the AVX-512 GEMM's output rows in the epilogue (each thread's)
  kScratchGemmAmxRow,    // the AVX-512 GEMM's A row being laid into AMX tiles (each thread's)
  kThreadScratchSlots,
};

/// The calling thread's buffer `slot`, at least `floats` long (a valid buffer for 0 too) and
/// 64-byte aligned (grown, never shrunk; its contents are not kept when it grows); nullptr only
/// when the memory cannot be had.
float* ThreadScratch(ThreadScratchSlot slot, int64_t floats);

}  // namespace kiln::kernels::cpu::ref
