#include "engine/import/legacy_ops.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/op_schemas.h"
#include "engine/import/shape_inference.h"
#include "engine/import/type_snapshot.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

using ir::OpType;

std::string VersionName(OpType op, int since) { return absl::StrCat(ir::OpName(op), "-", since); }

// The old form of `n` (still at its old since_version) has no faithful opset-7 form.
absl::Status Unadaptable(const ir::Node& n, int opset, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat(
      n.Label(), " unsupported op version: ", VersionName(n.op, n.since_version), " (opset ", opset,
      ") cannot be imported in its opset-", kLegacyTargetOpset, " form: ", why));
}

absl::Status BadNode(const ir::Node& n, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(n.Label(), " ", VersionName(n.op, n.since_version), ": ", why));
}

std::optional<int> RankOf(const ir::Value* v) {
  if (v == nullptr) return std::nullopt;
  if (v->constant) return v->constant->rank();
  if (v->shape.rank_known) return v->shape.rank();
  return std::nullopt;
}

// Dim `i` of `v` when static, else nullopt.
std::optional<int64_t> StaticDim(const ir::Value* v, int i) {
  if (v->constant) return v->constant->dim(i);
  if (v->shape.rank_known && i < v->shape.rank() && v->shape.dims[i].is_static()) {
    return v->shape.dims[i].value;
  }
  return std::nullopt;
}

// A fresh value name from `base` ("base", "base_1", ...).
absl::StatusOr<ir::Value*> FreshValue(ir::Graph& g, const std::string& base) {
  for (int k = 0;; ++k) {
    std::string name = k == 0 ? base : absl::StrCat(base, "_", k);
    if (g.FindValue(name) == nullptr) return g.AddValue(name);
  }
}

