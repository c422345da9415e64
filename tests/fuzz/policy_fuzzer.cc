// Fuzz harness: the policy language (engine/precision/policy.h) and its matcher. The input is a
// policy file's text:
//   - ParsePolicyText on the whole text, ParseRule on each line (the `--rule` path);
//   - a parsed policy's Canonical() form parses again to the same form (the server sends the
//     canonical text of presets to clients, which may send it back as policy_text);
//   - AssignPrecision of the parsed policy on a small fixed BERT-like graph, under obey and
//     prefer (glob, regex, scope, op and pattern selectors all run against real node names);
//   - GlobMatch of each line, as a glob, against the next line and against every node name.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "engine/import/onnx_importer.h"
#include "engine/precision/assign.h"
#include "engine/precision/patterns.h"
#include "engine/precision/policy.h"
#include "onnx/onnx_pb.h"
#include "tests/fuzz/harnesses.h"

namespace kiln::fuzz {
namespace {

void AddNode(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& in,
             const std::vector<std::string>& out, const std::string& name) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
}

void AddFloats(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
               float value) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(value + 0.01f * static_cast<float>(i));
}

void AddValue(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
              const std::string& name, const std::vector<int64_t>& dims) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// One encoder layer as PyTorch exports it: attention with a Softmax, a decomposed LayerNorm,
// then a LayerNormalization op and a GELU-free MLP. Names follow the exporter's scopes.
std::string FixedModelBytes() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("fuzz_policy_graph");
  AddValue(g->mutable_input(), "x", {1, 4, 8});
  AddValue(g->mutable_output(), "y", {1, 4, 8});
  AddFloats(g, "w_q", {8, 8}, 0.1f);
  AddFloats(g, "w_o", {8, 8}, -0.1f);
  AddFloats(g, "gamma", {8}, 1.0f);
  AddFloats(g, "beta", {8}, 0.0f);
  AddFloats(g, "two", {}, 2.0f);
  AddFloats(g, "eps", {}, 1e-5f);
  const std::string a = "/encoder/layer.0/attention/";
  const std::string ln = "/encoder/layer.0/output/LayerNorm/";
  AddNode(g, "MatMul", {"x", "w_q"}, {"q"}, a + "query/MatMul");
  AddNode(g, "Transpose", {"q"}, {"kt"}, a + "Transpose");
  g->mutable_node(g->node_size() - 1)->add_attribute()->set_name("perm");
  {
    onnx::AttributeProto* perm = g->mutable_node(g->node_size() - 1)->mutable_attribute(0);
    perm->set_type(onnx::AttributeProto::INTS);
    for (int64_t p : {0, 2, 1}) perm->add_ints(p);
  }
  AddNode(g, "MatMul", {"q", "kt"}, {"scores"}, a + "MatMul");
  AddNode(g, "Softmax", {"scores"}, {"probs"}, a + "Softmax");
  AddNode(g, "MatMul", {"probs", "q"}, {"ctx"}, a + "MatMul_1");
  AddNode(g, "MatMul", {"ctx", "w_o"}, {"proj"}, a + "output/dense/MatMul");
  AddNode(g, "Add", {"proj", "x"}, {"h"}, "/encoder/layer.0/output/Add");
  AddNode(g, "ReduceMean", {"h"}, {"mu"}, ln + "ReduceMean");
  AddNode(g, "Sub", {"h", "mu"}, {"d"}, ln + "Sub");
  AddNode(g, "Pow", {"d", "two"}, {"d2"}, ln + "Pow");
  AddNode(g, "ReduceMean", {"d2"}, {"var"}, ln + "ReduceMean_1");
  for (int i : {g->node_size() - 4, g->node_size() - 1}) {
    onnx::AttributeProto* axes = g->mutable_node(i)->add_attribute();
    axes->set_name("axes");
    axes->set_type(onnx::AttributeProto::INTS);
    axes->add_ints(-1);
  }
  AddNode(g, "Add", {"var", "eps"}, {"ve"}, ln + "Add");
  AddNode(g, "Sqrt", {"ve"}, {"sd"}, ln + "Sqrt");
  AddNode(g, "Div", {"d", "sd"}, {"n"}, ln + "Div");
  AddNode(g, "Mul", {"n", "gamma"}, {"g"}, ln + "Mul");
  AddNode(g, "Add", {"g", "beta"}, {"ln0"}, ln + "Add_1");
  AddNode(g, "LayerNormalization", {"ln0", "gamma", "beta"}, {"ln1"},
          "/encoder/layer.1/attention/output/LayerNorm/LayerNormalization");
  AddNode(g, "Relu", {"ln1"}, {"y"}, "/encoder/layer.1/intermediate/Relu");
  return m.SerializeAsString();
}

