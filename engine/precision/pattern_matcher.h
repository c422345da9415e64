// The pattern matcher behind FindPatterns (patterns.h), internal to the precision library. One
// class, its members defined by responsibility: patterns.cc (the driver, the rules every
// instance obeys, op forms, attention), patterns_norm.cc (LayerNorm / RMSNorm),
// patterns_activation.cc (GELU, Softmax); pattern_forms.h is the vocabulary they read graphs
// with. Each decomposed form is matched from one anchor op by walking a bounded number of edges,
// so the whole search is linear in the graph size.
#pragma once

#include <vector>

#include "engine/ir/graph.h"
#include "engine/precision/patterns.h"

namespace kiln::precision::internal {

/// Finds every instance of a graph (see FindPatterns). Use once: Matcher(graph).Run().
class Matcher {
 public:
  explicit Matcher(const ir::Graph& graph);

  /// Every instance, in execution order (an attention after the Softmax it contains).
  std::vector<PatternInstance> Run();

 private:
  struct Found {
    PatternInstance inst;
    int order_key;  // topological position of the instance's last node
  };

  /// True when no node of `nodes` belongs to an instance yet.
  bool Free(const std::vector<const ir::Node*>& nodes) const;
  /// True when every output of `nodes` except `output` is read only inside `nodes` and is not a
  /// graph output (see patterns.cc for why).
  static bool Closed(const std::vector<const ir::Node*>& nodes, const ir::Value* output);
  /// Adds the Constant nodes only `nodes` read.
  void AddOwnConstants(std::vector<const ir::Node*>* nodes) const;
  /// Records `inst` with `nodes` (plus the Constant nodes only they read), claiming them.
  void Commit(PatternInstance inst, std::vector<const ir::Node*> nodes);

  // patterns.cc
  void MatchOp(const ir::Node& n);
  void MatchAttention(const PatternInstance& softmax);
  // patterns_norm.cc
  void MatchNorm(const ir::Node& anchor);
  void MatchBatchNormLayerNorm(const ir::Node& bn);
  // patterns_activation.cc
  void MatchGeluErf(const ir::Node& erf);
  void MatchGeluTanh(const ir::Node& tanh);
  void CommitGelu(const ir::Value* x, const ir::Node& anchor, double sign,
                  std::vector<const ir::Node*> nodes, bool tanh);
  void MatchSoftmax(const ir::Node& exp);

  const ir::Graph& graph_;
  std::vector<const ir::Node*> order_;
  std::vector<int> pos_;
  std::vector<bool> claimed_;
  std::vector<Found> out_;
};

}  // namespace kiln::precision::internal
