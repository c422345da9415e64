#include "engine/import/shape_inference_control_flow.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference.h"
#include "engine/import/shape_inference_sequence.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Shape;

// The dims two shapes agree on; unknown where they differ, unknown rank when the ranks do.
Shape Merge(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank()) return Shape::Unknown();
  Shape out = a;
  for (int i = 0; i < a.rank(); ++i) {
    if (!(a.dims[i] == b.dims[i])) out.dims[i] = Dim{};
  }
  return out;
}

bool SameShape(const Shape& a, const Shape& b) {
  if (a.rank_known != b.rank_known) return false;
  if (!a.rank_known) return true;
  return a.dims == b.dims;
}

// `s` less its dim `axis` (a slice of a scanned tensor).
Shape Without(const Shape& s, int64_t axis) {
  if (!s.rank_known || axis < 0 || axis >= s.rank()) return Shape::Unknown();
  Shape out = s;
  out.dims.erase(out.dims.begin() + axis);
  return out;
}

// `s` with `d` inserted at `axis` (scan outputs stacked along it).
Shape With(const Shape& s, int64_t axis, const Dim& d) {
  if (!s.rank_known || axis < 0 || axis > s.rank()) return Shape::Unknown();
  Shape out = s;
  out.dims.insert(out.dims.begin() + axis, d);
  return out;
}

struct Subgraph {
  ir::Graph* g = nullptr;
  std::string where;  // "[node 'x' (If) #3] subgraph 'then_branch'"
};

absl::StatusOr<Subgraph> SubgraphOf(const ir::Node& n, const char* attr) {
  const ir::Attribute* a = n.attr(attr);
  if (a == nullptr || a->type != ir::Attribute::Type::kGraph) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " needs the subgraph attribute '", attr, "'"));
  }
  return Subgraph{a->g.get(), absl::StrCat(n.Label(), " subgraph '", attr, "'")};
}

// Gives subgraph input `i` the kind, dtype and shape the node feeds it; a declared dtype and
// kind must agree.
absl::Status Feed(const Subgraph& sub, int i, DataType dtype, const Shape& shape,
                  ir::ValueKind kind = ir::ValueKind::kTensor) {
  ir::Value* in = sub.g->inputs()[i];
  if (in->dtype != DataType::kUndefined) {
    std::optional<ir::ValueKind> merged = MergeKinds(in->kind, kind);
    if (!merged) {
      return absl::InvalidArgumentError(absl::StrCat(
          sub.where, " input #", i, " '", in->name, "' is declared ",
          ir::ValueTypeName(in->kind, in->dtype), " but is fed ", ir::ValueTypeName(kind, dtype)));
    }
    kind = *merged;
  }
  in->kind = kind;
  if (dtype != DataType::kUndefined && in->dtype != DataType::kUndefined && in->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(sub.where, " input #", i, " '", in->name,
                                                   "' is declared ", DataTypeOnnxName(in->dtype),
                                                   " but is fed ", DataTypeOnnxName(dtype)));
  }
  if (dtype != DataType::kUndefined) in->dtype = dtype;
  in->shape = shape;
  return absl::OkStatus();
}

// Checks the subgraph's arity, feeds its captured inputs (the node's last `captured` inputs) and
// returns how many formal inputs it has.
absl::StatusOr<int> CheckArity(const ir::Node& n, const Subgraph& sub, int formal_inputs,
                               int outputs) {
  const int captured = static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  if (captured < 0 || captured > n.num_inputs()) {
    return absl::InternalError(
        absl::StrCat(n.Label(), " has ", captured, " captured inputs of ", n.num_inputs()));
  }
  const int got = static_cast<int>(sub.g->inputs().size()) - captured;
  if (got != formal_inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(sub.where, " takes ", got, " inputs; the node feeds it ", formal_inputs));
  }
  if (static_cast<int>(sub.g->outputs().size()) != outputs) {
    return absl::InvalidArgumentError(absl::StrCat(sub.where, " gives ", sub.g->outputs().size(),
                                                   " outputs; the node needs ", outputs));
  }
  const int first = n.num_inputs() - captured;
  for (int j = 0; j < captured; ++j) {
    const ir::Value* outer = n.inputs[first + j];
    RETURN_IF_ERROR(Feed(sub, formal_inputs + j, outer->dtype, outer->shape, outer->kind));
  }
  return formal_inputs;
}

