// The recurrent ops LSTM, GRU and RNN: attributes, input checks, output shapes and the
// activation functions, shared by the reference kernel (recurrent.cc) and the AVX-512 kernel
// (cpu/avx512/recurrent_ops.cc). Semantics are the ONNX operator docs' (opsets 7, 14, 22):
//
//   RNN:  Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)
//   GRU:  zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz),  rt = f(Xt Wr^T + Ht-1 Rr^T + Wbr + Rbr)
//         ht = g(Xt Wh^T + (rt . Ht-1) Rh^T + Rbh + Wbh)        (linear_before_reset = 0)
//         ht = g(Xt Wh^T + rt . (Ht-1 Rh^T + Rbh) + Wbh)        (linear_before_reset != 0)
//         Ht = (1 - zt) . ht + zt . Ht-1
//   LSTM: it = f(Xt Wi^T + Ht-1 Ri^T + Pi . Ct-1 + Wbi + Rbi)
//         ft = f(Xt Wf^T + Ht-1 Rf^T + Pf . Ct-1 + Wbf + Rbf)     (1 - it with input_forget)
//         ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc),  Ct = ft . Ct-1 + it . ct
//         ot = f(Xt Wo^T + Ht-1 Ro^T + Po . Ct + Wbo + Rbo),  Ht = ot . h(Ct)
//
// Gate row order in W, R and B: LSTM i, o, f, c; GRU z, r, h; P: i, o, f. `clip` bounds each
// gate's input to f and g to [-clip, clip] (not Ct's input to h), as ONNX Runtime does. Direction
// 1 of a bidirectional node, and a "reverse" node, read each batch entry's sequence backwards from
// its own length. With sequence_lens, Y is zero past each entry's length and Y_h / Y_c hold the
// state after its last step (zero for a length of 0, as ONNX Runtime gives).
//
// Kiln's LSTMQuantizedR (engine/ir/ops.def) is an LSTM whose R is stored quantized: R int8 or
// uint8 [dirs, 4*hidden, hidden], R_scale (floating) and R_zero_point (R's dtype) [dirs,
// 4*hidden] at slots 8 and 9, one scale and zero point per row of R. Its R is the row's
// (q - zero_point) * scale, computed in the compute type (as the import dequantized it before).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels::cpu::ref::rnn {

enum class Cell { kRnn, kGru, kLstm };

/// The activation functions of the operator docs.
enum class ActKind {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
};

/// One activation with its alpha and beta (those it does not use are 0).
struct Act {
  ActKind kind = ActKind::kTanh;
  float alpha = 0.0f;
  float beta = 0.0f;

  /// The function at `x`, in the compute type C (float, or double for double tensors).
  template <typename C>
  C operator()(C x) const {
    const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    switch (kind) {
      case ActKind::kRelu:
        return x < C(0) ? C(0) : x;
      case ActKind::kTanh:
        return std::tanh(x);
      case ActKind::kSigmoid:
        return Sigmoid(x);
      case ActKind::kAffine:
        return a * x + b;
      case ActKind::kLeakyRelu:
        return x >= C(0) ? x : a * x;
      case ActKind::kThresholdedRelu:
        return x >= a ? x : C(0);  // the RNN docs' ">= alpha" (ThresholdedRelu the op: "> alpha")
      case ActKind::kScaledTanh:
        return a * std::tanh(b * x);
      case ActKind::kHardSigmoid: {
        const C v = a * x + b;
        return v < C(0) ? C(0) : v > C(1) ? C(1) : v;
      }
      case ActKind::kElu:
        return x >= C(0) ? x : a * (std::exp(x) - C(1));
      case ActKind::kSoftsign:
        return x / (C(1) + std::fabs(x));
      case ActKind::kSoftplus:
        // log(1 + e^x) without overflow: x + log1p(e^-x) for positive x.
        return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }
    return x;
  }

  /// 1 / (1 + e^-x) with exp's argument kept <= 0 so it cannot overflow.
  template <typename C>
  static C Sigmoid(C x) {
    if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
    const C e = std::exp(x);
    return e / (C(1) + e);
  }
};

