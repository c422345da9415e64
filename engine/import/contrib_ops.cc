// The expansion of com.microsoft contrib ops at import (contrib_ops.h): the placeholder walk, the
// table of expanders (one file per family: contrib_ops_norm.cc, contrib_ops_attention.cc,
// contrib_ops_quant.cc) and the node / constant builders they share.
#include "engine/import/contrib_ops.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops_internal.h"
#include "engine/import/op_schemas.h"
#include "engine/import/shape_inference.h"
#include "engine/import/type_snapshot.h"

namespace kiln::import {
namespace contrib {

Expansion::Expansion(ir::Graph& g, ir::Node& placeholder, std::string op_type)
    : g_(g),
      placeholder_(placeholder),
      op_(std::move(op_type)),
      name_(placeholder.name),
      id_(placeholder.id),
      ins_(placeholder.inputs),
      outs_(placeholder.outputs),
      attrs_(placeholder.attrs) {
  attrs_.erase(kContribOpAttr);
}

std::string Expansion::Label() const {
  return absl::StrCat("[node '", name_, "' (", kContribDomain, ".", op_, ") #", id_, "]");
}

int64_t Expansion::Int(const std::string& key, int64_t dflt) const {
  auto it = attrs_.find(key);
  return it == attrs_.end() ? dflt : it->second.i;
}

float Expansion::Float(const std::string& key, float dflt) const {
  auto it = attrs_.find(key);
  return it == attrs_.end() ? dflt : it->second.f;
}

std::string Expansion::Str(const std::string& key, const std::string& dflt) const {
  auto it = attrs_.find(key);
  return it == attrs_.end() ? dflt : it->second.s;
}

std::vector<int64_t> Expansion::Ints(const std::string& key) const {
  auto it = attrs_.find(key);
  return it == attrs_.end() ? std::vector<int64_t>{} : it->second.ints;
}

absl::Status Expansion::Invalid(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(Label(), " ", what));
}

absl::Status Expansion::Unsupported(const std::string& what) const {
  return absl::UnimplementedError(absl::StrCat(Label(), " unsupported: ", what));
}

absl::Status Expansion::Arity(int min_in, int max_in, int min_out, int max_out) const {
  if (num_inputs() < min_in || num_inputs() > max_in) {
    return Invalid(absl::StrCat("has ", num_inputs(), " inputs; ", kContribDomain, ".", op_,
                                " takes ", min_in, "..", max_in));
  }
  if (num_outputs() < min_out || num_outputs() > max_out) {
    return Invalid(absl::StrCat("has ", num_outputs(), " outputs; ", kContribDomain, ".", op_,
                                " gives ", min_out, "..", max_out));
  }
  for (int i = 0; i < min_out; ++i) {
    if (out(i) == nullptr) return Invalid(absl::StrCat("output ", i, " must not be omitted"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Value*> Expansion::Required(int i, const std::string& what) const {
  if (in(i) == nullptr) return Invalid(absl::StrCat("input ", i, " (", what, ") is required"));
  return in(i);
}

absl::StatusOr<const ir::Tensor*> Expansion::ConstantInput(int i, const std::string& what) const {
  ASSIGN_OR_RETURN(ir::Value * v, Required(i, what));
  if (!v->constant) {
    return Unsupported(absl::StrCat("input ", i, " (", what, ") '", v->name,
                                    "' must be a constant (an initializer): Kiln transforms it "
                                    "at import"));
  }
  return &*v->constant;
}

absl::StatusOr<DataType> Expansion::FloatType(int i, const std::string& what) const {
  ASSIGN_OR_RETURN(ir::Value * v, Required(i, what));
  if (v->dtype == DataType::kUndefined) {
    return Invalid(absl::StrCat("input ", i, " (", what, ") '", v->name,
                                "' has no known dtype (shape inference gives none before it)"));
  }
  if (!IsFloating(v->dtype)) {
    return Invalid(absl::StrCat("input ", i, " (", what, ") '", v->name, "' is ",
                                DataTypeOnnxName(v->dtype), "; a floating type is required"));
  }
  return v->dtype;
}

int Expansion::RankOf(int i) const {
  const ir::Value* v = in(i);
  if (v == nullptr) return -1;
  if (v->constant) return v->constant->rank();
  return v->shape.rank_known ? v->shape.rank() : -1;
}

absl::StatusOr<ir::Value*> Expansion::Temp(const std::string& part) {
  const std::string base = absl::StrCat(name_, "/", part);
  for (int k = 0;; ++k) {
    std::string n = k == 0 ? base : absl::StrCat(base, "_", k);
    if (g_.FindValue(n) == nullptr) return g_.AddValue(n);
  }
}

absl::StatusOr<ir::Node*> Expansion::Node(
    ir::OpType op, const std::string& part, std::vector<ir::Value*> inputs,
    std::vector<ir::Value*> outputs, std::vector<std::pair<std::string, ir::Attribute>> attrs) {
  auto ver = ResolveOpVersion(op, kEmitOpset);
  if (!ver) {
    return absl::InternalError(absl::StrCat(Label(), " expansion emits ", ir::OpName(op),
                                            ", absent at opset ", kEmitOpset));
  }
  // The first part reuses the placeholder, so the contrib node's import index stays a node.
  ir::Node* n = made_.empty() ? &placeholder_ : g_.AddNode(op, "");
  n->op = op;
  n->name = absl::StrCat(name_, "/", part);
  n->since_version = ver->since_version;
  n->sources = {n->id};
  n->inputs = std::move(inputs);
  while (!n->inputs.empty() && n->inputs.back() == nullptr) n->inputs.pop_back();
  n->outputs = std::move(outputs);
  n->attrs.clear();
  for (auto& [k, a] : attrs) n->attrs[k] = std::move(a);
  n->fusion.clear();
  made_.push_back(n);
  return n;
}

absl::StatusOr<ir::Value*> Expansion::Op(ir::OpType op, const std::string& part,
                                         std::vector<ir::Value*> inputs,
                                         std::vector<std::pair<std::string, ir::Attribute>> attrs,
                                         ir::Value* out) {
  if (out == nullptr) {
    ASSIGN_OR_RETURN(out, Temp(part));
  }
  RETURN_IF_ERROR(Node(op, part, std::move(inputs), {out}, std::move(attrs)).status());
  return out;
}

absl::StatusOr<ir::Value*> Expansion::Const(const std::string& part, ir::Tensor t) {
  ASSIGN_OR_RETURN(ir::Value * v, Temp(part));
  v->dtype = t.dtype();
  v->shape = ir::Shape::Of(t.dims());
  v->constant = std::move(t);
  return v;
}

absl::StatusOr<ir::Value*> Expansion::I64s(const std::string& part,
                                           const std::vector<int64_t>& values) {
  ASSIGN_OR_RETURN(ir::Tensor t,
                   ir::Tensor::Allocate(DataType::kI64, {static_cast<int64_t>(values.size())}));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return Const(part, std::move(t));
}

absl::StatusOr<ir::Value*> Expansion::FloatConst(const std::string& part, DataType dt, double v,
                                                 std::vector<int64_t> dims) {
  const int64_t n = ir::NumElementsOf(dims);
  ASSIGN_OR_RETURN(ir::Tensor t,
                   FloatTensor(dt, std::move(dims), std::vector<float>(n, static_cast<float>(v))));
  if (dt == DataType::kF64) {
    for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = v;  // no float rounding
  }
  return Const(part, std::move(t));
}

absl::StatusOr<ir::Tensor> FloatTensor(DataType dt, std::vector<int64_t> dims,
                                       const std::vector<float>& values) {
  ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(dt, std::move(dims)));
  if (static_cast<int64_t>(values.size()) != t.num_elements()) {
    return absl::InternalError("FloatTensor: value count does not match the dims");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dt) {
      case DataType::kF32:
        t.data<float>()[i] = values[i];
        break;
      case DataType::kF64:
        t.data<double>()[i] = values[i];
        break;
      case DataType::kF16:
        t.data<uint16_t>()[i] = FloatToHalfBits(values[i]);
        break;
      case DataType::kBF16:
        t.data<uint16_t>()[i] = FloatToBFloat16Bits(values[i]);
        break;
      default:
        return absl::InternalError(
            absl::StrCat("FloatTensor: ", DataTypeOnnxName(dt), " is not floating"));
    }
  }
  return t;
}

const ExpanderTable& Table() {
  static const auto* table = [] {
    auto* t = new ExpanderTable;
    AddNormActivationExpanders(*t);
    AddAttentionExpanders(*t);
    AddQuantizedExpanders(*t);
    return t;
  }();
  return *table;
}

}  // namespace contrib

namespace {

bool IsPlaceholder(const ir::Node& n) {
  const ir::Attribute* a = n.attr(kContribOpAttr);
  return a != nullptr && a->type == ir::Attribute::Type::kString;
}

bool HasPlaceholder(const ir::Graph& g) {
  for (const auto& n : g.nodes()) {
    if (IsPlaceholder(*n)) return true;
    for (const auto& [name, a] : n->attrs) {
      if (a.type == ir::Attribute::Type::kGraph && a.g && HasPlaceholder(*a.g)) return true;
    }
  }
  return false;
}

absl::Status ExpandGraph(ir::Graph& g, std::vector<std::string>& notes) {
  g.RebuildEdges();
  ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g.TopologicalOrder());
  for (ir::Node* n : order) {
    for (auto& [name, a] : n->attrs) {
      if (a.type == ir::Attribute::Type::kGraph && a.g) RETURN_IF_ERROR(ExpandGraph(*a.g, notes));
    }
    if (!IsPlaceholder(*n)) {
      // Types and shapes as far as inference gives them, for the dtypes and ranks the
      // expansions read; a failure is left to the import's own inference, which reports it.
      InferTypesAndShapes(g, {n}).IgnoreError();
      continue;
    }
    const std::string op = n->attr(kContribOpAttr)->s;
    contrib::Expansion e(g, *n, op);
    auto it = contrib::Table().find(op);
    if (it == contrib::Table().end()) {
      return absl::UnimplementedError(absl::StrCat("unsupported op: ", e.Label(), " op ", op,
                                                   " of domain '", kContribDomain, "'"));
    }
    RETURN_IF_ERROR(it->second(e));
    if (e.made().empty()) {
      return absl::InternalError(absl::StrCat(e.Label(), " expanded into no node"));
    }
    g.RebuildEdges();
    for (int o = 0; o < e.num_outputs(); ++o) {
      const ir::Value* v = e.out(o);
      if (v != nullptr && v->producer == nullptr && !v->constant) {
        return absl::InternalError(
            absl::StrCat(e.Label(), " expansion does not produce output ", o, " '", v->name, "'"));
      }
    }
    InferTypesAndShapes(g, e.made()).IgnoreError();
    notes.push_back(absl::StrCat(e.name(), " (", op, ", ", e.made().size(), " nodes)"));
  }
  g.RebuildEdges();
  return absl::OkStatus();
}

}  // namespace

bool IsContribDomain(absl::string_view domain) { return domain == kContribDomain; }

bool IsContribNode(absl::string_view domain, absl::string_view op_type, int default_opset) {
  if (IsContribDomain(domain)) return true;
  if (!domain.empty() && domain != "ai.onnx") return false;
  return op_type == "SimplifiedLayerNormalization" ||
         (op_type == "LayerNormalization" && default_opset > 0 && default_opset < 17);
}

OpVersion ContribPlaceholderVersion() {
  return OpVersion{ir::OpType::kIdentity, 1, 0, 1 << 20, 0, 1 << 20};
}

bool IsSupportedContribOp(absl::string_view op_type) {
  return contrib::Table().contains(std::string(op_type));
}

absl::Status ExpandContribOps(ir::Graph& graph) {
  if (!HasPlaceholder(graph)) return absl::OkStatus();
  TypeSnapshot types(graph);
  std::vector<std::string> notes;
  RETURN_IF_ERROR(ExpandGraph(graph, notes));
  // Reset what the walk inferred, so that the import's inference (with the declarations) decides;
  // the values the expansions added are reset too, constants excepted.
  types.Restore(&graph);
  const size_t shown = std::min<size_t>(notes.size(), 8);
  graph.import_warnings().push_back(
      absl::StrCat(notes.size(), " node(s) of domain ", kContribDomain,
                   " (ONNX Runtime contrib ops) expanded into default-domain ops at import: ",
                   absl::StrJoin(notes.begin(), notes.begin() + shown, "; "),
                   notes.size() > shown ? "; ..." : ""));
  return absl::OkStatus();
}

}  // namespace kiln::import
