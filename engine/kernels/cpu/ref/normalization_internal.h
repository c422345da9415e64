// Internals shared by LayerNormalization (normalization_layer.cc) and the fused AddLayerNorm
// (fused_*.cc): parameter broadcasting, the stash-type arithmetic and one row of LayerNorm.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::ref {

/// Arithmetic of stage one for stash storage type S.
template <typename S>
struct Stash {
  using C = Compute<S>;
  static C R(C v) { return Load(Store<S>(v)); }
};

/// A parameter tensor (scale, bias) read once per run into the compute type of X.
template <typename C>
std::vector<C> ReadParam(const ir::Tensor& t) {
  std::vector<C> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = static_cast<C>(ir::ElementAsDouble(t, i));
  return v;
}

/// Requires a float parameter tensor; error names the node and `what`.
absl::Status CheckFloatParam(const ir::Node& node, const ir::Tensor& t, const char* what);

/// Offsets of a parameter unidirectionally broadcast to X, for X viewed as rows x inner with
/// inner = prod(x_dims[axis:]). The table covers the trailing block of X from
/// start = min(axis, rank - param_rank); its size `period` is a multiple of inner, and element
/// (row, j) reads param[offsets[(row * inner) % period + j]].
struct ParamMap {
  std::vector<int64_t> offsets;
  int64_t period = 1;
};

/// The ParamMap of `p` broadcast to `x_dims` normalized from `axis`; error names the node.
absl::StatusOr<ParamMap> MapParam(const ir::Node& node, const ir::Tensor& p,
                                  const std::vector<int64_t>& x_dims, int axis, const char* what);

/// Stage one and two of LayerNormalization for one row of `inner` > 0 values. `xs` holds the row
/// in Compute<S>, already rounded to the stash type S, and is overwritten with x - mean. Calls
/// out(j, y_j) with y_j = normalized_j * scale[so[j]] (+ bias[bo[j]] when `bo` is non-null) in
/// compute type CT, for the caller to round once. Returns {mean, 1 / sqrt(var + eps)}.
template <typename S, typename CT, typename Out>
std::pair<Compute<S>, Compute<S>> LayerNormRow(Compute<S>* xs, int64_t inner, Compute<S> eps,
                                               const CT* scale, const int64_t* so, const CT* bias,
                                               const int64_t* bo, Out&& out) {
  using St = Stash<S>;
  using C = Compute<S>;
  const C count = static_cast<C>(inner);
  C sum = 0;
  for (int64_t j = 0; j < inner; ++j) sum += xs[j];
  const C mean = St::R(sum / count);
  C sq = 0;
  for (int64_t j = 0; j < inner; ++j) {
    xs[j] = St::R(xs[j] - mean);  // now D = X - Mean
    sq += St::R(xs[j] * xs[j]);
  }
  const C var = St::R(sq / count);
  const C inv_std = St::R(C(1) / St::R(std::sqrt(St::R(var + eps))));
  for (int64_t j = 0; j < inner; ++j) {
    CT v = static_cast<CT>(St::R(xs[j] * inv_std)) * scale[so[j]];
    if (bo != nullptr) v += bias[bo[j]];
    out(j, v);
  }
  return {mean, inv_std};
}

}  // namespace kiln::kernels::cpu::ref
