// The vocabulary the pattern matcher (patterns.h) reads exporter forms with: constants as
// exporters write them (initializers, Constant nodes, fp16/bf16 rounding), reductions as they
// reach their readers (ReduceMean, ReduceSum times 1/n, keepdims restored by Reshape/Expand,
// global pools), and the statistics of a normalisation (mean, variance, their variants).
// Internal to the precision library: patterns.cc, patterns_norm.cc and patterns_activation.cc.
// Every function walks a bounded number of nodes, so the matcher stays linear.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/precision/patterns.h"

namespace kiln::precision::internal {

using ir::Node;
using ir::OpType;
using ir::Value;

inline constexpr double kSqrt2OverPi = 0.7978845608028654;

// ------------------------------------------------------------------------------ Constants

/// The elements of `v` when it is an initializer or the output of a Constant node (at most 64:
/// larger constants are not pattern parameters, and not reading them keeps the search linear).
std::optional<std::vector<double>> ConstValues(const Value* v);

/// The value of a one-element constant.
std::optional<double> ScalarConst(const Value* v);

/// Integer constant operands (Reshape targets, Expand shapes, axes); nullopt when not constant.
std::optional<std::vector<int64_t>> ConstInts(const Value* v);

/// The relative error of a constant rounded to `v`'s dtype, at least `floor`: an fp16 model's
/// 1/sqrt(2) is 1.1e-4 off, a bf16 model's sqrt(2/pi) 1.3e-3 (twice the half-ulp of each).
double DtypeTolerance(const Value* v, double floor);

/// |value - expected| <= rel * |expected|.
bool Near(double value, double expected, double rel);

/// `v` is a scalar constant ~`expected`: 1e-4 relative for fp32 (covers the rounding of
/// 1/sqrt(2), sqrt(2/pi), 0.044715 and 7-digit decimals of them, still tells 2 from 3 or 0.5
/// from 0.7), the dtype's own rounding for fp16/bf16 constants.
bool IsConst(const Value* v, double expected);

/// An initializer, a Constant node's output or a graph input.
bool IsParam(const Value* v);

/// A value made only from parameters by shape-only nodes (Reshape, Expand, Unsqueeze, Squeeze,
/// Cast, Identity, Flatten): Paddle reshapes LayerNorm's scale to the normalised shape at run
/// time.
bool IsParamLike(const Value* v);

// ---------------------------------------------------------------------------------- Edges

/// The first output of `n` (nullptr for none).
const Value* Out(const Node* n);

/// The producer of `v` when it is an `op` node.
const Node* Prod(const Value* v, OpType op);

/// The one consumer of `v` when it has exactly one, of type `op`, and `v` is not a graph output.
const Node* OnlyConsumer(const Value* v, OpType op);

/// For a binary node with `a` as one input, the other input.
const Value* Other(const Node* n, const Value* a);

/// The rank of `v` (-1: unknown).
int RankOf(const Value* v);

/// keepdims of a Reduce* node (default 1).
bool KeepDims(const Node& n);

/// Reshape, Expand, Unsqueeze and Squeeze: the shape-only nodes exporters put between a
/// reduction and the node that broadcasts its result.
bool IsReshapeLike(OpType op);

/// `nodes` += `n` unless already there; += each of `more`.
void AddUnique(std::vector<const Node*>* nodes, const Node* n);
void AddAll(std::vector<const Node*>* nodes, const std::vector<const Node*>& more);

// ----------------------------------------------------------------------------- Reductions

/// The reduced axes of `n` (a Reduce* op, or a global pool: axes 2 .. rank-1), negative and
/// sorted when `rank` is known; as written (sorted) when it is not.
std::optional<std::vector<int64_t>> AxesOf(const Node& n, int rank);

/// The first axis of `axes` (negative, sorted) when they are the trailing axes of their value.
std::optional<int64_t> TrailingFirst(const std::vector<int64_t>& axes);

enum class ReduceKind { kMean, kSum, kMax };

/// A reduction as its result reaches the node that reads it.
struct Reduction {
  const Value* in = nullptr;  ///< the reduced value
  std::vector<int64_t> axes;  ///< see AxesOf
  bool squares = false;       ///< ReduceSumSquare: a reduction of in^2
  std::vector<const Node*> nodes;
  /// False when shape-only nodes lie between the reduction and its reader and their constant
  /// operands do not show that they restore the reduced axes (a target computed at run time).
  bool verified = true;
};

/// `v` as a reduction of some value over some axes, with the reduced axes kept (so it
/// broadcasts against that value): the Reduce* op with keepdims or a global pool; or one without
/// keepdims and the Reshape/Expand/Unsqueeze/Squeeze nodes that put the axes back (jax2tf). For
/// kMean, ReduceMean, GlobalAveragePool, or a ReduceSum (ReduceSumSquare: `squares`) times 1/n
/// or divided by n, n the number of elements reduced (jax2tf writes means so), compared at the
/// constant's own precision. For kMax also Max(., -inf) (jax's initial value of a max). At most
/// 8 nodes are walked.
/// `restored_outside`: shape-only nodes after `v` put the reduced axes back (the reader has
/// seen them), so a reduction without kept dims is accepted, unverified.
std::optional<Reduction> ReductionAt(const Value* v, ReduceKind kind,
                                     bool restored_outside = false);

// ------------------------------------------------------------------------ Normalisations

/// The statistics of a LayerNorm or RMSNorm, parsed from its variance value.
struct NormStats {
  bool centred = false;         ///< LayerNorm (x - mean); else RMSNorm
  const Value* x = nullptr;     ///< the normalised input
  const Value* d = nullptr;     ///< the value whose square is averaged (x - mean, or x), or null
  const Value* mean = nullptr;  ///< LayerNorm: the mean as the variance reads it
  std::vector<int64_t> axes;    ///< reduced axes, negative when the rank is known
  std::vector<const Node*> nodes;
  bool verified = true;  ///< every reduction's restore is proven (Reduction::verified)
};

/// The variance (or mean square) `var` of a normalisation, in the forms exporters write:
///   mean(d^2) (d^2 as Pow(d, 2) or d * d; ReduceSumSquare(d) / n), d = x - mean(x) (LayerNorm)
///   or d = x (RMSNorm);
///   mean(x^2) - mean(x)^2 (LayerNorm; Keras 3 and Flax's fast variance);
/// each optionally clamped at zero: Max(var, 0) or Relu(var).
std::optional<NormStats> StatsAt(const Value* var);

/// The nodes that make `num` the centred value of `s` (none when it is s.d itself): exporters
/// that do not share subexpressions compute x - mean again for the numerator (PyTorch's var).
/// nullopt when `num` is not that value. A second mean's restore, when unproven, clears
/// `*verified`.
std::optional<std::vector<const Node*>> CentredValue(const Value* num, const NormStats& s,
                                                     bool* verified);

/// The nodes that make `v` the mean of `s` (none when it is s.mean itself); as CentredValue.
std::optional<std::vector<const Node*>> MeanValue(const Value* v, const NormStats& s,
                                                  bool* verified);

}  // namespace kiln::precision::internal
