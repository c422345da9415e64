// The machine's fp32 peak, measured: an AVX-512 FMA-throughput loop (fma_peak_avx512.cc).
#pragma once

#include <cstdint>

namespace kiln::bench {

/// fp32 floating-point operations one FmaPeakLoop call performs on each thread.
int64_t FmaPeakFlopsPerThread(int64_t iterations);

/// Runs `iterations` rounds of independent vfmadd231ps chains on each of `threads` OpenMP
/// threads and returns a value derived from every accumulator (so nothing is optimised away).
/// Needs AVX-512F; the caller checks the CPU first.
float FmaPeakLoop(int threads, int64_t iterations);

}  // namespace kiln::bench
