// The import of the model's graph and its subgraphs into the IR (onnx_importer_internal.h):
// initializers and inputs, scopes and captures, subgraphs, nodes, outputs and the declared
// shapes of outputs and value_infos.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops.h"
#include "engine/import/onnx_importer_internal.h"
#include "engine/import/op_schemas.h"
#include "engine/import/shape_inference.h"
#include "engine/import/tensor_proto.h"
#include "onnx/onnx_pb.h"

namespace kiln::import::importer_internal {

absl::Status Importer::ImportInitializersAndInputs() {
  const auto& g = model_.graph();
  if (g.sparse_initializer_size() > 0) {
    return absl::UnimplementedError("graph.sparse_initializer is not supported");
  }
  for (int i = 0; i < g.initializer_size(); ++i) {
    const auto& t = g.initializer(i);
    std::string what = absl::StrCat("initializer #", i, " '", t.name(), "'");
    if (t.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
    auto v = graph_->AddValue(t.name());
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate name"));
    ASSIGN_OR_RETURN(ir::Tensor tensor, TensorFromProto(t, ext_, what));
    // The graph owns the data now: free the proto's copy, so a big model is not held twice.
    std::string().swap(*model_.mutable_graph()->mutable_initializer(i)->mutable_raw_data());
    (*v)->dtype = tensor.dtype();
    (*v)->shape = ir::Shape::Of(tensor.dims());
    (*v)->constant = std::move(tensor);
  }
  for (int i = 0; i < g.input_size(); ++i) {
    const auto& in = g.input(i);
    std::string what = absl::StrCat("graph input #", i);
    if (in.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
    if (ir::Value* existing = graph_->FindValue(in.name())) {
      // IR < 4 lists initializers among the inputs; they stay constants (weights).
      if (existing->constant) continue;
      return absl::InvalidArgumentError(absl::StrCat(what, " '", in.name(), "': duplicate name"));
    }
    ASSIGN_OR_RETURN(ir::Value * v, graph_->AddValue(in.name()));
    RETURN_IF_ERROR(ReadValueInfo(in, what, v));
    if (v->dtype == DataType::kUndefined) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", in.name(), "' has no tensor element type"));
    }
    graph_->inputs().push_back(v);
  }
  return absl::OkStatus();
}

// The value `name` seen from `s`: its own, else an enclosing graph's, which becomes a capture
// of `s` (and of every graph between) or, for a weight, a constant of `s` sharing its bytes.
// nullptr when no graph in scope defines it.
ir::Value* Importer::Resolve(Scope& s, const std::string& name) {
  if (ir::Value* v = s.graph->FindValue(name)) return v;
  if (s.parent == nullptr) return nullptr;
  ir::Value* outer = Resolve(*s.parent, name);
  if (outer == nullptr) return nullptr;
  ir::Value* v = *s.graph->AddValue(name);  // FindValue said the name is free
  v->dtype = outer->dtype;
  v->kind = outer->kind;
  v->shape = outer->shape;
  if (outer->constant) {
    v->constant = outer->constant;
  } else {
    s.captured.push_back(name);
  }
  return v;
}

// Imports subgraph `gp` (attribute `attr` of `node`, in scope `s`): initializers, formal
// inputs (types optional: the op's shape inference fills them), nodes, outputs. Its captures
// are left in `sub.captured` for the caller to append.
absl::StatusOr<std::shared_ptr<ir::Graph>> Importer::ImportSubgraph(const onnx::GraphProto& gp,
                                                                    const std::string& attr,
                                                                    const ir::Node& node, Scope& s,
                                                                    Scope& sub) {
  const std::string where = absl::StrCat(node.Label(), " subgraph '", attr, "'");
  if (s.depth + 1 > ir::kMaxSubgraphDepth) {
    return Invalid(where, absl::StrCat("nests subgraphs deeper than ", ir::kMaxSubgraphDepth,
                                       " levels (the limit)"));
  }
  auto g = std::make_shared<ir::Graph>();
  g->set_opset(opset_);
  g->set_ir_version(model_.ir_version());
  g->set_name(absl::StrCat(node.name, "/", attr));
  sub.graph = g.get();
  sub.parent = &s;
  sub.prefix = absl::StrCat(node.name, "/", attr, "/");
  sub.depth = s.depth + 1;
  if (gp.sparse_initializer_size() > 0) {
    return absl::UnimplementedError(absl::StrCat(where, ": sparse initializers are not supported"));
  }
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& tp = gp.initializer(i);
    std::string what = absl::StrCat(where, " initializer #", i, " '", tp.name(), "'");
    if (tp.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
    auto v = g->AddValue(tp.name());
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate name"));
    ASSIGN_OR_RETURN(ir::Tensor tensor, TensorFromProto(tp, ext_, what));
    (*v)->dtype = tensor.dtype();
    (*v)->shape = ir::Shape::Of(tensor.dims());
    (*v)->constant = std::move(tensor);
  }
  for (int i = 0; i < gp.input_size(); ++i) {
    const auto& in = gp.input(i);
    std::string what = absl::StrCat(where, " input #", i);
    if (in.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
    auto v = g->AddValue(in.name());
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", in.name(), "': duplicate name"));
    }
    RETURN_IF_ERROR(ReadValueInfo(in, what, *v));
    g->inputs().push_back(*v);
  }
  RETURN_IF_ERROR(ImportNodes(gp.node(), sub));
  if (gp.output_size() == 0) return Invalid(where, "has no outputs");
  for (int i = 0; i < gp.output_size(); ++i) {
    const auto& out = gp.output(i);
    std::string what = absl::StrCat(where, " output #", i);
    ir::Value* v = Resolve(sub, out.name());
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", out.name(), "' is not defined in scope"));
    }
    ir::Value declared;
    RETURN_IF_ERROR(ReadValueInfo(out, what, &declared));
    if (v->dtype == DataType::kUndefined) {
      v->dtype = declared.dtype;
      v->kind = declared.kind;
    }
    if (!v->shape.rank_known) v->shape = declared.shape;
    bool produced = false;
    for (const auto& n : g->nodes()) {
      for (const ir::Value* o : n->outputs) produced |= o == v;
    }
    const bool repeated =
        std::find(g->outputs().begin(), g->outputs().end(), v) != g->outputs().end();
    if (!produced || repeated) {
      // An output that is an input, a capture, a weight or another output: one node makes
      // each output of a compiled subgraph, as of any engine.
      ASSIGN_OR_RETURN(ir::Value * copy, g->AddValue(absl::StrCat(out.name(), "::output", i)));
      copy->dtype = v->dtype;
      copy->kind = v->kind;
      copy->shape = v->shape;
      ir::Node* id = g->AddNode(ir::OpType::kIdentity, absl::StrCat(sub.prefix, "output", i));
      id->sources = {id->id};
      id->since_version = ResolveOpVersion(ir::OpType::kIdentity, opset_)->since_version;
      id->inputs = {v};
      id->outputs = {copy};
      v = copy;
    }
    g->outputs().push_back(v);
  }
  return g;
}

// Imports `nodes` into the graph of scope `s`: outputs, attributes (subgraphs included), then
// inputs (which may name outer-scope values in a subgraph).
absl::Status Importer::ImportNodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                                   Scope& s) {
  ir::Graph& graph = *s.graph;
  // Pass 1: every node output becomes a value, so inputs may refer to outputs of nodes that
  // come later in the list (a cycle is then caught by the topological sort).
  std::vector<ir::Node*> made;
  made.reserve(nodes.size());
  for (int i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    // com.microsoft nodes become placeholders, expanded by ExpandContribOps (contrib_ops.h).
    const bool contrib = IsContribNode(n.domain(), n.op_type(), opset_);
    ir::OpType op = contrib ? ir::OpType::kIdentity : *ir::OpFromName(n.domain(), n.op_type());
    ir::Node* node = graph.AddNode(op, absl::StrCat(s.prefix, NodeName(n, i)));
    node->sources = {node->id};
    std::string label = node->Label();
    OpVersion ver =
        contrib ? ContribPlaceholderVersion() : *ResolveOpVersion(op, DomainOpset(n.domain()));
    if (contrib) node->attrs[kContribOpAttr] = ir::Attribute::String(n.op_type());
    node->since_version = ver.since_version;
    if (n.input_size() < ver.min_inputs || n.input_size() > ver.max_inputs) {
      return Invalid(
          label, absl::StrCat("has ", n.input_size(), " inputs; ", n.op_type(), "-",
                              ver.since_version, " takes ", ver.min_inputs, "..", ver.max_inputs));
    }
    if (n.output_size() < ver.min_outputs || n.output_size() > ver.max_outputs) {
      return Invalid(label, absl::StrCat("has ", n.output_size(), " outputs; ", n.op_type(), "-",
                                         ver.since_version, " gives ", ver.min_outputs, "..",
                                         ver.max_outputs));
    }
    for (int o = 0; o < n.output_size(); ++o) {
      if (n.output(o).empty()) {
        node->outputs.push_back(nullptr);
        continue;
      }
      auto v = graph.AddValue(n.output(o));
      if (!v.ok()) {
        return Invalid(label, absl::StrCat("output ", o, " '", n.output(o),
                                           "' is already defined (duplicate name)"));
      }
      node->outputs.push_back(*v);
    }
    for (const auto& a : n.attribute()) {
      if (node->attrs.contains(a.name())) {
        return Invalid(label, absl::StrCat("attribute '", a.name(), "' is given twice"));
      }
      if (a.type() == onnx::AttributeProto::GRAPH) continue;  // pass 2, once outputs exist
      ASSIGN_OR_RETURN(node->attrs[a.name()], ConvertAttribute(a, label, ext_));
    }
    made.push_back(node);
  }
  // Pass 2: subgraphs, then inputs; a node's captures (the union over its subgraphs) follow
  // its own inputs and each subgraph's formal inputs.
  for (int i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    ir::Node* node = made[i];
    std::vector<std::pair<std::shared_ptr<ir::Graph>, Scope>> subgraphs;
    std::vector<std::string> captured;
    for (const auto& a : n.attribute()) {
      if (a.type() != onnx::AttributeProto::GRAPH) continue;
      const bool expected = (node->op == ir::OpType::kIf &&
                             (a.name() == "then_branch" || a.name() == "else_branch")) ||
                            ((node->op == ir::OpType::kLoop || node->op == ir::OpType::kScan ||
                              node->op == ir::OpType::kSequenceMap) &&
                             a.name() == "body") ||
                            (node->op == ir::OpType::kFlexAttention &&
                             (a.name() == "score_mod" || a.name() == "prob_mod"));
      if (!expected) {
        return Invalid(node->Label(),
                       absl::StrCat("attribute '", a.name(), "' is a subgraph, which ", n.op_type(),
                                    " does not take"));
      }
      if (!a.has_g()) {
        return Invalid(node->Label(), absl::StrCat("attribute '", a.name(), "' has no graph"));
      }
      Scope sub{nullptr, nullptr, "", 0, {}};
      ASSIGN_OR_RETURN(std::shared_ptr<ir::Graph> g,
                       ImportSubgraph(a.g(), a.name(), *node, s, sub));
      for (const std::string& c : sub.captured) {
        if (std::find(captured.begin(), captured.end(), c) == captured.end()) {
          captured.push_back(c);
        }
      }
      node->attrs[a.name()] = ir::Attribute::Subgraph(g);
      subgraphs.emplace_back(std::move(g), std::move(sub));
    }
    for (auto& [g, sub] : subgraphs) {
      for (const std::string& c : captured) {
        ir::Value* v = g->FindValue(c);
        if (v == nullptr) {  // captured by a sibling subgraph only: an input this one ignores
          v = *g->AddValue(c);
        }
        g->inputs().push_back(v);
      }
      g->RebuildEdges();
    }
    for (int k = 0; k < n.input_size(); ++k) {
      if (n.input(k).empty()) {
        node->inputs.push_back(nullptr);
        continue;
      }
      ir::Value* v = Resolve(s, n.input(k));
      if (v == nullptr) {
        return Invalid(node->Label(), absl::StrCat("input ", k, " '", n.input(k),
                                                   "' is not defined by any node, input or "
                                                   "initializer"));
      }
      node->inputs.push_back(v);
    }
    // Trailing omitted inputs carry no information; dropping them keeps num_inputs() honest.
    while (!node->inputs.empty() && node->inputs.back() == nullptr) node->inputs.pop_back();
    if (subgraphs.empty()) continue;
    for (const std::string& c : captured) node->inputs.push_back(Resolve(s, c));
    node->attrs[ir::kCapturedInputsAttr] =
        ir::Attribute::Int(static_cast<int64_t>(captured.size()));
  }
  return absl::OkStatus();
}

