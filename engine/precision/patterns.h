// Recognition of numerically sensitive patterns, whatever the opset and exporter: LayerNorm,
// RMSNorm, GELU, Softmax and scaled-dot-product attention, each as its ONNX op and in the
// decomposed forms exporters write. One matcher feeds both policies (`pattern:` selectors cover
// every node of every instance) and fusion (which rewrites an instance into one kernel).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"

namespace kiln::precision {

enum class PatternKind { kLayerNorm, kRmsNorm, kGelu, kSoftmax, kAttention };

/// "layernorm", "rmsnorm", "gelu", "softmax", "attention".
const char* PatternName(PatternKind k);
std::optional<PatternKind> PatternFromName(absl::string_view name);

/// One recognised instance.
struct PatternInstance {
  PatternKind kind;
  /// Every node of the instance (node ids), in topological order; for op forms, just the op.
  std::vector<int> nodes;
  /// True when the instance is the ONNX op itself (LayerNormalization, Gelu, Softmax, ...).
  bool is_op = false;
  /// False when the instance is recognised for policies only: its nodes are a normalisation
  /// (so `pattern:` rules cover them), but the matcher could not prove that the fields below
  /// describe its computation exactly (a Reshape/Expand whose target is computed at run time
  /// restores the reduced axes), so fusion must leave it alone.
  bool fusable = true;
  /// The value the instance computes (the output of its last node).
  const ir::Value* output = nullptr;
  /// The instance's data input (x; for attention: q).
  const ir::Value* input = nullptr;

  // What a fused kernel needs; meaning depends on `kind`. Unset fields keep their defaults.
  const ir::Value* scale = nullptr;  // LayerNorm/RMSNorm gamma (nullptr: none)
  const ir::Value* bias = nullptr;   // LayerNorm beta (nullptr: none)
  float epsilon = 0;                 // LayerNorm/RMSNorm epsilon
  int64_t axis = -1;                 // normalised/softmax axis (negative: from the end)
  bool tanh_approximation = false;   // GELU: tanh form
  const ir::Value* key = nullptr;    // attention K^T as fed to the MatMul (Attention op: K)
  const ir::Value* value = nullptr;  // attention V
  const ir::Value* mask = nullptr;   // attention additive mask (nullptr: none; see below)
  float attention_scale = 1;         // attention: scores are (Q K^T) * scale
  /// Attention whose mask is applied by Where(mask, mask_fill, scores) (PyTorch's masked_fill):
  /// `mask` is then the boolean condition (true = masked out), not an additive mask.
  bool mask_is_condition = false;
  float mask_fill = 0;  // the fill value of that Where (e.g. -inf)
};

/// Finds every instance in `graph`. Instances do not overlap, except that an attention instance
/// contains the Softmax instance inside it (both are reported). Linear in the graph size.
std::vector<PatternInstance> FindPatterns(const ir::Graph& graph);

}  // namespace kiln::precision
