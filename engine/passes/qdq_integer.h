// QDQ MatMul / Conv on the integer GEMM (issue 30).
//
// Pattern (after fusion, before lowering and constant folding):
//   MatMul(DequantizeLinear(qa, sa, za), DequantizeLinear(qb, sb, zb))
//     => MatMulInteger(qa, qb, za, zb) -> Cast(int32 -> float) -> Mul(sa * sb)
//   Conv(DequantizeLinear(qx, sx, zx), DequantizeLinear(qw, sw, zw) [, B])
//     => ConvInteger(qx, qw, zx, zw) -> Cast -> Mul(sx * sw as [1, M, 1(, 1)]) [-> Add(B)]
// Preconditions: qa / qx uint8 or int8 (from a QuantizeLinear or any producer) with sa / sx and
// za / zx per-tensor constants; qb a constant int8 / uint8 2-D matrix with sb / zb constants per
// tensor or per column (axis 1, [N]); qw a constant int8 / uint8 1-D or 2-D convolution weight
// (rank 3 or 4) with sw / zw per tensor or per output channel (axis 0, [M]); no blocked
// quantization; every dequantized value, the scales and the MatMul's / Conv's output fp32 (an
// authored fp16 QDQ model keeps its float ops). Any other form is left as it is. The scale is
// the fp32 product sa * sb[j] (per column), as ONNX Runtime's MatMulIntegerToFloat computes it.
// A DequantizeLinear the rewritten node was the only reader of is removed with it; one with other
// readers stays for them.
//
// Numerics and the precision guarantee (DESIGN.md §5): the integer sum of (qa - za) * (qb - zb)
// is exact (int32), so the result differs from the float MatMul of the dequantized operands only
// by the roundings that float computation itself makes (each dequantized operand rounded to
// fp32, then the fp32 sum of K products) plus two of its own (the product sa * sb, the final
// product; and the int32 -> fp32 conversion of a sum above 2^24 in magnitude): it is as accurate
// as the fp32 computation or more. The Cast and the Mul compute in fp32 whatever the MatMul was
// assigned (an fp16 Cast of an int32 sum would overflow), and consumers assigned lower read a
// conversion lowering inserts: the effective precision of the MatMul / Conv and of the absorbed
// DequantizeLinear nodes is fp32 >= assigned. Where precision lowering replaces the Cast, the Mul
// and that conversion by one DequantizeLinear rounding once to the MatMul's assigned fp16 / bf16
// (IntegerSumsExactInFloat below; precision_lowering.h), the MatMul's effective precision is the
// assigned one: its output is rounded so. New nodes carry the sources of the nodes they
// implement (the MatMulInteger / ConvInteger also those of the absorbed DequantizeLinears) and
// the fusion label "qdq-matmul" / "qdq-conv".
//
// `--fusion off` disables the pass; `--no-fuse pattern:qdq-matmul` / `pattern:qdq-conv`,
// `op:MatMul` / `op:Conv` and scope selectors exclude instances. Node ids change (nodes are
// added and removed); `ir::Node::sources` keeps provenance.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/passes/fusion.h"
#include "spdlog/logger.h"

namespace kiln::passes {

/// Whether every int32 sum of `integer`, a MatMulInteger / ConvInteger of this pass (uint8 /
/// int8 A with a per-tensor constant zero point or none; a constant uint8 / int8 weight, B [K, N]
/// or a convolution weight, with constant zero points per tensor or per column / output
/// channel), is at most 2^24 in magnitude: max |qa - za| over A's dtype times the largest sum of
/// |qb - zb| over a column / output channel. Then int32 -> fp32 is exact, and one
/// DequantizeLinear of the sums (the product in double, rounded once) gives the bits of the Cast
/// and the fp32 Mul. False for any other node or form.
bool IntegerSumsExactInFloat(const ir::Node& integer);

/// Rewrites every QDQ MatMul / Conv of `graph` as above whose integer node `fast_kernel` accepts
/// (a kernel faster than the reference one runs it: else the fp32 GEMM is faster), recording each
/// rewrite in `fusion` (applied, logged; the new nodes' precision; the effective precision of
/// their sources). Then FuseIntegerToFloat, where a rewritten MatMul's Cast + Mul fuse when
/// precision lowering cannot make them one DequantizeLinear of the sums: the sums are not exact
/// in fp32 (IntegerSumsExactInFloat), or `assignment` (the one the fusion pass read; null: not
/// known) assigns a source of the MatMul fp32. Returns the number of rewrites and fusions.
absl::StatusOr<int> QdqToInteger(ir::Graph& graph, const FusionOptions& options,
                                 FusionResult& fusion,
                                 const std::function<bool(const ir::Node&)>& fast_kernel,
                                 spdlog::logger* logger,
                                 const precision::Assignment* assignment = nullptr);

/// Fuses every chain ConvInteger / MatMulInteger [-> Add(B)] -> Cast(to fp32) -> Mul(scale),
/// each intermediate read only by the next and no graph output, B int32 and scale fp32 with
/// static dims of one value or one per output channel (ConvInteger) / output column
/// (MatMulInteger: [N], [1, N], ...), into one ConvIntegerToFloat / MatMulIntegerToFloat when
/// `fast_kernel` accepts it: the same bits as the separate nodes (int32 Add wrapping, Cast
/// rounding to nearest even, fp32 Mul); the Cast and the Mul compute in fp32, their effective
/// precision. Authored chains (every node unfused) get the fusion label "conv-integer-to-float"
/// / "matmul-integer-to-float"; a qdq-matmul MatMulInteger + Cast + Mul of this pass fuses where
/// `fuse_qdq(integer, mul)` says so and keeps its label. `--fusion off`, `--no-fuse
/// pattern:conv-integer-to-float` / `pattern:matmul-integer-to-float` and op / scope selectors
/// keep them apart. The fused node carries the members' sources. Returns the number of fusions.
absl::StatusOr<int> FuseIntegerToFloat(
    ir::Graph& graph, const FusionOptions& options, FusionResult& fusion,
    const std::function<bool(const ir::Node&)>& fast_kernel,
    const std::function<bool(const ir::Node&, const ir::Node&)>& fuse_qdq);

}  // namespace kiln::passes
