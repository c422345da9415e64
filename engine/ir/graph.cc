#include "engine/ir/graph.h"

#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::ir {

const char* ValueKindName(ValueKind k) {
  switch (k) {
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kSequence:
      return "sequence";
    case ValueKind::kOptionalTensor:
      return "optional tensor";
    case ValueKind::kOptionalSequence:
      return "optional sequence";
  }
  return "?";
}

bool IsContainerOp(OpType op) {
  switch (op) {
    case OpType::kSequenceEmpty:
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert:
    case OpType::kSequenceErase:
    case OpType::kSequenceAt:
    case OpType::kSequenceLength:
    case OpType::kSplitToSequence:
    case OpType::kConcatFromSequence:
    case OpType::kSequenceMap:
    case OpType::kOptional:
    case OpType::kOptionalHasElement:
    case OpType::kOptionalGetElement:
      return true;
    default:
      return false;
  }
}

bool HasSubgraphs(OpType op) {
  return op == OpType::kIf || op == OpType::kLoop || op == OpType::kScan ||
         op == OpType::kSequenceMap;
}

bool Node::TouchesContainers() const {
  if (IsContainerOp(op)) return true;
  for (const Value* v : inputs) {
    if (v && v->kind != ValueKind::kTensor) return true;
  }
  for (const Value* v : outputs) {
    if (v && v->kind != ValueKind::kTensor) return true;
  }
  return false;
}

bool Node::HasSubgraphAttributes() const {
  for (const auto& [key, a] : attrs) {
    if (a.type == Attribute::Type::kGraph) return true;
  }
  return false;
}

std::string ValueTypeName(ValueKind k, DataType dtype) {
  std::string t = absl::StrCat("tensor(", DataTypeOnnxName(dtype), ")");
  if (ElementKind(k) == ValueKind::kSequence) t = absl::StrCat("seq(", t, ")");
  if (IsOptionalKind(k)) t = absl::StrCat("optional(", t, ")");
  return t;
}

const char* AttributeTypeName(Attribute::Type t) {
  switch (t) {
    case Attribute::Type::kFloat:
      return "float";
    case Attribute::Type::kInt:
      return "int";
    case Attribute::Type::kString:
      return "string";
    case Attribute::Type::kTensor:
      return "tensor";
    case Attribute::Type::kFloats:
      return "floats";
    case Attribute::Type::kInts:
      return "ints";
    case Attribute::Type::kStrings:
      return "strings";
    case Attribute::Type::kGraph:
      return "graph";
  }
  return "?";
}

Shape Shape::Of(const std::vector<int64_t>& d) {
  Shape s;
  s.rank_known = true;
  for (int64_t v : d) s.dims.push_back(Dim::Static(v));
  return s;
}

bool Shape::is_static() const {
  if (!rank_known) return false;
  for (const Dim& d : dims) {
    if (!d.is_static()) return false;
  }
  return true;
}

std::vector<int64_t> Shape::StaticDims() const {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) out.push_back(d.value);
  return out;
}

