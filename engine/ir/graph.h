// The IR: a graph of nodes connected by named values. Values carry dtype and (possibly partly
// symbolic) shape; initializers are values with a constant tensor. Node ids are stable indices
// into Graph::nodes() in ONNX order; `Graph::TopologicalOrder()` gives execution order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/attribute.h"
#include "engine/ir/op_type.h"
#include "engine/ir/tensor.h"

namespace kiln::ir {

/// One dimension: a static size (>= 0) or a symbol (value < 0; `symbol` may be empty when the
/// dim is simply unknown).
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool is_static() const { return value >= 0; }
  static Dim Static(int64_t v) { return Dim{v, {}}; }
  static Dim Symbol(std::string s) { return Dim{-1, std::move(s)}; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
};

/// A shape whose rank may be unknown.
struct Shape {
  bool rank_known = false;
  std::vector<Dim> dims;

  static Shape Unknown() { return Shape{}; }
  static Shape Of(const std::vector<int64_t>& d);
  int rank() const { return static_cast<int>(dims.size()); }
  bool is_static() const;
  /// The static dims; only valid when is_static().
  std::vector<int64_t> StaticDims() const;
  std::string ToString() const;
};

class Node;

/// The ONNX type of a value: a tensor (nearly always), a sequence of tensors (seq(tensor)), or
/// an optional tensor or sequence. A value's `dtype` and `shape` describe the tensor, or each
/// element of the sequence. At run time a sequence is a Tensor of kind kSequence and an empty
/// optional one of kind kNone (ir/tensor.h).
enum class ValueKind : uint8_t { kTensor, kSequence, kOptionalTensor, kOptionalSequence };

/// "tensor", "sequence", "optional tensor", "optional sequence".
const char* ValueKindName(ValueKind k);
/// The ONNX spelling of a value's type: "tensor(float)", "seq(tensor(float))",
/// "optional(seq(tensor(int64)))".
std::string ValueTypeName(ValueKind k, DataType dtype);
inline bool IsOptionalKind(ValueKind k) {
  return k == ValueKind::kOptionalTensor || k == ValueKind::kOptionalSequence;
}
/// kSequence for kSequence and kOptionalSequence, else kTensor: what an optional holds.
inline ValueKind ElementKind(ValueKind k) {
  return k == ValueKind::kSequence || k == ValueKind::kOptionalSequence ? ValueKind::kSequence
                                                                        : ValueKind::kTensor;
}

/// True for the ops of sequences and optionals (SequenceConstruct, SequenceAt, SplitToSequence,
/// ConcatFromSequence, SequenceMap, Optional, OptionalGetElement, ...).
bool IsContainerOp(OpType op);

/// True for the ops whose attributes hold subgraphs (If, Loop, Scan, SequenceMap): the import,
/// the build and the runtime handle them as graphs of their own.
bool HasSubgraphs(OpType op);

/// A named value: graph input, initializer, or node output.
struct Value {
  int id = -1;
  std::string name;
  ValueKind kind = ValueKind::kTensor;
  DataType dtype = DataType::kUndefined;
  Shape shape;
  Node* producer = nullptr;
  int producer_output = -1;
  std::vector<Node*> consumers;
  std::optional<Tensor> constant;  // set for initializers (and folded constants)
  bool is_graph_input = false;
  bool is_graph_output = false;
};

/// One op instance.
class Node {
 public:
  int id = -1;  // index in Graph::nodes(); also the ONNX node index right after import
  std::string name;
  OpType op = OpType::kIdentity;
  int since_version = 0;        // the ONNX op version resolved for the model's opset
  std::vector<Value*> inputs;   // nullptr for an omitted optional input
  std::vector<Value*> outputs;  // nullptr for an omitted optional output
  absl::flat_hash_map<std::string, Attribute> attrs;
  /// The source ONNX nodes (import indices) this node implements: {id} after import, several
  /// after a fusion, none for nodes a pass inserted (conversions).
  std::vector<int> sources;
  /// The fusion that produced this node ("layernorm", "matmul+bias+gelu", ...); empty otherwise.
  std::string fusion;

  /// "[node 'conv1' (Conv) #12]": the context every node error message starts with.
  std::string Label() const;
  /// True when the node is a sequence/optional op or reads or writes a sequence or an optional
  /// (Identity, If, Loop passing one on): such nodes run at their authored types.
  bool TouchesContainers() const;
  /// True when an attribute holds a subgraph (If, Loop, Scan, SequenceMap, FlexAttention's
  /// score_mod...): such a node runs only where its subgraphs can (never in constant folding).
  bool HasSubgraphAttributes() const;

  const Attribute* attr(const std::string& key) const;
  bool has_attr(const std::string& key) const { return attr(key) != nullptr; }
  int64_t GetInt(const std::string& key, int64_t dflt) const;
  float GetFloat(const std::string& key, float dflt) const;
  std::string GetString(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> GetInts(const std::string& key, std::vector<int64_t> dflt = {}) const;
  std::vector<float> GetFloats(const std::string& key, std::vector<float> dflt = {}) const;

  /// The input at `i`, or nullptr when absent or omitted.
  const Value* input(int i) const {
    return i < static_cast<int>(inputs.size()) ? inputs[i] : nullptr;
  }
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  int num_outputs() const { return static_cast<int>(outputs.size()); }
};

/// The graph owns nodes and values.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Creates a value; fails if the name is taken.
  absl::StatusOr<Value*> AddValue(const std::string& name);
  Value* FindValue(const std::string& name) const;
  /// Gives `v` a new name; fails if the name is taken.
  absl::Status RenameValue(Value* v, const std::string& new_name);
  Node* AddNode(OpType op, std::string name);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  std::vector<Value*>& inputs() { return inputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }

  /// A structural copy: same ids, names, attributes and edges; constant tensors share their
  /// buffers with this graph's (passes replace constants, they never write into them).
  std::unique_ptr<Graph> Clone() const;

  /// Connects producers/consumers from node inputs/outputs (call after building).
  void RebuildEdges();

  /// Removes the nodes whose id has `remove[id]` set, renumbers the rest (ids stay indices into
  /// nodes(), in their previous relative order) and rebuilds the edges. Values are kept.
  void RemoveNodes(const std::vector<bool>& remove);

  /// Kahn order (ties by node id, so ONNX order is kept when valid). Fails naming a node on a
  /// cycle. O(nodes + edges).
  absl::StatusOr<std::vector<Node*>> TopologicalOrder() const;

  int64_t opset() const { return opset_; }
  void set_opset(int64_t v) { opset_ = v; }
  int64_t ir_version() const { return ir_version_; }
  void set_ir_version(int64_t v) { ir_version_ = v; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  /// What the import accepted but a user should hear about (a declared shape that inference
  /// overrides, ...): build warnings, carried with the graph to the build.
  std::vector<std::string>& import_warnings() { return import_warnings_; }
  const std::vector<std::string>& import_warnings() const { return import_warnings_; }

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  absl::flat_hash_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  int64_t opset_ = 0;
  int64_t ir_version_ = 0;
  std::string name_;
  std::vector<std::string> import_warnings_;
};

}  // namespace kiln::ir
