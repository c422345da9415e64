// The time loop of the fast LSTM, GRU and RNN kernels (recurrent_avx512.cc; the kernels, the
// packing and the input projection are in recurrent_ops.cc). Call only when the CPU has the
// kAvx512 features (and kCpuAvx512Bf16 for bf16 outputs).
//
// Each step multiplies the state Ht-1 (fp32, [batch][hidden]) by the recurrent weight R^T packed
// for it: the rows of R in blocks of 16 hidden units, each block [hidden][gates][16] (k-major, the
// gates of a unit side by side, units past `hidden` zero), in fp32, fp16 or bf16 storage widened
// to fp32 in registers, or, for an R stored quantized (LSTMQuantizedR), as the integers
// q - zero_point in int8 or int16 storage (exact), widened to fp32 in registers, the row's scale
// applied to each finished dot product: s * (h . (q - zp)). The block's dot products (fp32 fused
// multiply-adds, k split over 1 to 8 accumulators) are added to the step's input projection (Xt W^T
// + biases, fp32, computed for the whole sequence beforehand) and the gate math of recurrent.h's
// equations runs on them in fp32 (SigmoidF32 and TanhF32 of math.h). With several threads, each
// owns a range of blocks (its hidden units: the same slice of R every step) and the team meets at
// one barrier per step (two for GRU with linear_before_reset = 0, whose h gate reads rt . Ht-1 of
// every unit); the two directions of a bidirectional node run at once, on half of the threads each.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

enum class RnnCellType { kRnn, kGru, kLstm };
/// The activations the fast kernel computes (others run on the reference kernel).
enum class RnnActType { kSigmoid, kTanh, kRelu };

/// Hidden units per block of a packed recurrent weight.
constexpr int64_t kRnnBlock = 16;

/// Gates of the first packed part of R, RnnLoopArgs::r0: every gate (LSTM 4, RNN 1, GRU with
/// linear_before_reset 3) but the h gate of a GRU without linear_before_reset (z and r: 2), whose
/// dot products take rt . Ht-1 (the second part, r1, of 1 gate). Defined in recurrent_ops.cc.
int RnnGates0(RnnCellType cell, bool linear_before_reset);

/// Values of one packed recurrent weight of `gates` gates and `hidden` units (one direction):
/// ceil(hidden / 16) blocks of hidden * gates * 16. Defined in recurrent_ops.cc (no ISA code).
int64_t RnnPackedElems(int64_t hidden, int gates);

/// One run of the time loop over every direction.
struct RnnLoopArgs {
  RnnCellType cell = RnnCellType::kLstm;
  DataType weight_type = DataType::kF32;  // packed R storage: kF32, kF16, kBF16, kI8 or kI16
  DataType y_type = DataType::kF32;       // Y storage: kF32, kF16 or kBF16
  int64_t seq = 0, batch = 0, hidden = 0;
  int dirs = 1;
  bool reverse[2] = {false, true};  // direction d reads each sequence backwards
  const int32_t* lens = nullptr;    // [batch], each in [0, seq]
  /// Input projections: row (t, b) at xproj + (t * x_ts + b * x_bs) * x_row; direction d's
  /// gates * hidden values (gate-major, ONNX gate order) start d * gates * hidden into it, and
  /// hold Xt W^T plus Wb + Rb (GRU with linear_before_reset: plus Wb only for the h gate).
  const float* xproj = nullptr;
  int64_t x_ts = 0, x_bs = 0, x_row = 0;
  /// Packed R per direction: r0 RnnGates0's gates, r1 the h gate of a GRU without
  /// linear_before_reset.
  const void* r0[2] = {nullptr, nullptr};
  const void* r1[2] = {nullptr, nullptr};
  /// Integer R (kI8, kI16): each row's scale, gate g's units at r_scale[d] + g * r_scale_gs
  /// (r_scale_gs a multiple of 16 >= hidden, lanes past hidden readable).
  const float* r_scale[2] = {nullptr, nullptr};
  int64_t r_scale_gs = 0;
  const float* rbh[2] = {nullptr, nullptr};   // GRU with linear_before_reset: Rbh, or nullptr
  const float* peep[2] = {nullptr, nullptr};  // LSTM: P (i, o, f; 3 * hidden), or nullptr
  RnnActType f[2] = {RnnActType::kSigmoid, RnnActType::kSigmoid};
  RnnActType g[2] = {RnnActType::kTanh, RnnActType::kTanh};
  RnnActType h[2] = {RnnActType::kTanh, RnnActType::kTanh};
  float clip = 0.0f;  // +Inf: none
  bool input_forget = false;
  bool linear_before_reset = false;
  /// The state per direction, [dirs][batch][hidden] fp32: the initial state on entry, the final
  /// one on return (each entry's after its last step). c_state for LSTM only.
  float* h_state = nullptr;
  float* c_state = nullptr;
  /// Y, or nullptr: element (t, d, b, u) at y + t * y_ts + d * y_ds + b * y_bs + u (in elements
  /// of y_type). Only rows t < lens[b] are written.
  void* y = nullptr;
  int64_t y_ts = 0, y_ds = 0, y_bs = 0;
  /// 3 * dirs * batch * hidden floats of scratch.
  float* scratch = nullptr;
  /// Threads of the loop's team (1: the calling thread alone).
  int threads = 1;
};

/// Runs the recurrence of every direction, one after the other.
void RnnLoopAvx512(const RnnLoopArgs& a);

}  // namespace kiln::kernels::cpu::avx512
