#include "engine/import/shape_inference_recurrent.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;

// Input slots of the three ops.
enum Slot { kX, kW, kR, kB, kSequenceLens, kInitialH, kInitialC, kP, kRScale, kRZeroPoint };

// Gates per direction (rows of W and R per hidden unit) and activations per direction.
// LSTMQuantizedR is an LSTM whose R is stored quantized (engine/ir/ops.def).
bool IsLstm(OpType op) { return op == OpType::kLSTM || op == OpType::kLSTMQuantizedR; }
int Gates(OpType op) { return IsLstm(op) ? 4 : op == OpType::kGRU ? 3 : 1; }
int ActivationsPerDirection(OpType op) { return IsLstm(op) ? 3 : op == OpType::kGRU ? 2 : 1; }

// The activation functions the operator docs list (matched ignoring case, as ONNX Runtime does).
constexpr const char* kActivations[] = {
    "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
    "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus"};

absl::Status Invalid(const Node& n, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(n.Label(), " ", why));
}

// What the attributes (and the static weight dims) fix about the node's shapes.
struct Geometry {
  int dirs = 1;
  int layout = 0;
  int64_t hidden = -1;  // -1: not known at build time
};

std::string Expected(const std::vector<int64_t>& dims) {
  return absl::StrCat("[",
                      absl::StrJoin(dims, ",",
                                    [](std::string* out, int64_t d) {
                                      absl::StrAppend(out,
                                                      d >= 0 ? absl::StrCat(d) : std::string("?"));
                                    }),
                      "]");
}

// Input `slot` (when present with a known rank) has rank expected.size() and, where both are
// known, the expected dims (-1: any).
absl::Status CheckDims(const Node& n, int slot, const char* name,
                       const std::vector<int64_t>& expected) {
  const Value* v = n.input(slot);
  if (!v || !v->shape.rank_known) return absl::OkStatus();
  bool ok = v->shape.rank() == static_cast<int>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) {
    const Dim& d = v->shape.dims[i];
    ok = !d.is_static() || expected[i] < 0 || d.value == expected[i];
  }
  if (ok) return absl::OkStatus();
  return Invalid(
      n, absl::StrCat(name, " has shape ", v->shape.ToString(), ", expected ", Expected(expected)));
}

// The static dim `i` of input `slot`, or -1.
int64_t StaticDim(const Node& n, int slot, int i) {
  const Value* v = n.input(slot);
  if (!v || !v->shape.rank_known || i >= v->shape.rank() || !v->shape.dims[i].is_static()) {
    return -1;
  }
  return v->shape.dims[i].value;
}

// Reads and checks the attributes; the hidden size from hidden_size, else from R or W.
absl::StatusOr<Geometry> ReadGeometry(const Node& n) {
  Geometry g;
  const std::string direction = n.GetString("direction", "forward");
  if (direction == "bidirectional") {
    g.dirs = 2;
  } else if (direction != "forward" && direction != "reverse") {
    return Invalid(n, absl::StrCat("direction must be forward, reverse or bidirectional, got '",
                                   direction, "'"));
  }
  const int64_t layout = n.GetInt("layout", 0);
  if (layout != 0 && layout != 1) {
    return Invalid(n, absl::StrCat("layout must be 0 or 1, got ", layout));
  }
  g.layout = static_cast<int>(layout);
  if (const ir::Attribute* a = n.attr("activations")) {
    const size_t want = static_cast<size_t>(g.dirs * ActivationsPerDirection(n.op));
    if (a->strings.size() != want) {
      return Invalid(n, absl::StrCat("activations has ", a->strings.size(), " functions, expected ",
                                     want, " (", ActivationsPerDirection(n.op),
                                     " per direction, direction ", direction, ")"));
    }
    for (const std::string& f : a->strings) {
      bool known = false;
      for (const char* k : kActivations) known = known || absl::EqualsIgnoreCase(f, k);
      if (!known) {
        return Invalid(n, absl::StrCat("unknown activation function '", f, "' (expected one of ",
                                       absl::StrJoin(kActivations, ", "), ")"));
      }
    }
  }
  if (n.has_attr("clip")) {
    const float clip = n.GetFloat("clip", 0.0f);
    if (!(clip > 0)) return Invalid(n, absl::StrCat("clip must be positive, got ", clip));
  }
  const int gates = Gates(n.op);
  if (n.has_attr("hidden_size")) {
    g.hidden = n.GetInt("hidden_size", 0);
    if (g.hidden <= 0) {
      return Invalid(n, absl::StrCat("hidden_size must be positive, got ", g.hidden));
    }
  } else if (int64_t r2 = StaticDim(n, kR, 2); r2 >= 0) {
    g.hidden = r2;
  } else if (int64_t w1 = StaticDim(n, kW, 1); w1 >= 0 && w1 % gates == 0) {
    g.hidden = w1 / gates;
  }
  return g;
}