std::string Shape::ToString() const {
  if (!rank_known) return "[?]";
  std::vector<std::string> parts;
  for (const Dim& d : dims) {
    parts.push_back(d.is_static() ? absl::StrCat(d.value) : (d.symbol.empty() ? "?" : d.symbol));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::string Node::Label() const {
  return absl::StrCat("[node '", name, "' (", OpName(op), ") #", id, "]");
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::GetInt(const std::string& key, int64_t dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == Attribute::Type::kInt ? a->i : dflt;
}

float Node::GetFloat(const std::string& key, float dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == Attribute::Type::kFloat ? a->f : dflt;
}

std::string Node::GetString(const std::string& key, const std::string& dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == Attribute::Type::kString ? a->s : dflt;
}

std::vector<int64_t> Node::GetInts(const std::string& key, std::vector<int64_t> dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == Attribute::Type::kInts ? a->ints : dflt;
}

std::vector<float> Node::GetFloats(const std::string& key, std::vector<float> dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == Attribute::Type::kFloats ? a->floats : dflt;
}

absl::StatusOr<Value*> Graph::AddValue(const std::string& name) {
  if (!name.empty() && by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate value name '", name, "'"));
  }
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = name;
  Value* p = v.get();
  values_.push_back(std::move(v));
  if (!name.empty()) by_name_[name] = p;
  return p;
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::Status Graph::RenameValue(Value* v, const std::string& new_name) {
  if (by_name_.contains(new_name)) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate value name '", new_name, "'"));
  }
  by_name_.erase(v->name);
  v->name = new_name;
  by_name_[new_name] = v;
  return absl::OkStatus();
}

Node* Graph::AddNode(OpType op, std::string name) {
  auto n = std::make_unique<Node>();
  n->id = static_cast<int>(nodes_.size());
  n->op = op;
  n->name = std::move(name);
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>();
  for (const auto& v : values_) {
    auto c = std::make_unique<Value>(*v);
    c->producer = nullptr;
    c->consumers.clear();
    if (!c->name.empty()) g->by_name_[c->name] = c.get();
    g->values_.push_back(std::move(c));
  }
  auto map = [&](const Value* v) { return v ? g->values_[v->id].get() : nullptr; };
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>(*n);
    // Passes rewrite subgraphs in place, as they do the graph: each copy has its own.
    for (auto& [key, a] : c->attrs) {
      if (a.g) a.g = a.g->Clone();
    }
    for (Value*& v : c->inputs) v = map(v);
    for (Value*& v : c->outputs) v = map(v);
    g->nodes_.push_back(std::move(c));
  }
  for (const Value* v : inputs_) g->inputs_.push_back(map(v));
  for (const Value* v : outputs_) g->outputs_.push_back(map(v));
  g->opset_ = opset_;
  g->ir_version_ = ir_version_;
  g->name_ = name_;
  g->import_warnings_ = import_warnings_;
  g->RebuildEdges();
  return g;
}

void Graph::RebuildEdges() {
  for (auto& v : values_) {
    v->producer = nullptr;
    v->producer_output = -1;
    v->consumers.clear();
    v->is_graph_input = false;
    v->is_graph_output = false;
  }
  for (auto& n : nodes_) {
    for (int i = 0; i < n->num_outputs(); ++i) {
      if (n->outputs[i]) {
        n->outputs[i]->producer = n.get();
        n->outputs[i]->producer_output = i;
      }
    }
    for (Value* in : n->inputs) {
      if (in && (in->consumers.empty() || in->consumers.back() != n.get())) {
        in->consumers.push_back(n.get());
      }
    }
  }
  for (Value* v : inputs_) v->is_graph_input = true;
  for (Value* v : outputs_) v->is_graph_output = true;
}

void Graph::RemoveNodes(const std::vector<bool>& remove) {
  std::vector<std::unique_ptr<Node>> kept;
  kept.reserve(nodes_.size());
  for (auto& n : nodes_) {
    if (n->id < static_cast<int>(remove.size()) && remove[n->id]) continue;
    n->id = static_cast<int>(kept.size());
    kept.push_back(std::move(n));
  }
  nodes_ = std::move(kept);
  RebuildEdges();
}

absl::StatusOr<std::vector<Node*>> Graph::TopologicalOrder() const {
  std::vector<int> pending(nodes_.size(), 0);
  for (const auto& n : nodes_) {
    for (const Value* in : n->inputs) {
      if (in && in->producer) ++pending[n->id];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (const auto& n : nodes_) {
    if (pending[n->id] == 0) ready.push(n->id);
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = nodes_[ready.top()].get();
    ready.pop();
    order.push_back(n);
    for (const Value* out : n->outputs) {
      if (!out) continue;
      for (Node* c : out->consumers) {
        // A consumer may use the same value in several input slots; count each slot.
        for (const Value* in : c->inputs) {
          if (in == out && --pending[c->id] == 0) ready.push(c->id);
        }
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_) {
      if (pending[n->id] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(n->Label(), " is part of a cycle: the graph is not a DAG"));
      }
    }
  }
  return order;
}

}  // namespace kiln::ir
