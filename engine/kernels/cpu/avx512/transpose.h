// Batched 2-D transposes of 4- and 2-byte elements (transpose_avx512.cc; the kernel class is
// transpose_ops.cc): out[b][c][r] = in[b][r][c]. With few rows, the layout pass's NCHW-to-NHWC
// Transpose of an image's 3 colour planes, where the reference's 32 x 32 tiles run three
// elements at a time; with more, its transposes between NHWC and NCHW activations.
// Bits are moved, never converted.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu::avx512 {

/// Rows from which TransposeFewRows32 takes a transpose (kMinFewRows .. kMaxFewRows).
constexpr int64_t kMinFewRows = 2, kMaxFewRows = 16;

/// out[b][c][r] = in[b][r][c] for b < batch, r < rows, c < cols, 4-byte elements;
/// kMinFewRows <= rows <= kMaxFewRows and rows * cols < 2^31. Split over the OpenMP threads from
/// 256 KB on. Needs the kAvx512 CPU features.
void TransposeFewRows32(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols);

/// out[b][c][r] = in[b][r][c] for any rows and cols (4-byte elements, rows * cols < 2^31), in
/// 16 x 16 tiles transposed in registers. Split over the OpenMP threads from 256 KB on.
void TransposeTiles32(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols);

/// As TransposeTiles32 for 2-byte elements.
void TransposeTiles16(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols);

/// As TransposeFewRows32 for 2-byte elements (fp16, bf16, 16-bit integers).
void TransposeFewRows16(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols);

}  // namespace kiln::kernels::cpu::avx512
