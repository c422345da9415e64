#include "tests/fuzz/onnx_mutator.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "onnx/onnx_pb.h"

namespace kiln::fuzz {
namespace {

using Rng = std::mt19937_64;

// Ops Kiln imports plus a few it does not (so Unimplemented paths are reached too), split once.
const std::vector<std::string>& KnownOps() {
  static const std::vector<std::string>* ops = [] {
    std::istringstream in(
        "Abs Add And ArgMax ArgMin AveragePool BatchNormalization Cast CastLike Ceil Clip Concat "
        "Constant ConstantOfShape Conv ConvTranspose Cos CumSum DepthToSpace DequantizeLinear Div "
        "Dropout Einsum Elu Equal Erf Exp Expand Flatten Floor Gather GatherElements GatherND Gelu "
        "Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GroupNormalization "
        "HardSigmoid HardSwish Identity If InstanceNormalization IsInf IsNaN LayerNormalization "
        "LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN MatMul Max MaxPool Mean Min Mod Mul "
        "Neg Not OneHot Or Pad Pow PRelu QuantizeLinear Range Reciprocal ReduceL2 ReduceMax "
        "ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize "
        "RMSNormalization Round ScatterElements ScatterND Scan Shape Sigmoid Sign Sin Size Slice "
        "Softmax Softplus SpaceToDepth Split Sqrt Squeeze Sub Sum Tanh Tile TopK Transpose Trilu "
        "Unsqueeze Where Xor FusedMatMul SkipLayerNormalization NotAnOp");
    auto* v = new std::vector<std::string>;
    for (std::string op; in >> op;) v->push_back(op);
    return v;
  }();
  return *ops;
}

constexpr const char* kDomains[] = {"", "ai.onnx", "com.microsoft", "ai.onnx.ml", "kiln.bogus"};

bool OneIn(Rng& rng, uint64_t n) { return rng() % n == 0; }
size_t Index(Rng& rng, size_t n) { return static_cast<size_t>(rng() % n); }
template <typename T, size_t N>
const T& PickFrom(Rng& rng, const T (&a)[N]) {
  return a[Index(rng, N)];
}
template <typename T>
T& Pick(Rng& rng, std::vector<T>& v) {
  return v[Index(rng, v.size())];
}

int64_t EdgeInt(Rng& rng) {
  static constexpr int64_t kEdges[] = {0,
                                       -1,
                                       1,
                                       2,
                                       3,
                                       -2,
                                       127,
                                       255,
                                       65535,
                                       std::numeric_limits<int32_t>::max(),
                                       int64_t{std::numeric_limits<int32_t>::max()} + 1,
                                       std::numeric_limits<int32_t>::min(),
                                       std::numeric_limits<uint32_t>::max(),
                                       int64_t{1} << 40,
                                       (int64_t{1} << 62) + 1,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::min() + 1};
  if (OneIn(rng, 4)) return static_cast<int64_t>(rng() % 64) - 16;
  return PickFrom(rng, kEdges);
}

float EdgeFloat(Rng& rng) {
  static constexpr float kEdges[] = {0.0f,
                                     -0.0f,
                                     1.0f,
                                     -1.0f,
                                     0.5f,
                                     1e-45f,
                                     1e-12f,
                                     65504.0f,
                                     65536.0f,
                                     1e30f,
                                     -1e30f,
                                     std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::lowest(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()};
  return PickFrom(rng, kEdges);
}

std::string EdgeString(Rng& rng) {
  static const std::string kEdges[] = {"",
                                       "NOTSET",
                                       "SAME_UPPER",
                                       "SAME_LOWER",
                                       "VALID",
                                       "constant",
                                       "reflect",
                                       "edge",
                                       "linear",
                                       "nearest",
                                       "cubic",
                                       "half_pixel",
                                       "tanh",
                                       "none",
                                       std::string("a\0b", 3),
                                       "\xff\xfe\xfd",
                                       std::string(300, 'x')};
  return PickFrom(rng, kEdges);
}

// Everything a mutation may edit, across the main graph and its subgraphs.
struct Sites {
  std::vector<onnx::GraphProto*> graphs;
  std::vector<onnx::NodeProto*> nodes;
  std::vector<onnx::AttributeProto*> attributes;
  std::vector<onnx::TensorProto*> tensors;  // initializers and attribute tensors
  std::vector<onnx::TensorProto*> initializers;
  std::vector<onnx::ValueInfoProto*> values;  // graph inputs, outputs, value_info
  std::vector<std::string*> names;            // every value name (node and graph ends)
};

void Collect(onnx::GraphProto* g, Sites& s, int depth) {
  if (depth > 8) return;
  s.graphs.push_back(g);
  for (auto& t : *g->mutable_initializer()) {
    s.tensors.push_back(&t);
    s.initializers.push_back(&t);
    s.names.push_back(t.mutable_name());
  }
  for (auto* list : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()}) {
    for (auto& v : *list) {
      s.values.push_back(&v);
      s.names.push_back(v.mutable_name());
    }
  }
  for (auto& n : *g->mutable_node()) {
    s.nodes.push_back(&n);
    for (int i = 0; i < n.input_size(); ++i) s.names.push_back(n.mutable_input(i));
    for (int i = 0; i < n.output_size(); ++i) s.names.push_back(n.mutable_output(i));
    for (auto& a : *n.mutable_attribute()) {
      s.attributes.push_back(&a);
      if (a.has_t()) s.tensors.push_back(a.mutable_t());
      for (auto& t : *a.mutable_tensors()) s.tensors.push_back(&t);
      if (a.has_g()) Collect(a.mutable_g(), s, depth + 1);
      for (auto& sg : *a.mutable_graphs()) Collect(&sg, s, depth + 1);
    }
  }
}

Sites CollectSites(onnx::ModelProto& model) {
  Sites s;
  if (model.has_graph()) Collect(model.mutable_graph(), s, 0);  // never adds an empty graph
  return s;
}

template <typename T>
void EraseAt(google::protobuf::RepeatedPtrField<T>* f, int i) {
  f->erase(f->begin() + i);
}

// A copy of element i appended, then moved to a random position.
template <typename T>
void DuplicateAt(google::protobuf::RepeatedPtrField<T>* f, int i, Rng& rng) {
  *f->Add() = f->Get(i);
  f->SwapElements(f->size() - 1, static_cast<int>(Index(rng, f->size())));
}

bool MutateOpType(Sites& s, Rng& rng) {
  if (s.nodes.empty()) return false;
  onnx::NodeProto* n = Pick(rng, s.nodes);
  if (OneIn(rng, 8)) {
    std::string d = PickFrom(rng, kDomains);
    if (d == n->domain()) return false;
    n->set_domain(d);
    return true;
  }
  std::string op = KnownOps()[Index(rng, KnownOps().size())];
  if (OneIn(rng, 16)) op = OneIn(rng, 2) ? "" : "relu";
  if (op == n->op_type()) return false;
  n->set_op_type(op);
  return true;
}

bool MutateNodeList(Sites& s, Rng& rng, bool inputs, bool drop) {
  std::vector<onnx::NodeProto*> candidates;
  for (auto* n : s.nodes) {
    if ((inputs ? n->input_size() : n->output_size()) > 0 || !drop) candidates.push_back(n);
  }
  if (candidates.empty()) return false;
  onnx::NodeProto* n = Pick(rng, candidates);
  auto* list = inputs ? n->mutable_input() : n->mutable_output();
  if (drop) {
    EraseAt(list, static_cast<int>(Index(rng, list->size())));
  } else if (list->empty() || OneIn(rng, 4)) {
    // An empty name (an omitted optional input) or a fresh one.
    *list->Add() = OneIn(rng, 2) ? "" : "fuzz_new_value";
  } else {
    DuplicateAt(list, static_cast<int>(Index(rng, list->size())), rng);
  }
  return true;
}

bool MutateAttributeList(Sites& s, Rng& rng, bool drop) {
  std::vector<onnx::NodeProto*> candidates;
  for (auto* n : s.nodes) {
    if (n->attribute_size() > 0) candidates.push_back(n);
  }
  if (candidates.empty()) return false;
  onnx::NodeProto* n = Pick(rng, candidates);
  int i = static_cast<int>(Index(rng, n->attribute_size()));
  if (drop) {
    EraseAt(n->mutable_attribute(), i);
  } else if (OneIn(rng, 3) && s.attributes.size() > 1) {
    // Another node's attribute (a plausible name with the wrong meaning for this op). Copied
    // first: the source may hold a subgraph that contains `n`.
    onnx::AttributeProto copy = *Pick(rng, s.attributes);
    *n->add_attribute() = std::move(copy);
  } else {
    DuplicateAt(n->mutable_attribute(), i, rng);
  }
  return true;
}

bool MutateAttributeValue(Sites& s, Rng& rng) {
  if (s.attributes.empty()) return false;
  onnx::AttributeProto* a = Pick(rng, s.attributes);
  switch (rng() % 8) {
    case 0:
      a->set_i(EdgeInt(rng));
      break;
    case 1:
      a->set_f(EdgeFloat(rng));
      break;
    case 2:
      if (a->ints_size() == 0 || OneIn(rng, 4)) {
        a->add_ints(EdgeInt(rng));
      } else if (OneIn(rng, 3)) {
        a->mutable_ints()->RemoveLast();
      } else {
        a->set_ints(static_cast<int>(Index(rng, a->ints_size())), EdgeInt(rng));
      }
      break;
    case 3:
      if (a->floats_size() == 0 || OneIn(rng, 4)) {
        a->add_floats(EdgeFloat(rng));
      } else if (OneIn(rng, 3)) {
        a->mutable_floats()->RemoveLast();
      } else {
        a->set_floats(static_cast<int>(Index(rng, a->floats_size())), EdgeFloat(rng));
      }
      break;
    case 4:
      if (a->strings_size() > 0 && OneIn(rng, 2)) {
        a->set_strings(static_cast<int>(Index(rng, a->strings_size())), EdgeString(rng));
      } else {
        a->set_s(EdgeString(rng));
      }
      break;
    case 5: {
      // The type field disagreeing with the value that is set.
      int t;
      do {
        t = static_cast<int>(rng() % 15);
      } while (!onnx::AttributeProto_AttributeType_IsValid(t));
      a->set_type(static_cast<onnx::AttributeProto_AttributeType>(t));
      break;
    }
    case 6:
      a->set_ref_attr_name(OneIn(rng, 2) ? "" : a->name());
      break;
    default: {
      std::string name = a->name();
      a->Clear();
      a->set_name(name);
      if (OneIn(rng, 2)) a->set_name(OneIn(rng, 2) ? "" : "fuzz_attr");
      break;
    }
  }
  return true;
}

bool MutateDim(Sites& s, Rng& rng) {
  std::vector<onnx::TensorShapeProto*> shapes;
  for (auto* v : s.values) {
    if (v->type().has_tensor_type() && v->type().tensor_type().has_shape()) {
      shapes.push_back(v->mutable_type()->mutable_tensor_type()->mutable_shape());
    }
  }
  std::vector<onnx::TensorProto*> tensors = s.tensors;
  if (shapes.empty() && tensors.empty()) return false;
  bool use_shape = !shapes.empty() && (tensors.empty() || OneIn(rng, 2));
  if (use_shape) {
    onnx::TensorShapeProto* shape = Pick(rng, shapes);
    if (shape->dim_size() == 0 || OneIn(rng, 8)) {
      shape->add_dim()->set_dim_value(EdgeInt(rng));
      return true;
    }
    int i = static_cast<int>(Index(rng, shape->dim_size()));
    switch (rng() % 5) {
      case 0:
        EraseAt(shape->mutable_dim(), i);
        break;
      case 1:
        shape->mutable_dim(i)->set_dim_param(OneIn(rng, 2) ? "" : "batch");
        break;
      case 2:
        shape->mutable_dim(i)->Clear();
        break;
      default:
        shape->mutable_dim(i)->set_dim_value(EdgeInt(rng));
        break;
    }
    return true;
  }
  onnx::TensorProto* t = Pick(rng, tensors);
  if (t->dims_size() == 0 || OneIn(rng, 6)) {
    t->add_dims(EdgeInt(rng));
  } else if (OneIn(rng, 5)) {
    t->mutable_dims()->RemoveLast();
  } else {
    t->set_dims(static_cast<int>(Index(rng, t->dims_size())), EdgeInt(rng));
  }
  return true;
}

int RandomDataType(Rng& rng) {
  // 0..23 covers every TensorProto.DataType up to FLOAT4E2M1 and beyond; 999 is unknown.
  return OneIn(rng, 10) ? 999 : static_cast<int>(rng() % 24);
}

bool MutateDataType(Sites& s, Rng& rng) {
  if (s.tensors.empty() && s.values.empty()) return false;
  if (!s.tensors.empty() && (s.values.empty() || OneIn(rng, 2))) {
    Pick(rng, s.tensors)->set_data_type(RandomDataType(rng));
    return true;
  }
  onnx::ValueInfoProto* v = Pick(rng, s.values);
  if (OneIn(rng, 8)) {
    // Not a tensor at all: a sequence of tensors, or no type.
    onnx::TypeProto t = v->type();
    if (OneIn(rng, 2)) {
      *v->mutable_type()->mutable_sequence_type()->mutable_elem_type() = t;
    } else {
      v->clear_type();
    }
    return true;
  }
  v->mutable_type()->mutable_tensor_type()->set_elem_type(RandomDataType(rng));
  return true;
}

bool MutateRawData(Sites& s, Rng& rng) {
  if (s.tensors.empty()) return false;
  onnx::TensorProto* t = Pick(rng, s.tensors);
  std::string* raw = t->mutable_raw_data();
  switch (rng() % 6) {
    case 0:
      if (raw->empty()) return false;
      raw->resize(Index(rng, raw->size()));  // truncated
      break;
    case 1:
      raw->append(1 + Index(rng, 16), static_cast<char>(rng()));  // too long
      break;
    case 2:
      t->clear_raw_data();
      break;
    case 3:
      t->add_float_data(EdgeFloat(rng));  // beside raw_data, or the wrong field for the type
      break;
    case 4:
      t->add_int64_data(EdgeInt(rng));
      break;
    default:
      t->add_int32_data(static_cast<int32_t>(EdgeInt(rng)));
      break;
  }
  return true;
}

bool MutateRenameValue(Sites& s, Rng& rng) {
  if (s.names.empty()) return false;
  std::string* target = Pick(rng, s.names);
  std::string name;
  uint64_t r = rng() % 8;
  if (r < 5) {
    name = *Pick(rng, s.names);  // a collision with another value
  } else if (r == 5) {
    name = "";
  } else if (r == 6) {
    name = std::string(1 + Index(rng, 4), '/');
  } else {
    name = "fuzz_renamed";
  }
  if (name == *target) return false;
  *target = name;
  return true;
}

bool MutateNodes(Sites& s, Rng& rng, OnnxMutation m) {
  std::vector<onnx::GraphProto*> candidates;
  for (auto* g : s.graphs) {
    if (g->node_size() > (m == OnnxMutation::kSwapNodes ? 1 : 0)) candidates.push_back(g);
  }
  if (candidates.empty()) return false;
  onnx::GraphProto* g = Pick(rng, candidates);
  auto* nodes = g->mutable_node();
  int i = static_cast<int>(Index(rng, nodes->size()));
  if (m == OnnxMutation::kDropNode) {
    EraseAt(nodes, i);
  } else if (m == OnnxMutation::kDuplicateNode) {
    DuplicateAt(nodes, i, rng);
  } else {
    int j = static_cast<int>(Index(rng, nodes->size() - 1));
    if (j >= i) ++j;
    nodes->SwapElements(i, j);
  }
  return true;
}

bool MutateGraphInputOutput(Sites& s, Rng& rng) {
  if (s.graphs.empty()) return false;
  onnx::GraphProto* g = Pick(rng, s.graphs);
  int which = static_cast<int>(rng() % 3);
  bool drop = OneIn(rng, 2);
  auto edit = [&](auto* list) {
    if (list->empty()) return false;
    int i = static_cast<int>(Index(rng, list->size()));
    if (drop) {
      EraseAt(list, i);
    } else {
      DuplicateAt(list, i, rng);
    }
    return true;
  };
  if (which == 0) return edit(g->mutable_input());
  if (which == 1) return edit(g->mutable_output());
  return edit(g->mutable_initializer());
}

bool MutateExternalData(Sites& s, Rng& rng) {
  if (s.initializers.empty()) return false;
  onnx::TensorProto* t = Pick(rng, s.initializers);
  static const char* kLocations[] = {"weights.bin",    "../../../../etc/passwd", "/etc/passwd", "",
                                     "/proc/self/mem", "sub/../../x.bin"};
  static const char* kNumbers[] = {"0", "-1", "1", "64", "18446744073709551615", "abc", ""};
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  t->clear_external_data();
  auto* loc = t->add_external_data();
  loc->set_key("location");
  loc->set_value(PickFrom(rng, kLocations));
  if (OneIn(rng, 2)) {
    auto* e = t->add_external_data();
    e->set_key(OneIn(rng, 2) ? "offset" : "length");
    e->set_value(PickFrom(rng, kNumbers));
  }
  if (OneIn(rng, 2)) t->clear_raw_data();
  return true;
}

bool MutateOpset(onnx::ModelProto& model, Rng& rng) {
  static constexpr int64_t kVersions[] = {
      0,  -1, 1,  5,  6,  7,  9,  11, 13, 14,   17,
      18, 19, 20, 21, 22, 23, 24, 25, 26, 1000, std::numeric_limits<int64_t>::max()};
  auto* opsets = model.mutable_opset_import();
  if (opsets->empty() || OneIn(rng, 8)) {
    auto* o = opsets->Add();  // another entry, maybe a second one for the same domain
    o->set_domain(PickFrom(rng, kDomains));
    o->set_version(PickFrom(rng, kVersions));
    return true;
  }
  int i = static_cast<int>(Index(rng, opsets->size()));
  switch (rng() % 4) {
    case 0:
      EraseAt(opsets, i);
      break;
    case 1:
      opsets->Mutable(i)->set_domain(PickFrom(rng, kDomains));
      break;
    default:
      opsets->Mutable(i)->set_version(PickFrom(rng, kVersions));
      break;
  }
  return true;
}

bool MutateIrVersion(onnx::ModelProto& model, Rng& rng) {
  static constexpr int64_t kVersions[] = {
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, -1, std::numeric_limits<int64_t>::max()};
  int64_t v = PickFrom(rng, kVersions);
  if (v == model.ir_version()) return false;
  model.set_ir_version(v);
  return true;
}

}  // namespace

const char* OnnxMutationName(OnnxMutation m) {
  switch (m) {
    case OnnxMutation::kOpType:
      return "op_type";
    case OnnxMutation::kDropNodeInput:
      return "drop_node_input";
    case OnnxMutation::kDuplicateNodeInput:
      return "duplicate_node_input";
    case OnnxMutation::kDropNodeOutput:
      return "drop_node_output";
    case OnnxMutation::kDuplicateNodeOutput:
      return "duplicate_node_output";
    case OnnxMutation::kDropAttribute:
      return "drop_attribute";
    case OnnxMutation::kDuplicateAttribute:
      return "duplicate_attribute";
    case OnnxMutation::kAttributeValue:
      return "attribute_value";
    case OnnxMutation::kDim:
      return "dim";
    case OnnxMutation::kDataType:
      return "data_type";
    case OnnxMutation::kRawData:
      return "raw_data";
    case OnnxMutation::kRenameValue:
      return "rename_value";
    case OnnxMutation::kDropNode:
      return "drop_node";
    case OnnxMutation::kDuplicateNode:
      return "duplicate_node";
    case OnnxMutation::kSwapNodes:
      return "swap_nodes";
    case OnnxMutation::kGraphInputOutput:
      return "graph_input_output";
    case OnnxMutation::kExternalData:
      return "external_data";
    case OnnxMutation::kOpsetVersion:
      return "opset_version";
    case OnnxMutation::kIrVersion:
      return "ir_version";
    case OnnxMutation::kCount:
      break;
  }
  return "?";
}

bool ApplyOnnxMutation(onnx::ModelProto& model, OnnxMutation m, Rng& rng) {
  // Sites are collected afresh for every edit: an edit may invalidate pointers into the model.
  Sites s = CollectSites(model);
  switch (m) {
    case OnnxMutation::kOpType:
      return MutateOpType(s, rng);
    case OnnxMutation::kDropNodeInput:
      return MutateNodeList(s, rng, /*inputs=*/true, /*drop=*/true);
    case OnnxMutation::kDuplicateNodeInput:
      return MutateNodeList(s, rng, /*inputs=*/true, /*drop=*/false);
    case OnnxMutation::kDropNodeOutput:
      return MutateNodeList(s, rng, /*inputs=*/false, /*drop=*/true);
    case OnnxMutation::kDuplicateNodeOutput:
      return MutateNodeList(s, rng, /*inputs=*/false, /*drop=*/false);
    case OnnxMutation::kDropAttribute:
      return MutateAttributeList(s, rng, /*drop=*/true);
    case OnnxMutation::kDuplicateAttribute:
      return MutateAttributeList(s, rng, /*drop=*/false);
    case OnnxMutation::kAttributeValue:
      return MutateAttributeValue(s, rng);
    case OnnxMutation::kDim:
      return MutateDim(s, rng);
    case OnnxMutation::kDataType:
      return MutateDataType(s, rng);
    case OnnxMutation::kRawData:
      return MutateRawData(s, rng);
    case OnnxMutation::kRenameValue:
      return MutateRenameValue(s, rng);
    case OnnxMutation::kDropNode:
    case OnnxMutation::kDuplicateNode:
    case OnnxMutation::kSwapNodes:
      return MutateNodes(s, rng, m);
    case OnnxMutation::kGraphInputOutput:
      return MutateGraphInputOutput(s, rng);
    case OnnxMutation::kExternalData:
      return MutateExternalData(s, rng);
    case OnnxMutation::kOpsetVersion:
      return MutateOpset(model, rng);
    case OnnxMutation::kIrVersion:
      return MutateIrVersion(model, rng);
    case OnnxMutation::kCount:
      break;
  }
  return false;
}

std::vector<OnnxMutation> MutateOnnxModel(onnx::ModelProto& model, Rng& rng) {
  std::vector<OnnxMutation> done;
  // Mostly one edit (small steps keep most of a seed valid), sometimes a few.
  size_t want = OneIn(rng, 3) ? 2 + Index(rng, 3) : 1;
  for (int attempts = 0; done.size() < want && attempts < 32; ++attempts) {
    auto m = static_cast<OnnxMutation>(Index(rng, static_cast<size_t>(OnnxMutation::kCount)));
    if (ApplyOnnxMutation(model, m, rng)) done.push_back(m);
  }
  return done;
}

size_t MutateOnnxBytes(uint8_t* data, size_t size, size_t max_size, unsigned int seed,
                       ByteMutator bytes, MutationPath* path) {
  Rng rng(seed);
  onnx::ModelProto model;
  // One time in five the bytes mutator runs anyway: it finds what a parse-edit-serialize round
  // trip cannot produce (bad varints, truncated fields, unknown fields).
  bool structural = !OneIn(rng, 5) && size > 0 && size <= static_cast<size_t>(INT32_MAX) &&
                    model.ParseFromArray(data, static_cast<int>(size));
  if (structural && !MutateOnnxModel(model, rng).empty()) {
    std::string out;
    if (model.SerializeToString(&out) && out.size() <= max_size) {
      std::memcpy(data, out.data(), out.size());
      if (path) *path = MutationPath::kStructural;
      return out.size();
    }
  }
  if (path) *path = MutationPath::kBytes;
  return bytes(data, size, max_size);
}

}  // namespace kiln::fuzz