// The graph and its patterns, built once per process.
struct FixedGraph {
  std::unique_ptr<ir::Graph> graph;
  std::vector<precision::PatternInstance> patterns;
};

const FixedGraph& Fixed() {
  static const FixedGraph* fixed = [] {
    auto* f = new FixedGraph;
    auto g = import::ImportModel(FixedModelBytes(), import::ImportOptions{});
    if (!g.ok()) {
      std::fprintf(stderr, "policy fuzzer: the fixed graph does not import: %s\n",
                   g.status().ToString().c_str());
      std::abort();
    }
    f->graph = *std::move(g);
    f->patterns = precision::FindPatterns(*f->graph);
    // The graph is built to hold layernorm (twice), softmax and attention instances, so
    // `pattern:` rules match something; say so when the matcher stops seeing them.
    std::fprintf(stderr, "policy fuzzer: fixed graph of %zu nodes, %zu pattern instances\n",
                 f->graph->nodes().size(), f->patterns.size());
    return f;
  }();
  return *fixed;
}

// Keeps each input's work bounded: a 1 MiB policy of one-character lines is not interesting.
constexpr size_t kMaxLines = 256;

}  // namespace

absl::Status PolicyOneInput(absl::string_view data) {
  const FixedGraph& fixed = Fixed();
  auto policy = precision::ParsePolicyText(data, "fuzz.policy");
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(policy.status(), "ParsePolicyText"));

  std::vector<absl::string_view> lines = absl::StrSplit(data, '\n');
  if (lines.size() > kMaxLines) lines.resize(kMaxLines);
  for (size_t i = 0; i < lines.size(); ++i) {
    auto rule = precision::ParseRule(lines[i], "--rule", static_cast<int>(i) + 1, 1);
    KILN_FUZZ_RETURN_IF_ERROR(CheckClean(rule.status(), "ParseRule"));
    if (i + 1 < lines.size()) (void)precision::GlobMatch(lines[i], lines[i + 1]);
  }
  if (!lines.empty()) {
    for (const auto& n : fixed.graph->nodes()) (void)precision::GlobMatch(lines[0], n->name);
  }
  if (!policy.ok()) return absl::OkStatus();

  std::string canonical = policy->Canonical();
  auto again = precision::ParsePolicyText(canonical, "canonical");
  KILN_FUZZ_EXPECT(
      again.ok(),
      absl::StrCat("Canonical() does not parse: ", again.status().ToString(), "\n", canonical));
  KILN_FUZZ_EXPECT(
      again->Canonical() == canonical,
      absl::StrCat("Canonical() is not a fixed point:\n", canonical, "\n--\n", again->Canonical()));

  for (auto constraints : {precision::Constraints::kObey, precision::Constraints::kPrefer}) {
    auto assignment = precision::AssignPrecision(*fixed.graph, *policy, fixed.patterns, constraints,
                                                 precision::Typing::kAuto, nullptr);
    KILN_FUZZ_RETURN_IF_ERROR(CheckClean(assignment.status(), "AssignPrecision"));
    if (!assignment.ok()) {
      // Under prefer, an unmatched rule is a warning, not an error.
      KILN_FUZZ_EXPECT(constraints == precision::Constraints::kObey,
                       absl::StrCat("prefer failed: ", assignment.status().ToString()));
      continue;
    }
    KILN_FUZZ_EXPECT(assignment->nodes.size() == fixed.graph->nodes().size(),
                     "assignment size differs from the node count");
  }
  return absl::OkStatus();
}

}  // namespace kiln::fuzz
