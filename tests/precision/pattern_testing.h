// Helpers of the pattern tests: a small ONNX model builder and the invariants every instance
// must satisfy (topological order, closed interiors, no overlap but Softmax inside attention).
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/import/onnx_importer.h"
#include "engine/precision/patterns.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::precision::testing {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;

// Builds a small float model: x is [2, 4, 8] unless a test says otherwise.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 17) {
    model_.set_ir_version(10);  // skips Debian's onnx 1.12 checker: Kiln's checks apply
    model_.set_producer_name("kiln-tests");
    auto* imp = model_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    g_ = model_.mutable_graph();
    g_->set_name("patterns");
  }

  std::string Input(const std::string& name, const std::vector<int64_t>& dims = {2, 4, 8},
                    int32_t elem_type = onnx::TensorProto::FLOAT) {
    AddTensorValueInfo(g_->mutable_input(), name, dims, elem_type);
    return name;
  }

  // A float scalar constant: a Constant node output (as exporters write) or an initializer.
  // `elem_type` FLOAT, DOUBLE or FLOAT16 (exporters of half models write fp16 constants).
  std::string Scalar(float v, bool as_node = true, int32_t elem_type = onnx::TensorProto::FLOAT) {
    std::string name = Fresh("c");
    onnx::TensorProto t;
    t.set_data_type(elem_type);
    if (elem_type == onnx::TensorProto::DOUBLE) {
      t.add_double_data(v);
    } else if (elem_type == onnx::TensorProto::FLOAT16) {
      t.add_int32_data(HalfBits(v));
    } else {
      t.add_float_data(v);
    }
    AddTensor(name, t, as_node);
    return name;
  }

  std::string Ints(const std::vector<int64_t>& v, bool as_node = true) {
    std::string name = Fresh("i");
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t.add_int64_data(x);
    AddTensor(name, t, as_node);
    return name;
  }

  std::string Weight(int64_t n = 8) {
    std::string name = Fresh("w");
    AddFloatInitializer(g_, name, {n}, std::vector<float>(n, 1.0f));
    return name;
  }

  // A node with one output; returns the output name.
  std::string Op(const std::string& op, const std::vector<std::string>& inputs,
                 const std::function<void(onnx::NodeProto*)>& attrs = nullptr) {
    std::string out = Fresh(op);
    onnx::NodeProto* n = AddOnnxNode(g_, op, inputs, {out}, out + "_node");
    if (attrs) attrs(n);
    return out;
  }

  // ReduceXxx over `axes` keeping dims: axes as an attribute, or as an input from opset 18
  // (ReduceSum: 13).
  std::string Reduce(const std::string& op, const std::string& x,
                     std::vector<int64_t> axes = {-1}) {
    int64_t opset = model_.opset_import(0).version();
    bool as_input = opset >= (op == "ReduceSum" ? 13 : 18);
    if (as_input) return Op(op, {x, Ints(axes)});
    return Op(op, {x}, [&](onnx::NodeProto* n) {
      auto* a = n->add_attribute();
      a->set_name("axes");
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : axes) a->add_ints(v);
    });
  }

  void Output(const std::string& name, const std::vector<int64_t>& dims = {2, 4, 8}) {
    AddTensorValueInfo(g_->mutable_output(), name, dims);
  }

  /// The graph being built, for what the helpers do not cover (symbolic dims, shaped weights).
  onnx::GraphProto* graph() { return g_; }

  /// The serialized model (for builds).
  std::string Bytes() const { return ::kiln::testing::SerializeModel(model_); }

  std::unique_ptr<ir::Graph> Import() {
    auto g = import::ImportModel(::kiln::testing::SerializeModel(model_), import::ImportOptions{});
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? std::move(*g) : nullptr;
  }

 private:
  static int32_t HalfBits(float v) {
    // Exact for the small constants tests use (normal fp16 numbers).
    uint32_t f;
    std::memcpy(&f, &v, 4);
    uint32_t sign = (f >> 16) & 0x8000, exp = ((f >> 23) & 0xff) - 127 + 15;
    uint32_t mant = (f >> 13) & 0x3ff;
    uint32_t round = (f >> 12) & 1;
    return static_cast<int32_t>((sign | (exp << 10) | mant) + round);
  }

  void AddTensor(const std::string& name, onnx::TensorProto t, bool as_node) {
    if (as_node) {
      onnx::NodeProto* n = AddOnnxNode(g_, "Constant", {}, {name}, name + "_node");
      auto* a = n->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = std::move(t);
    } else {
      t.set_name(name);
      *g_->add_initializer() = std::move(t);
    }
  }

  std::string Fresh(const std::string& prefix) { return absl::StrCat(prefix, "_", next_++); }

  onnx::ModelProto model_;
  onnx::GraphProto* g_;
  int next_ = 0;
};

inline void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void SetString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

inline int Count(const std::vector<PatternInstance>& found, PatternKind k) {
  int n = 0;
  for (const auto& i : found) n += i.kind == k;
  return n;
}

inline const PatternInstance* First(const std::vector<PatternInstance>& found, PatternKind k) {
  for (const auto& i : found) {
    if (i.kind == k) return &i;
  }
  return nullptr;
}

// The invariants of every instance: nodes in topological order ending with the output's
// producer, interior values read only inside, no overlap except Softmax inside attention.
inline void CheckInvariants(const ir::Graph& g, const std::vector<PatternInstance>& found) {
  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  std::vector<int> pos(g.nodes().size());
  for (size_t i = 0; i < order->size(); ++i) pos[(*order)[i]->id] = static_cast<int>(i);
  std::map<int, std::vector<const PatternInstance*>> owners;
  for (const auto& inst : found) {
    SCOPED_TRACE(PatternName(inst.kind));
    ASSERT_FALSE(inst.nodes.empty());
    ASSERT_NE(inst.output, nullptr);
    ASSERT_NE(inst.input, nullptr);
    EXPECT_EQ(inst.output->producer->id, inst.nodes.back());
    std::set<const ir::Node*> members;
    for (size_t i = 0; i < inst.nodes.size(); ++i) {
      if (i > 0) {
        EXPECT_LT(pos[inst.nodes[i - 1]], pos[inst.nodes[i]]);
      }
      members.insert(g.nodes()[inst.nodes[i]].get());
      owners[inst.nodes[i]].push_back(&inst);
    }
    if (inst.is_op) {
      EXPECT_EQ(inst.nodes.size(), 1u);
      continue;
    }
    for (const ir::Node* n : members) {
      for (const ir::Value* v : n->outputs) {
        if (v == inst.output) continue;
        EXPECT_FALSE(v->is_graph_output) << v->name;
        for (const ir::Node* c : v->consumers) EXPECT_TRUE(members.count(c)) << v->name;
      }
    }
  }
  for (const auto& [id, list] : owners) {
    if (list.size() == 1) continue;
    ASSERT_EQ(list.size(), 2u) << g.nodes()[id]->Label();
    std::set<PatternKind> kinds = {list[0]->kind, list[1]->kind};
    EXPECT_EQ(kinds, (std::set<PatternKind>{PatternKind::kSoftmax, PatternKind::kAttention}))
        << g.nodes()[id]->Label();
  }
}

inline std::vector<PatternInstance> Find(const ir::Graph& g) {
  auto found = FindPatterns(g);
  CheckInvariants(g, found);
  return found;
}

}  // namespace kiln::precision::testing
