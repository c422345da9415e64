// Scaled dot-product attention (the Attention op, opset 23, as the fusion pass writes it and as
// models carry it) on AVX-512: per (batch, head) and block of query rows, Q K^T in fp32 with K
// transposed into an fp32 tile, the scale and the mask added, the row softmax with ExpF32, and
// P V in fp32, rounded once into Y. Defined in attention_avx512.cc; call only when the CPU has
// kAvx512 features (and kCpuAvx512Bf16 for bfloat16).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// One run's operands, every size resolved. Q is (B, q_heads, q_len, head) or, `three_d`,
/// (B, q_len, q_heads * head); K and V likewise with kv_heads and kv_len (v_head for V); Y has
/// Q's layout with v_head. Q, K, V and Y share `dtype` (kF32, kF16 or kBF16).
struct AttentionArgs {
  DataType dtype = DataType::kF32;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* y = nullptr;
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head = 0, v_head = 0;
  /// Each score Q.K is multiplied by this before the mask is added.
  float factor = 1;
  /// Optional mask (kF32, kF16, kBF16 added to the scores; kBool: false masks the key out),
  /// read at element strides (0 where it broadcasts) over (batch, q_heads, q_len, key); keys at
  /// and after `mask_keys` are masked out.
  DataType mask_dtype = DataType::kUndefined;
  const void* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  int64_t mask_keys = 0;
  /// Query i sees keys j <= i only.
  bool causal = false;
};

/// Y = softmax(factor * Q K^T + mask) V, heads grouped as GQA does (q head h reads kv head
/// h / (q_heads / kv_heads)). A row whose mask removes every key is zero (as the reference).
/// Runs on the OpenMP threads when there is enough work.
void Attention(const AttentionArgs& a);

}  // namespace kiln::kernels::cpu::avx512
