#include "engine/runtime/memory_planner.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// A chain x -> n0 -> v0 -> n1 -> v1 ... -> out, every activation [1024] float (4 KiB).
struct Chain {
  ir::Graph g;
  std::vector<ir::Node*> order;
  explicit Chain(int n) {
    ir::Value* prev = *g.AddValue("x");
    prev->dtype = DataType::kF32;
    prev->shape = ir::Shape::Of({1024});
    g.inputs().push_back(prev);
    for (int i = 0; i < n; ++i) {
      ir::Node* node = g.AddNode(ir::OpType::kRelu, absl::StrCat("n", i));
      ir::Value* v = *g.AddValue(absl::StrCat("v", i));
      v->dtype = DataType::kF32;
      v->shape = ir::Shape::Of({1024});
      node->inputs = {prev};
      node->outputs = {v};
      prev = v;
      order.push_back(node);
    }
    g.outputs().push_back(prev);
    g.RebuildEdges();
  }
};

TEST(MemoryPlannerTest, ChainReusesTwoBuffers) {
  Chain c(10);
  MemoryPlan p = PlanMemory(c.g, c.order);
  // 9 planned activations (the last is a graph output, owned by the caller).
  EXPECT_EQ(p.slots.size(), 9u);
  EXPECT_EQ(p.total_activation_bytes, 9u * 4096);
  // Each activation dies when the next is computed, and an output may not alias its input,
  // so exactly two buffers alternate.
  EXPECT_EQ(p.arena_bytes, 2u * 4096);
}

TEST(MemoryPlannerTest, LiveValuesNeverOverlap) {
  // Diamond-heavy graph: x feeds k branches that are all live until a final Sum.
  ir::Graph g;
  ir::Value* x = *g.AddValue("x");
  x->dtype = DataType::kF32;
  x->shape = ir::Shape::Of({256});
  g.inputs().push_back(x);
  std::vector<ir::Node*> order;
  std::vector<ir::Value*> branches;
  for (int i = 0; i < 6; ++i) {
    ir::Node* n = g.AddNode(ir::OpType::kRelu, absl::StrCat("b", i));
    ir::Value* v = *g.AddValue(absl::StrCat("v", i));
    v->dtype = DataType::kF32;
    v->shape = ir::Shape::Of({256 * (i + 1)});
    n->inputs = {x};
    n->outputs = {v};
    branches.push_back(v);
    order.push_back(n);
  }
  ir::Node* sum = g.AddNode(ir::OpType::kSum, "sum");
  ir::Value* out = *g.AddValue("out");
  out->dtype = DataType::kF32;
  sum->inputs = branches;
  sum->outputs = {out};
  order.push_back(sum);
  g.outputs().push_back(out);
  g.RebuildEdges();
  MemoryPlan p = PlanMemory(g, order);
  ASSERT_EQ(p.slots.size(), 6u);
  for (size_t i = 0; i < p.slots.size(); ++i) {
    for (size_t j = i + 1; j < p.slots.size(); ++j) {
      const auto& a = p.slots[i];
      const auto& b = p.slots[j];
      EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
          << "slots " << i << " and " << j << " overlap while both are live";
    }
  }
  EXPECT_EQ(p.arena_bytes, p.total_activation_bytes);  // nothing dies early here
}

// Relu -> v0 -> Reshape -> v1 -> Relu -> v2 -> Relu: the Reshape's output takes v0's slot (v0
// dies there), so the kernel finds the bytes in place; a Reshape whose input lives on (read
// again later) gets a slot of its own.
TEST(MemoryPlannerTest, ShapeOnlyOutputTakesTheSlotOfAnInputDyingThere) {
  for (bool input_read_later : {false, true}) {
    Chain c(4);
    c.order[1]->op = ir::OpType::kReshape;
    if (input_read_later) c.order[3]->inputs.push_back(c.order[0]->outputs[0]);
    c.g.RebuildEdges();
    MemoryPlan p = PlanMemory(c.g, c.order);
    ASSERT_EQ(p.slots.size(), 3u);  // v0, v1, v2
    EXPECT_EQ(p.slots[1].offset == p.slots[0].offset, !input_read_later) << input_read_later;
    // Live values never overlap: v1 and v2, and v0 with both while it is still read.
    const auto overlap = [&](size_t i, size_t j) {
      const auto& a = p.slots[i];
      const auto& b = p.slots[j];
      return !(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset);
    };
    EXPECT_FALSE(overlap(1, 2));
    if (input_read_later) {
      EXPECT_FALSE(overlap(0, 1));
      EXPECT_FALSE(overlap(0, 2));
    } else {
      EXPECT_FALSE(overlap(0, 2));  // v0's bytes live on as v1 until v2 is computed
    }
  }
}