// True when a declared shape disagrees with the inferred one: another rank, or a dim static
// in both with two values (a symbol and a number, or two symbols, may agree at run time).
bool Importer::ShapesDisagree(const ir::Shape& declared, const ir::Shape& inferred) {
  if (!declared.rank_known || !inferred.rank_known) return false;
  if (declared.rank() != inferred.rank()) return true;
  for (int i = 0; i < declared.rank(); ++i) {
    const ir::Dim& a = declared.dims[i];
    const ir::Dim& b = inferred.dims[i];
    if (a.is_static() && b.is_static() && a.value != b.value) return true;
  }
  return false;
}

// Declared shapes as ONNX Runtime treats them: what inference gives wins, and a declaration
// that disagrees is a warning (Graph::import_warnings) naming the value and both shapes, never
// an error; where inference gives no shape, the declared one stays as a hint for the values
// after it. So inference runs here, without the hints and then with them (Run() infers once
// more, with them: the same shapes), and the declarations are compared with its result.
absl::Status Importer::ApplyDeclaredShapes(std::vector<Declaration>& decls) {
  graph_->RebuildEdges();
  ASSIGN_OR_RETURN(auto order, graph_->TopologicalOrder());
  RETURN_IF_ERROR(InferTypesAndShapes(*graph_, order));
  bool hinted = false;
  for (Declaration& d : decls) {
    if (d.value->shape.rank_known || !d.declared.shape.rank_known) continue;
    d.value->shape = d.declared.shape;
    hinted = true;
  }
  if (hinted) RETURN_IF_ERROR(InferTypesAndShapes(*graph_, order));
  std::vector<std::string> value_infos;
  for (const Declaration& d : decls) {
    if (!ShapesDisagree(d.declared.shape, d.value->shape)) continue;
    std::string msg = absl::StrCat(d.what, " is declared ", d.declared.shape.ToString(),
                                   " but shape inference gives ", d.value->shape.ToString());
    if (d.value->is_graph_output) {
      graph_->import_warnings().push_back(
          absl::StrCat(msg, "; the inferred shape is used (as ONNX Runtime does)"));
    } else {
      value_infos.push_back(std::move(msg));
    }
  }
  if (!value_infos.empty()) {
    size_t shown = std::min<size_t>(value_infos.size(), 8);
    graph_->import_warnings().push_back(
        absl::StrCat(value_infos.size(),
                     " value_info shape(s) disagree with shape inference, which is "
                     "used: ",
                     absl::StrJoin(value_infos.begin(), value_infos.begin() + shown, "; "),
                     value_infos.size() > shown ? "; ..." : ""));
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportOutputs() {
  const auto& g = model_.graph();
  if (g.output_size() == 0) return absl::InvalidArgumentError("graph has no outputs");
  std::vector<Declaration> decls;
  for (int i = 0; i < g.output_size(); ++i) {
    const auto& out = g.output(i);
    std::string what = absl::StrCat("graph output #", i, " '", out.name(), "'");
    ir::Value* v = graph_->FindValue(out.name());
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is not produced by any node"));
    }
    ir::Value declared;
    RETURN_IF_ERROR(ReadValueInfo(out, "graph output", &declared));
    decls.push_back({v, std::move(declared), std::move(what)});
    graph_->outputs().push_back(v);
  }
  absl::flat_hash_set<const ir::Value*> inputs(graph_->inputs().begin(), graph_->inputs().end());
  for (int i = 0; i < g.value_info_size(); ++i) {
    ir::Value* v = graph_->FindValue(g.value_info(i).name());
    if (v == nullptr || v->constant) continue;
    ir::Value declared;
    RETURN_IF_ERROR(ReadValueInfo(g.value_info(i), "value_info", &declared));
    if (inputs.contains(v)) {
      // A graph input: its own declaration holds; a value_info only fills in a missing shape.
      if (!v->shape.rank_known) v->shape = declared.shape;
      continue;
    }
    decls.push_back(
        {v, std::move(declared), absl::StrCat("value_info '", g.value_info(i).name(), "'")});
  }
  // Declared dtypes first: inference checks the dtype each op produces against them.
  for (Declaration& d : decls) {
    if (d.value->dtype != DataType::kUndefined) continue;
    d.value->dtype = d.declared.dtype;
    d.value->kind = d.declared.kind;
  }
  return ApplyDeclaredShapes(decls);
}

}  // namespace kiln::import::importer_internal