absl::Status InferSubgraph(const Subgraph& sub) {
  sub.g->RebuildEdges();
  auto order = sub.g->TopologicalOrder();
  if (!order.ok()) {
    return absl::Status(order.status().code(),
                        absl::StrCat(sub.where, ": ", order.status().message()));
  }
  absl::Status st = InferTypesAndShapes(*sub.g, *order);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(sub.where, ": ", st.message()));
  return absl::OkStatus();
}

// Sets output `k` of `n`; a declared dtype and kind must agree.
absl::Status SetOutput(ir::Node& n, int k, DataType dtype, const Shape& shape,
                       ir::ValueKind kind = ir::ValueKind::kTensor) {
  ir::Value* out = n.outputs[k];
  if (out == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(SetOutputKind(n, k, kind));
  if (dtype == DataType::kUndefined) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " output ", k, " '", out->name, "': dtype cannot be inferred"));
  }
  if (out->dtype != DataType::kUndefined && out->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.Label(), " output ", k, " '", out->name, "' is declared ", DataTypeOnnxName(out->dtype),
        " but the op produces ", DataTypeOnnxName(dtype)));
  }
  out->dtype = dtype;
  out->shape = shape;
  return absl::OkStatus();
}

absl::Status InferIf(ir::Node& n) {
  ASSIGN_OR_RETURN(Subgraph then_g, SubgraphOf(n, "then_branch"));
  ASSIGN_OR_RETURN(Subgraph else_g, SubgraphOf(n, "else_branch"));
  for (const Subgraph* sub : {&then_g, &else_g}) {
    RETURN_IF_ERROR(CheckArity(n, *sub, 0, n.num_outputs()).status());
    RETURN_IF_ERROR(InferSubgraph(*sub));
  }
  for (int k = 0; k < n.num_outputs(); ++k) {
    const ir::Value* a = then_g.g->outputs()[k];
    const ir::Value* b = else_g.g->outputs()[k];
    std::optional<ir::ValueKind> kind = MergeKinds(a->kind, b->kind);
    if (a->dtype != b->dtype || !kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          n.Label(), " output ", k, ": then_branch gives ", ir::ValueTypeName(a->kind, a->dtype),
          ", else_branch ", ir::ValueTypeName(b->kind, b->dtype)));
    }
    RETURN_IF_ERROR(SetOutput(n, k, a->dtype, Merge(a->shape, b->shape), *kind));
  }
  return absl::OkStatus();
}

// Loop-carried (Loop) or state (Scan) values: infer the body with the initial shapes, then again
// with the shapes merged with what the body gives back, until they agree (rank changes end as
// unknown rank, so three rounds always suffice).
absl::Status InferToFixedPoint(const Subgraph& body, int first_state_input, int first_state_output,
                               std::vector<Shape>& states, const std::vector<DataType>& dtypes,
                               std::vector<ir::ValueKind>& kinds) {
  for (int round = 0; round < 4; ++round) {
    for (size_t j = 0; j < states.size(); ++j) {
      RETURN_IF_ERROR(
          Feed(body, first_state_input + static_cast<int>(j), dtypes[j], states[j], kinds[j]));
    }
    RETURN_IF_ERROR(InferSubgraph(body));
    bool stable = true;
    for (size_t j = 0; j < states.size(); ++j) {
      const ir::Value* out = body.g->outputs()[first_state_output + j];
      if (out->dtype != dtypes[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat(body.where, " output #", first_state_output + j, " '", out->name, "' is ",
                         DataTypeOnnxName(out->dtype), " but carries a ",
                         DataTypeOnnxName(dtypes[j]), " value"));
      }
      // A carried sequence may come back from the body as a sequence where it went in as an
      // optional sequence (or the other way round): the value is the optional form.
      std::optional<ir::ValueKind> kind = MergeKinds(kinds[j], out->kind);
      if (!kind) {
        return absl::InvalidArgumentError(
            absl::StrCat(body.where, " output #", first_state_output + j, " '", out->name, "' is ",
                         ir::ValueTypeName(out->kind, out->dtype), " but carries a ",
                         ir::ValueTypeName(kinds[j], dtypes[j])));
      }
      if (*kind != kinds[j]) {
        kinds[j] = *kind;
        stable = false;
      }
      // Settled when what the body gives back adds nothing the carried shape does not allow
      // (a declared output shape more precise than the carried one keeps it as it is).
      Shape merged = Merge(states[j], out->shape);
      if (!SameShape(merged, states[j])) {
        states[j] = std::move(merged);
        stable = false;
      }
    }
    if (stable) return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(body.where, ": carried shapes did not settle"));
}