// x -> Relu -> z, x -> Relu -> a, FusedConv(a, w, -, z) -> y -> Relu -> out: y takes z's slot
// when z dies at the FusedConv (its kernels add Z where it lies); not when z is read again
// later, nor when z is also the convolution's X.
TEST(MemoryPlannerTest, FusedConvOutputTakesTheSlotOfItsResidualDyingThere) {
  enum Variant { kDies, kReadLater, kAlsoX };
  for (Variant variant : {kDies, kReadLater, kAlsoX}) {
    SCOPED_TRACE(variant);
    ir::Graph g;
    auto value = [&](const std::string& name) {
      ir::Value* v = *g.AddValue(name);
      v->dtype = DataType::kF32;
      v->shape = ir::Shape::Of({1024});
      return v;
    };
    std::vector<ir::Node*> order;
    auto node = [&](ir::OpType op, std::vector<ir::Value*> in, ir::Value* out) {
      ir::Node* n = g.AddNode(op, absl::StrCat("n", order.size()));
      n->inputs = std::move(in);
      n->outputs = {out};
      order.push_back(n);
    };
    ir::Value* x = value("x");
    g.inputs().push_back(x);
    ir::Value* w = value("w");
    w->constant = ir::Tensor::Allocate(DataType::kF32, {1024}).value();
    ir::Value *z = value("z"), *a = value("a"), *y = value("y"), *out = value("out");
    node(ir::OpType::kRelu, {x}, z);
    node(ir::OpType::kRelu, {x}, a);
    node(ir::OpType::kFusedConv, {variant == kAlsoX ? z : a, w, nullptr, z}, y);
    node(ir::OpType::kSum,
         variant == kReadLater ? std::vector<ir::Value*>{y, z} : std::vector<ir::Value*>{y}, out);
    g.outputs().push_back(out);
    g.RebuildEdges();
    MemoryPlan p = PlanMemory(g, order);
    ASSERT_EQ(p.slots.size(), 3u);  // z, a, y
    EXPECT_EQ(p.slots[2].offset == p.slots[0].offset, variant == kDies);
    // y never overlaps a while the FusedConv reads it, nor z unless it took z's slot.
    const auto overlap = [&](size_t i, size_t j) {
      const auto& s1 = p.slots[i];
      const auto& s2 = p.slots[j];
      return !(s1.offset + s1.bytes <= s2.offset || s2.offset + s2.bytes <= s1.offset);
    };
    if (variant != kAlsoX) EXPECT_FALSE(overlap(1, 2));
    if (variant != kDies) EXPECT_FALSE(overlap(0, 2));
  }
}

TEST(MemoryPlannerTest, SymbolicSizesAreDynamic) {
  Chain c(3);
  c.g.values()[1]->shape = ir::Shape{true, {ir::Dim::Symbol("n")}};
  MemoryPlan p = PlanMemory(c.g, c.order);
  EXPECT_EQ(p.dynamic_values, 1);
  EXPECT_EQ(p.slots.size(), 1u);
}

TEST(MemoryPlannerTest, TenThousandNodesIsFast) {
  // Not a timing test: the ctest timeout guards against quadratic behaviour.
  Chain c(10000);
  MemoryPlan p = PlanMemory(c.g, c.order);
  EXPECT_EQ(p.arena_bytes, 2u * 4096);
}

}  // namespace
}  // namespace kiln::runtime