absl::StatusOr<ir::Value*> Int64Constant(ir::Graph& g, const std::string& base,
                                         const std::vector<int64_t>& values) {
  ASSIGN_OR_RETURN(ir::Tensor t,
                   ir::Tensor::Allocate(DataType::kI64, {static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  ASSIGN_OR_RETURN(ir::Value * v, FreshValue(g, base));
  v->dtype = DataType::kI64;
  v->shape = ir::Shape::Of(t.dims());
  v->constant = std::move(t);
  return v;
}

// The values of constant input `i` of `n` as integers; nullopt when it is not a constant or a
// value is not an integer. Floating tensors are read too: Split-1's `split` and Tile-1's `tiles`
// and `axis` are typed like the data (float) in their schemas.
std::optional<std::vector<int64_t>> ConstantInts(const ir::Node& n, int i) {
  const ir::Value* v = n.input(i);
  if (v == nullptr || !v->constant) return std::nullopt;
  const ir::Tensor& t = *v->constant;
  if (t.dtype() == DataType::kString || t.dtype() == DataType::kBool) return std::nullopt;
  const bool floating = t.dtype() == DataType::kF32 || t.dtype() == DataType::kF64 ||
                        t.dtype() == DataType::kF16 || t.dtype() == DataType::kBF16;
  std::vector<int64_t> out(t.num_elements());
  for (int64_t k = 0; k < t.num_elements(); ++k) {
    if (!floating) {
      out[k] = ir::ElementAsInt64(t, k);
      continue;
    }
    const double d = ir::ElementAsDouble(t, k);
    if (!(std::fabs(d) < 9e15) || d != std::floor(d)) return std::nullopt;
    out[k] = static_cast<int64_t>(d);
  }
  return out;
}

// What the rewrite of one graph needs: the graph, the model's opset, the nodes it inserted (to
// infer before the node they feed) and one line per rewritten node (the import warning).
struct Rewriter {
  ir::Graph& g;
  int opset;
  std::vector<ir::Node*> inserted;
  std::vector<std::string>& notes;

  // Gives input `i` of `n` (rank `rank`) `ones` trailing 1 dims, so that numpy broadcasting
  // aligns it where the old form did: a reshaped copy of a constant (same storage), else a
  // Reshape inserted before `n` (shape [0]*rank + [1]*ones: 0 copies a dim, so dynamic dims
  // stay dynamic).
  absl::Status AppendOnes(ir::Node& n, int i, int rank, int ones) {
    ir::Value* b = n.inputs[i];
    const std::string base = absl::StrCat(n.name, "/legacy_broadcast");
    if (b->constant) {
      std::vector<int64_t> dims = b->constant->dims();
      dims.insert(dims.end(), ones, 1);
      ASSIGN_OR_RETURN(ir::Value * v, FreshValue(g, absl::StrCat(b->name, "::", base)));
      v->dtype = b->dtype;
      v->shape = ir::Shape::Of(dims);
      v->constant = b->constant->Reshaped(std::move(dims));
      n.inputs[i] = v;
      return absl::OkStatus();
    }
    std::vector<int64_t> shape(rank, 0);
    shape.insert(shape.end(), ones, 1);
    ASSIGN_OR_RETURN(ir::Value * shape_v, Int64Constant(g, absl::StrCat(base, "::shape"), shape));
    ASSIGN_OR_RETURN(ir::Value * out, FreshValue(g, absl::StrCat(base, "::output")));
    ir::Node* r = g.AddNode(OpType::kReshape, base);
    r->sources = {r->id};  // as every imported node: its own entry in the build report
    r->since_version = ResolveOpVersion(OpType::kReshape, kLegacyTargetOpset)->since_version;
    r->inputs = {b, shape_v};
    r->outputs = {out};
    n.inputs[i] = out;
    inserted.push_back(r);
    return absl::OkStatus();
  }

  // Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less before opset 7: with broadcast=1, B's
  // shape is a contiguous run of A's dims starting at `axis` (suffix matching when `axis` is
  // absent, which numpy broadcasting already does); without it the shapes are equal.
  absl::Status LegacyBroadcast(ir::Node& n, std::string& what) {
    const int64_t broadcast = n.GetInt("broadcast", 0);
    const bool has_axis = n.has_attr("axis");
    int64_t axis = n.GetInt("axis", 0);
    n.attrs.erase("broadcast");
    n.attrs.erase("axis");
    if (broadcast == 0 || !has_axis) return absl::OkStatus();
    const auto rank_a = RankOf(n.input(0));
    const auto rank_b = RankOf(n.input(1));
    if (!rank_a || !rank_b) {
      return Unadaptable(n, opset,
                         absl::StrCat("broadcast=1 with axis=", axis,
                                      " aligns B at an axis of A, which needs the ranks of A and "
                                      "B; shape inference gives ",
                                      !rank_a ? "no rank for A" : "no rank for B"));
    }
    if (axis < 0) axis += *rank_a;
    if (axis < 0 || axis + *rank_b > *rank_a) {
      return BadNode(n, absl::StrCat("B of rank ", *rank_b, " does not fit A of rank ", *rank_a,
                                     " at axis ", n.GetInt("axis", 0)));
    }
    const int ones = static_cast<int>(*rank_a - axis - *rank_b);
    if (ones == 0) return absl::OkStatus();
    what = absl::StrCat("B aligned at axis ", axis, ": ", ones, " trailing 1 dim(s) added");
    return AppendOnes(n, 1, *rank_b, ones);
  }

  // PRelu before opset 7: a 1-D slope of size C applies along the channel axis (axis 1, as
  // Caffe2 and PyTorch define it), where numpy broadcasting would align it with the last axis.
  absl::Status LegacyPRelu(ir::Node& n, std::string& what) {
    const ir::Value* x = n.input(0);
    const ir::Value* slope = n.input(1);
    const auto rank_s = RankOf(slope);
    if (rank_s && *rank_s != 1) return absl::OkStatus();  // same shape as X, or a scalar
    const auto size = rank_s ? StaticDim(slope, 0) : std::nullopt;
    if (size && *size == 1) return absl::OkStatus();  // shared by every channel
    const auto rank_x = RankOf(x);
    if (!rank_s || !rank_x) {
      return Unadaptable(n, opset,
                         "a 1-D slope applies per channel (axis 1), which needs the ranks of X "
                         "and slope; shape inference gives none");
    }
    if (*rank_x < 3) return absl::OkStatus();  // [N, C]: axis 1 is the last axis
    const auto channels = StaticDim(x, 1);
    if (size && channels && *size != *channels) {
      return BadNode(n, absl::StrCat("slope has ", *size, " values but X has ", *channels,
                                     " channels (axis 1)"));
    }
    what = "slope per channel (axis 1)";
    return AppendOnes(n, 1, 1, *rank_x - 2);
  }

  // BatchNormalization-7 runs in training mode exactly when it has the outputs mean, var,
  // saved_mean, saved_var (its "output case #1"). Where is_test says the same, the node takes
  // that form; where it does not (is_test=0 with Y only: Y from the batch statistics), the node
  // stays BatchNormalization-6, whose is_test the kernels implement (kernels/cpu/ref/
  // normalization.cc). Returns whether the node was rewritten.
  bool LegacyBatchNorm(ir::Node& n) {
    const bool test = n.GetInt("is_test", 0) != 0;
    bool training_outputs = false;
    for (int k = 1; k < n.num_outputs(); ++k) training_outputs |= n.outputs[k] != nullptr;
    if (test == training_outputs) return false;
    n.attrs.erase("is_test");
    return true;
  }

  absl::Status LegacyReshape(ir::Node& n) {
    const ir::Attribute* shape = n.attr("shape");
    if (shape == nullptr || shape->type != ir::Attribute::Type::kInts) {
      return BadNode(n, "has no 'shape' attribute (ints)");
    }
    ASSIGN_OR_RETURN(ir::Value * v, Int64Constant(g, absl::StrCat(n.name, "::shape"), shape->ints));
    n.attrs.erase("shape");
    n.inputs.resize(1);
    n.inputs.push_back(v);
    return absl::OkStatus();
  }

  // Split-1 took `split` as an attribute or as a second input; Split-2 only as an attribute.
  absl::Status LegacySplit(ir::Node& n) {
    if (n.input(1) == nullptr) return absl::OkStatus();
    if (n.has_attr("split")) return BadNode(n, "gives 'split' both as an attribute and an input");
    auto split = ConstantInts(n, 1);
    if (!split) {
      return Unadaptable(n, opset,
                         "input 'split' is not a constant (the newer form takes it as an "
                         "attribute)");
    }
    n.attrs["split"] = ir::Attribute::Ints(std::move(*split));
    n.inputs.resize(1);
    return absl::OkStatus();
  }

  // Cast-1 names the target type as a string ("FLOAT"); Cast-6 by its TensorProto number.
  absl::Status LegacyCast(ir::Node& n) {
    const ir::Attribute* to = n.attr("to");
    if (to == nullptr || to->type != ir::Attribute::Type::kString) return absl::OkStatus();
    onnx::TensorProto_DataType t;
    if (!onnx::TensorProto_DataType_Parse(to->s, &t)) {
      return BadNode(n, absl::StrCat("'to' = \"", to->s, "\" is not a TensorProto data type"));
    }
    n.attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(t));
    return absl::OkStatus();
  }

  // LpPool-1 / GlobalLpPool-1 take p as a float; version 2 as an int.
  absl::Status LegacyLpPool(ir::Node& n) {
    const ir::Attribute* p = n.attr("p");
    if (p == nullptr || p->type != ir::Attribute::Type::kFloat) return absl::OkStatus();
    const float f = p->f;
    if (f != std::floor(f) || f < 1 || f > 1e6f) {
      return Unadaptable(n, opset, absl::StrCat("p = ", f, " is not a positive integer"));
    }
    n.attrs["p"] = ir::Attribute::Int(static_cast<int64_t>(f));
    return absl::OkStatus();
  }

  // Tile-1 (input, tiles, axis): `tiles` copies along `axis`; Tile-6 takes one repeat per axis.
  absl::Status LegacyTile(ir::Node& n) {
    auto tiles = ConstantInts(n, 1);
    auto axis = ConstantInts(n, 2);
    const auto rank = RankOf(n.input(0));
    if (!tiles || !axis || tiles->size() != 1 || axis->size() != 1 || !rank) {
      return Unadaptable(n, opset,
                         "needs constant scalar 'tiles' and 'axis' inputs and the rank of the "
                         "input");
    }
    int64_t a = (*axis)[0] < 0 ? (*axis)[0] + *rank : (*axis)[0];
    if (a < 0 || a >= *rank) {
      return BadNode(n, absl::StrCat("axis ", (*axis)[0], " is out of range"));
    }
    std::vector<int64_t> repeats(*rank, 1);
    repeats[a] = (*tiles)[0];
    ASSIGN_OR_RETURN(ir::Value * v, Int64Constant(g, absl::StrCat(n.name, "::repeats"), repeats));
    n.inputs.resize(1);
    n.inputs.push_back(v);
    return absl::OkStatus();
  }

  // Upsample-1: height_scale / width_scale of a 4-D NCHW input, mode nearest or bilinear.
  absl::Status LegacyUpsample(ir::Node& n) {
    if (!n.has_attr("height_scale") || !n.has_attr("width_scale")) {
      return BadNode(n, "needs the attributes height_scale and width_scale");
    }
    std::vector<float> scales = {1, 1, n.GetFloat("height_scale", 1), n.GetFloat("width_scale", 1)};
    std::string mode = n.GetString("mode", "nearest");
    if (mode == "bilinear") mode = "linear";
    n.attrs.erase("height_scale");
    n.attrs.erase("width_scale");
    n.attrs["mode"] = ir::Attribute::String(mode);
    n.attrs["scales"] = ir::Attribute::Floats(std::move(scales));
    return absl::OkStatus();
  }

  // Rewrites `n` from its version at `opset` to its version at kLegacyTargetOpset.
  absl::Status Adapt(ir::Node& n) {
    // Ops of the other domains (ai.onnx.ml, ...) follow their own opsets, not the default one.
    if (ir::OpDomain(n.op)[0] != '\0') return absl::OkStatus();
    const auto target = ResolveOpVersion(n.op, kLegacyTargetOpset);
    if (!target) return Unadaptable(n, opset, "the op has no newer form");  // not an ONNX op
    if (target->since_version == n.since_version) return absl::OkStatus();
    const int old_version = n.since_version;
    std::string what;  // a note on the rewrite, where there is more to say than the versions
    n.attrs.erase("consumed_inputs");  // a memory hint of version 1 forms
    switch (n.op) {
      case OpType::kAdd:
      case OpType::kSub:
      case OpType::kMul:
      case OpType::kDiv:
      case OpType::kPow:
      case OpType::kAnd:
      case OpType::kOr:
      case OpType::kXor:
      case OpType::kEqual:
      case OpType::kGreater:
      case OpType::kLess:
        RETURN_IF_ERROR(LegacyBroadcast(n, what));
        break;
      case OpType::kPRelu:
        RETURN_IF_ERROR(LegacyPRelu(n, what));
        break;
      case OpType::kGemm:
        // Without broadcast C has the shape of the result; with it C broadcasts to it, as
        // Gemm-7 always does.
        n.attrs.erase("broadcast");
        break;
      case OpType::kBatchNormalization:
        if (!LegacyBatchNorm(n)) {
          // Not rewritten: BatchNormalization-1 differs from -6 only by consumed_inputs.
          n.since_version = ResolveOpVersion(n.op, 6)->since_version;
          notes.push_back(absl::StrCat(n.Label(), " ", VersionName(n.op, old_version), " kept as ",
                                       VersionName(n.op, n.since_version),
                                       " (is_test disagrees with the outputs listed)"));
          return absl::OkStatus();
        }
        break;
      case OpType::kDropout:
        // Dropout-7 dropped is_test: an inference run is test mode (output = input).
        n.attrs.erase("is_test");
        break;
      case OpType::kReshape:
        RETURN_IF_ERROR(LegacyReshape(n));
        break;
      case OpType::kConcat:
        if (!n.has_attr("axis")) n.attrs["axis"] = ir::Attribute::Int(1);  // Concat-1's default
        break;
      case OpType::kPad:
        if (const ir::Attribute* p = n.attr("paddings")) {  // Pad-1's name for pads
          ir::Attribute pads = *p;
          n.attrs.erase("paddings");
          n.attrs["pads"] = std::move(pads);
        }
        break;
      case OpType::kSplit:
        RETURN_IF_ERROR(LegacySplit(n));
        break;
      case OpType::kCast:
        RETURN_IF_ERROR(LegacyCast(n));
        break;
      case OpType::kLpPool:
      case OpType::kGlobalLpPool:
        RETURN_IF_ERROR(LegacyLpPool(n));
        break;
      case OpType::kTile:
        RETURN_IF_ERROR(LegacyTile(n));
        break;
      case OpType::kUpsample:
        RETURN_IF_ERROR(LegacyUpsample(n));
        break;
      case OpType::kGRU:
      case OpType::kLSTM:
      case OpType::kRNN:
        // output_sequence only said whether Y is wanted; the newer form reads that from the
        // outputs the node lists. GRU-3's linear_before_reset defaults to GRU-1's behaviour.
        n.attrs.erase("output_sequence");
        break;
      case OpType::kAveragePool:  // count_include_pad (7) defaults to the old behaviour
      case OpType::kAbs:          // the rest changed only by dropping consumed_inputs
      case OpType::kCeil:
      case OpType::kClip:
      case OpType::kElu:
      case OpType::kExp:
      case OpType::kFloor:
      case OpType::kHardSigmoid:
      case OpType::kInstanceNormalization:
      case OpType::kLeakyRelu:
      case OpType::kLog:
      case OpType::kMax:
      case OpType::kMean:
      case OpType::kMin:
      case OpType::kNeg:
      case OpType::kReciprocal:
      case OpType::kRelu:
      case OpType::kSelu:
      case OpType::kSigmoid:
      case OpType::kSqrt:
      case OpType::kSum:
      case OpType::kTanh:
        break;
      default:
        return Unadaptable(n, opset,
                           absl::StrCat("Kiln has no adaptation of this old form to ",
                                        VersionName(n.op, target->since_version)));
    }
    n.since_version = target->since_version;
    notes.push_back(absl::StrCat(n.Label(), " ", VersionName(n.op, old_version), " -> ",
                                 VersionName(n.op, n.since_version),
                                 what.empty() ? "" : absl::StrCat(" (", what, ")")));
    return absl::OkStatus();
  }
};

absl::Status AdaptGraph(ir::Graph& g, int opset, std::vector<std::string>& notes) {
  g.RebuildEdges();
  ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g.TopologicalOrder());
  Rewriter rw{g, opset, {}, notes};
  for (ir::Node* n : order) {
    for (auto& [name, a] : n->attrs) {
      if (a.type == ir::Attribute::Type::kGraph && a.g) {
        RETURN_IF_ERROR(AdaptGraph(*a.g, opset, notes));  // before the node's inference reads it
      }
    }
    rw.inserted.clear();
    RETURN_IF_ERROR(rw.Adapt(*n));
    if (!rw.inserted.empty()) g.RebuildEdges();  // producers of the inserted nodes' outputs
    rw.inserted.push_back(n);
    // Shapes as far as inference gives them, for the ranks later nodes' rewrites need. A failure
    // here is left to the import's own inference, which runs with the declarations and reports
    // it; a rewrite that then lacks a rank says so itself.
    InferTypesAndShapes(g, rw.inserted).IgnoreError();
  }
  g.RebuildEdges();
  return absl::OkStatus();
}

}  // namespace

absl::Status AdaptLegacyOps(ir::Graph& graph, int opset) {
  if (opset >= kLegacyTargetOpset) return absl::OkStatus();
  TypeSnapshot types(graph);
  std::vector<std::string> notes;
  RETURN_IF_ERROR(AdaptGraph(graph, opset, notes));
  types.Restore();
  if (!notes.empty()) {
    const size_t shown = std::min<size_t>(notes.size(), 8);
    graph.import_warnings().push_back(
        absl::StrCat("opset ", opset, " predates opset ", kLegacyTargetOpset, ": ", notes.size(),
                     " node(s) imported in their opset-", kLegacyTargetOpset,
                     " form: ", absl::StrJoin(notes.begin(), notes.begin() + shown, "; "),
                     notes.size() > shown ? "; ..." : ""));
  }
  return absl::OkStatus();
}

}  // namespace kiln::import