/// The attributes of one node, checked.
struct Attrs {
  Cell cell = Cell::kLstm;
  int gates = 4;         // rows of W and R per hidden unit: 4 (LSTM), 3 (GRU), 1 (RNN)
  int acts_per_dir = 3;  // activations per direction: 3 (LSTM: f, g, h), 2 (GRU: f, g), 1 (RNN: f)
  int64_t hidden_size = -1;  // -1: taken from R's dims at run time
  int num_directions = 1;
  bool reverse = false;              // direction "reverse"
  std::vector<Act> acts;             // num_directions * acts_per_dir, direction-major
  float clip = INFINITY;             // +Inf: no clip
  bool input_forget = false;         // LSTM
  bool linear_before_reset = false;  // GRU
  int layout = 0;
  bool quantized_r = false;  // LSTMQuantizedR: R int8/uint8 with R_scale and R_zero_point

  /// Whether direction `d` reads the sequences backwards.
  bool DirReverse(int d) const { return reverse || d == 1; }
  /// Activation `j` (f, g, h order) of direction `d`.
  const Act& act(int d, int j) const { return acts[d * acts_per_dir + j]; }
};

/// Reads and checks the node's attributes: InvalidArgument naming the node for an unknown
/// direction or activation, a wrong activation count, a non-positive hidden_size or clip, a layout
/// other than 0 and 1. Activation alpha/beta values are consumed in order by the activations that
/// take them (Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu), as ONNX Runtime
/// does; missing ones take the defaults of the ONNX ops of the same name (LeakyRelu 0.01,
/// ThresholdedRelu 1, HardSigmoid 0.2 / 0.5, Elu 1, Affine 1 / 0, ScaledTanh 1 / 1).
absl::StatusOr<Attrs> ReadAttrs(const ir::Node& node);

/// One run's checked inputs, dims and outputs.
struct Problem {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int dirs = 1;
  int layout = 0;
  const ir::Tensor* x = nullptr;
  const ir::Tensor* w = nullptr;
  const ir::Tensor* r = nullptr;
  const ir::Tensor* b = nullptr;       // optional
  const ir::Tensor* init_h = nullptr;  // optional
  const ir::Tensor* init_c = nullptr;  // optional (LSTM)
  const ir::Tensor* p = nullptr;       // optional (LSTM)
  /// LSTMQuantizedR: R's scale (floating) and zero point (R's dtype), [dirs, gates * hidden].
  const ir::Tensor* r_scale = nullptr;
  const ir::Tensor* r_zero_point = nullptr;
  /// Each batch entry's length, in [0, seq] (seq for every entry without sequence_lens).
  std::vector<int32_t> lens;
  ir::Tensor* y = nullptr;    // nullptr when not requested
  ir::Tensor* y_h = nullptr;  // nullptr when not requested
  ir::Tensor* y_c = nullptr;  // nullptr when not requested (or not an LSTM)

  /// Element offset of X's row (t, b) (`input` values).
  int64_t XRow(int64_t t, int64_t b) const {
    return (layout == 0 ? t * batch + b : b * seq + t) * input;
  }
  /// Element offset of Y's row (t, d, b) (`hidden` values).
  int64_t YRow(int64_t t, int d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  /// Element offset of the row (d, b) of initial_h, initial_c, Y_h and Y_c (`hidden` values).
  int64_t StateRow(int d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
};

/// Checks the run's inputs against each other and `attrs` (dims, dtypes, sequence_lens values in
/// [0, seq]) and gets the requested outputs from `ctx`, in X's dtype (LSTMQuantizedR: R int8 or
/// uint8, R_scale floating and R_zero_point of R's dtype, both [dirs, gates * hidden]).
/// InvalidArgument naming the node otherwise.
absl::StatusOr<Problem> Prepare(const ir::Node& node, const Attrs& attrs, KernelContext& ctx);

}  // namespace kiln::kernels::cpu::ref::rnn