// The static dims of the inputs against each other and the attributes.
absl::Status CheckInputDims(const Node& n, const Geometry& g) {
  const int64_t h = g.hidden, gh = h >= 0 ? Gates(n.op) * h : -1;
  const int64_t batch = StaticDim(n, kX, g.layout == 0 ? 1 : 0);
  const int64_t input = StaticDim(n, kX, 2);
  RETURN_IF_ERROR(CheckDims(n, kX, "X", {-1, -1, -1}));
  RETURN_IF_ERROR(CheckDims(n, kW, "W", {g.dirs, gh, input}));
  RETURN_IF_ERROR(CheckDims(n, kR, "R", {g.dirs, gh, h}));
  RETURN_IF_ERROR(CheckDims(n, kB, "B", {g.dirs, gh >= 0 ? 2 * gh : -1}));
  RETURN_IF_ERROR(CheckDims(n, kSequenceLens, "sequence_lens", {batch}));
  const std::vector<int64_t> state = g.layout == 0 ? std::vector<int64_t>{g.dirs, batch, h}
                                                   : std::vector<int64_t>{batch, g.dirs, h};
  RETURN_IF_ERROR(CheckDims(n, kInitialH, "initial_h", state));
  if (IsLstm(n.op)) {
    RETURN_IF_ERROR(CheckDims(n, kInitialC, "initial_c", state));
    RETURN_IF_ERROR(CheckDims(n, kP, "P", {g.dirs, h >= 0 ? 3 * h : -1}));
  }
  if (n.op == OpType::kLSTMQuantizedR) {
    RETURN_IF_ERROR(CheckDims(n, kRScale, "R_scale", {g.dirs, gh}));
    RETURN_IF_ERROR(CheckDims(n, kRZeroPoint, "R_zero_point", {g.dirs, gh}));
  }
  return absl::OkStatus();
}

// X floating; every other input but sequence_lens (int32) of X's dtype.
absl::Status CheckInputTypes(const Node& n) {
  const Value* x = n.input(kX);
  if (!x) return Invalid(n, "input X is required");
  if (!IsFloating(x->dtype)) {
    return Invalid(n,
                   absl::StrCat("X must be a floating tensor, got ", DataTypeOnnxName(x->dtype)));
  }
  static constexpr const char* kNames[] = {"X",         "W",         "R", "B", "sequence_lens",
                                           "initial_h", "initial_c", "P"};
  for (int i = 1; i < n.num_inputs() && i < 8; ++i) {
    const Value* v = n.input(i);
    if (!v || v->dtype == DataType::kUndefined) continue;
    DataType want = i == kSequenceLens ? DataType::kI32 : x->dtype;
    if (i == kR && n.op == OpType::kLSTMQuantizedR) {
      if (v->dtype != DataType::kI8 && v->dtype != DataType::kU8) {
        return Invalid(n, absl::StrCat("R is ", DataTypeOnnxName(v->dtype),
                                       ", expected int8 or uint8 (R stored quantized)"));
      }
      want = v->dtype;
    }
    if (v->dtype != want) {
      return Invalid(n, absl::StrCat(kNames[i], " is ", DataTypeOnnxName(v->dtype), ", expected ",
                                     DataTypeOnnxName(want)));
    }
  }
  if (n.op == OpType::kLSTMQuantizedR) {
    // R_scale floating (the precision pass may store it in the node's precision); R_zero_point
    // of R's dtype.
    const Value* r = n.input(kR);
    const Value* s = n.input(kRScale);
    const Value* z = n.input(kRZeroPoint);
    if (!r || !s || !z) return Invalid(n, "inputs R, R_scale and R_zero_point are required");
    if (s->dtype != DataType::kUndefined && !IsFloating(s->dtype)) {
      return Invalid(n, absl::StrCat("R_scale is ", DataTypeOnnxName(s->dtype),
                                     ", expected a floating dtype"));
    }
    if (z->dtype != DataType::kUndefined && r->dtype != DataType::kUndefined &&
        z->dtype != r->dtype) {
      return Invalid(n, absl::StrCat("R_zero_point is ", DataTypeOnnxName(z->dtype),
                                     ", expected R's ", DataTypeOnnxName(r->dtype)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DataType> RecurrentOutputType(const Node& n, int k) {
  RETURN_IF_ERROR(CheckInputTypes(n));
  ASSIGN_OR_RETURN(const Geometry g, ReadGeometry(n));
  RETURN_IF_ERROR(CheckInputDims(n, g));
  (void)k;  // Y, Y_h and Y_c all have X's dtype
  return n.input(kX)->dtype;
}

Shape RecurrentOutputShape(const Node& n, int k) {
  absl::StatusOr<Geometry> g = ReadGeometry(n);
  if (!g.ok()) return Shape::Unknown();
  Dim seq, batch;
  const Value* x = n.input(kX);
  if (x && x->shape.rank_known && x->shape.rank() == 3) {
    seq = x->shape.dims[g->layout == 0 ? 0 : 1];
    batch = x->shape.dims[g->layout == 0 ? 1 : 0];
  }
  const Dim dirs = Dim::Static(g->dirs);
  const Dim hidden = g->hidden >= 0 ? Dim::Static(g->hidden) : Dim{};
  Shape s;
  s.rank_known = true;
  if (k == 0) {
    s.dims = g->layout == 0 ? std::vector<Dim>{seq, dirs, batch, hidden}
                            : std::vector<Dim>{batch, seq, dirs, hidden};
  } else {
    s.dims = g->layout == 0 ? std::vector<Dim>{dirs, batch, hidden}
                            : std::vector<Dim>{batch, dirs, hidden};
  }
  return s;
}

}  // namespace kiln::import
