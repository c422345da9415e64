// The types of every value of a graph and of its subgraphs, saved before an import rewrite that
// infers types along the way (legacy_ops.h, contrib_ops.h) and put back after it, so that the
// import's own inference, with the model's declarations, decides them.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/ir/graph.h"

namespace kiln::import {

class TypeSnapshot {
 public:
  explicit TypeSnapshot(const ir::Graph& g) { Save(g); }

  /// Puts back every saved value's kind, dtype and shape. With `reset_added`, the values of that
  /// graph made since the snapshot (constants excepted) become untyped again.
  void Restore(ir::Graph* reset_added = nullptr) {
    for (Saved& s : saved_) {
      s.v->kind = s.kind;
      s.v->dtype = s.dtype;
      s.v->shape = std::move(s.shape);
    }
    if (reset_added == nullptr) return;
    std::vector<const ir::Value*> kept;
    for (const Saved& s : saved_) kept.push_back(s.v);
    std::sort(kept.begin(), kept.end());
    for (const auto& v : reset_added->values()) {
      if (v->constant || std::binary_search(kept.begin(), kept.end(), v.get())) continue;
      v->kind = ir::ValueKind::kTensor;
      v->dtype = DataType::kUndefined;
      v->shape = ir::Shape::Unknown();
    }
  }

 private:
  struct Saved {
    ir::Value* v;
    ir::ValueKind kind;
    DataType dtype;
    ir::Shape shape;
  };

  void Save(const ir::Graph& g) {
    for (const auto& v : g.values()) saved_.push_back({v.get(), v->kind, v->dtype, v->shape});
    for (const auto& n : g.nodes()) {
      for (const auto& [name, a] : n->attrs) {
        if (a.type == ir::Attribute::Type::kGraph && a.g) Save(*a.g);
      }
    }
  }

  std::vector<Saved> saved_;
};

}  // namespace kiln::import