absl::Status InferLoop(ir::Node& n) {
  ASSIGN_OR_RETURN(Subgraph body, SubgraphOf(n, "body"));
  const int captured = static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  const int own = n.num_inputs() - captured;
  const int carried = std::max(0, own - 2);
  const int scanned = n.num_outputs() - carried;
  if (scanned < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.Label(), " has ", carried, " loop-carried inputs but ", n.num_outputs(), " outputs"));
  }
  if (const ir::Value* m = n.input(0); m && m->dtype != DataType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " input 0 (M, the trip count) must be int64"));
  }
  if (const ir::Value* c = n.input(1); c && c->dtype != DataType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), " input 1 (cond) must be bool"));
  }
  RETURN_IF_ERROR(CheckArity(n, body, 2 + carried, 1 + carried + scanned).status());
  RETURN_IF_ERROR(Feed(body, 0, DataType::kI64, Shape::Of({})));
  RETURN_IF_ERROR(Feed(body, 1, DataType::kBool, Shape::Of({})));
  std::vector<Shape> states;
  std::vector<DataType> dtypes;
  std::vector<ir::ValueKind> kinds;
  for (int j = 0; j < carried; ++j) {
    const ir::Value* v = n.input(2 + j);
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), " loop-carried input ", 2 + j, " is missing"));
    }
    states.push_back(v->shape);
    dtypes.push_back(v->dtype);
    kinds.push_back(v->kind);
  }
  RETURN_IF_ERROR(InferToFixedPoint(body, 2, 1, states, dtypes, kinds));
  const ir::Value* cond = body.g->outputs()[0];
  if (cond->dtype != DataType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        body.where, " output #0 (cond) must be bool, not ", DataTypeOnnxName(cond->dtype)));
  }
  for (int j = 0; j < carried; ++j) {
    RETURN_IF_ERROR(SetOutput(n, j, dtypes[j], states[j], kinds[j]));
  }
  for (int j = 0; j < scanned; ++j) {
    const ir::Value* out = body.g->outputs()[1 + carried + j];
    if (out->kind != ir::ValueKind::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat(body.where, " scan output #", 1 + carried + j, " '", out->name, "' is ",
                       ir::ValueTypeName(out->kind, out->dtype), ": Loop stacks tensors only"));
    }
    RETURN_IF_ERROR(SetOutput(n, carried + j, out->dtype, With(out->shape, 0, Dim{})));
  }
  return absl::OkStatus();
}

// An axis attribute entry, made non-negative against `rank` (unknown rank: as given when >= 0).
int64_t AxisOf(const std::vector<int64_t>& axes, size_t j, int rank) {
  int64_t a = j < axes.size() ? axes[j] : 0;
  if (a < 0 && rank >= 0) a += rank;
  return a;
}

