// Node attributes (the subset of ONNX attribute kinds Kiln's ops use, subgraphs included).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/ir/tensor.h"

namespace kiln::ir {

class Graph;

/// One attribute value; `type` says which member holds it.
struct Attribute {
  /// kGraph: a subgraph (If's branches, Loop's and Scan's body). During a build `g` holds it;
  /// once the builder has compiled it, `s` holds its engine blob (plan/engine_blob.h), which is
  /// all a loaded engine keeps.
  enum class Type { kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings, kGraph };
  Type type = Type::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<Graph> g;

  static Attribute Int(int64_t v) {
    Attribute a;
    a.type = Type::kInt;
    a.i = v;
    return a;
  }
  static Attribute Float(float v) {
    Attribute a;
    a.type = Type::kFloat;
    a.f = v;
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.type = Type::kString;
    a.s = std::move(v);
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = Type::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Subgraph(std::shared_ptr<Graph> graph) {
    Attribute a;
    a.type = Type::kGraph;
    a.g = std::move(graph);
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.type = Type::kFloats;
    a.floats = std::move(v);
    return a;
  }
};

/// Deepest nesting of subgraphs (If inside Loop inside If ...) Kiln imports, builds and runs:
/// the model's graph is depth 0. Exporters write a few levels; the bound keeps a hostile model
/// from exhausting the stack of the import, the build or the run.
inline constexpr int kMaxSubgraphDepth = 16;

/// The int attribute of an If / Loop / Scan node counting the values its subgraphs take from
/// enclosing graphs: they are the node's last inputs, and each subgraph's last graph inputs, in
/// the same order (the import makes outer-scope references explicit).
inline constexpr char kCapturedInputsAttr[] = "kiln_captured";

/// Name of an attribute kind ("ints", ...), for error messages.
const char* AttributeTypeName(Attribute::Type t);

}  // namespace kiln::ir