absl::Status InferScan(ir::Node& n) {
  ASSIGN_OR_RETURN(Subgraph body, SubgraphOf(n, "body"));
  const int captured = static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  const bool v8 = n.since_version < 9;  // Scan-8: a batch axis and sequence_lens first
  const int first = v8 ? 1 : 0;
  const int own = n.num_inputs() - captured - first;
  const int64_t scan_inputs = n.GetInt("num_scan_inputs", -1);
  if (scan_inputs < 1 || scan_inputs > own) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), " attribute 'num_scan_inputs' is ",
                                                   scan_inputs, "; the node has ", own,
                                                   " state and scan inputs"));
  }
  const int states_n = own - static_cast<int>(scan_inputs);
  const int scan_outputs = n.num_outputs() - states_n;
  if (scan_outputs < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        n.Label(), " has ", states_n, " state inputs but ", n.num_outputs(), " outputs"));
  }
  const std::vector<int64_t> in_axes = n.GetInts("scan_input_axes");
  const std::vector<int64_t> out_axes = n.GetInts("scan_output_axes");
  if (v8 && (!in_axes.empty() || !out_axes.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " Scan-8 takes no scan axes attributes"));
  }
  for (const char* key : {"scan_input_axes", "scan_input_directions"}) {
    const std::vector<int64_t> v = n.GetInts(key);
    if (!v.empty() && static_cast<int64_t>(v.size()) != scan_inputs) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " attribute '", key, "' has ",
                                                     v.size(), " entries for ", scan_inputs,
                                                     " scan inputs"));
    }
  }
  for (const char* key : {"scan_output_axes", "scan_output_directions"}) {
    const std::vector<int64_t> v = n.GetInts(key);
    if (!v.empty() && static_cast<int>(v.size()) != scan_outputs) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " attribute '", key, "' has ",
                                                     v.size(), " entries for ", scan_outputs,
                                                     " scan outputs"));
    }
  }
  RETURN_IF_ERROR(
      CheckArity(n, body, states_n + static_cast<int>(scan_inputs), states_n + scan_outputs)
          .status());
  // Scan-8 drops the batch dim of every input and output for the body.
  Dim seq_len;
  for (int64_t j = 0; j < scan_inputs; ++j) {
    const ir::Value* v = n.input(first + states_n + static_cast<int>(j));
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), " scan input ", states_n + j, " is missing"));
    }
    Shape s = v8 ? Without(v->shape, 0) : v->shape;
    const int64_t axis = v8 ? 0 : AxisOf(in_axes, j, s.rank_known ? s.rank() : -1);
    if (s.rank_known && (axis < 0 || axis >= s.rank())) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " scan input ", states_n + j,
                                                     " of rank ", s.rank(), " has no axis ", axis));
    }
    if (s.rank_known && j == 0) seq_len = s.dims[axis];
    RETURN_IF_ERROR(Feed(body, states_n + static_cast<int>(j), v->dtype, Without(s, axis)));
  }
  std::vector<Shape> states;
  std::vector<DataType> dtypes;
  for (int j = 0; j < states_n; ++j) {
    const ir::Value* v = n.input(first + j);
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " state input ", j, " is missing"));
    }
    states.push_back(v8 ? Without(v->shape, 0) : v->shape);
    dtypes.push_back(v->dtype);
  }
  std::vector<ir::ValueKind> kinds(states.size(), ir::ValueKind::kTensor);
  RETURN_IF_ERROR(InferToFixedPoint(body, 0, 0, states, dtypes, kinds));
  Dim batch;
  if (v8) {
    for (int j = 0; j < own; ++j) {
      const ir::Value* v = n.input(first + j);
      if (v && v->shape.rank_known && v->shape.rank() > 0) batch = v->shape.dims[0];
    }
  }
  for (int j = 0; j < states_n; ++j) {
    RETURN_IF_ERROR(SetOutput(n, j, dtypes[j], v8 ? With(states[j], 0, batch) : states[j]));
  }
  for (int j = 0; j < scan_outputs; ++j) {
    const ir::Value* out = body.g->outputs()[states_n + j];
    const int rank = out->shape.rank_known ? out->shape.rank() + 1 : -1;
    const int64_t axis = AxisOf(out_axes, j, rank);
    Shape s = With(out->shape, axis, seq_len);
    if (v8) s = With(s, 0, batch);
    RETURN_IF_ERROR(SetOutput(n, states_n + j, out->dtype, s));
  }
  return absl::OkStatus();
}

// SequenceMap: the body runs once per element of the first input; each further input that is
// a sequence (of the same length) gives it one element too, each tensor is given whole; each
// body output becomes a sequence of what the runs give.
absl::Status InferSequenceMap(ir::Node& n) {
  ASSIGN_OR_RETURN(Subgraph body, SubgraphOf(n, "body"));
  const int own = n.num_inputs() - static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  RETURN_IF_ERROR(CheckArity(n, body, own, n.num_outputs()).status());
  for (int i = 0; i < own; ++i) {
    const ir::Value* v = n.input(i);
    if (v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " input ", i, " is missing"));
    }
    // A sequence's shape is its elements' (ir::Value): the body's input is one of them.
    RETURN_IF_ERROR(Feed(body, i, v->dtype, v->shape));
  }
  RETURN_IF_ERROR(InferSubgraph(body));
  for (int k = 0; k < n.num_outputs(); ++k) {
    const ir::Value* out = body.g->outputs()[k];
    if (out->kind != ir::ValueKind::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat(body.where, " output #", k, " '", out->name, "' is ",
                       ir::ValueTypeName(out->kind, out->dtype), ": SequenceMap collects tensors"));
    }
    RETURN_IF_ERROR(SetOutput(n, k, out->dtype, out->shape, ir::ValueKind::kSequence));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsControlFlow(ir::OpType op) { return ir::HasSubgraphs(op); }

absl::Status InferControlFlow(ir::Node& n) {
  for (const auto& [key, a] : n.attrs) {
    if (a.type == ir::Attribute::Type::kGraph && a.g == nullptr) return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckInputKinds(n));
  switch (n.op) {
    case ir::OpType::kIf:
      return InferIf(n);
    case ir::OpType::kLoop:
      return InferLoop(n);
    case ir::OpType::kScan:
      return InferScan(n);
    case ir::OpType::kSequenceMap:
      return InferSequenceMap(n);
    default:
      return absl::InternalError(absl::StrCat(n.Label(), " is not a control-flow op"));
  }
}

}  // namespace kiln::import
