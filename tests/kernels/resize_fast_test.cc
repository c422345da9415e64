// The fast Resize / Upsample (kernels/cpu/avx512/resize_ops.cc) against the reference kernel
// (kernels/cpu/ref/layout_resize.cc), bit for bit: every mode (nearest with each nearest_mode,
// linear, cubic with its coefficient and exclude_outside), every coordinate transformation,
// scales and sizes, NCHW and channels-last-like resizes (a block of channels after the resized
// axes), widths that are not a multiple of 16, fp32 / fp16 / bf16, repeated runs (the cached
// tables) and a run shape that changes between runs. Both kernels evaluate the same fp32
// operations in the same order, so no tolerance is needed. Skipped without AVX-512 and
// AVX512_BF16.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using kernels::Isa;
using Dims = std::vector<int64_t>;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

// A one-node Resize (or Upsample) graph: X a graph input, the other inputs constants.
struct ResizeGraph {
  ResizeGraph(ir::OpType op, int since, const Attrs& attrs, DataType dt,
              const std::vector<ir::Tensor>& params) {
    node = g.AddNode(op, "test_node");
    node->since_version = since;
    for (const auto& [k, v] : attrs) node->attrs[k] = v;
    ir::Value* x = *g.AddValue("x");
    x->dtype = dt;
    x->is_graph_input = true;
    node->inputs.push_back(x);
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].defined()) {
        node->inputs.push_back(nullptr);
        continue;
      }
      ir::Value* v = *g.AddValue(absl::StrCat("p", i));
      v->dtype = params[i].dtype();
      v->shape = ir::Shape::Of(params[i].dims());
      v->constant = params[i];
      node->inputs.push_back(v);
    }
    ir::Value* y = *g.AddValue("y");
    y->dtype = dt;
    node->outputs.push_back(y);
    g.RebuildEdges();
  }
  ir::Graph g;
  ir::Node* node = nullptr;
};

ir::Tensor Random(const Dims& dims, DataType dt, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  int64_t n = 1;
  for (int64_t v : dims) n *= v;
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  if (n > 3) {  // the edge values travel too
    v[0] = std::numeric_limits<float>::infinity();
    v[n / 2] = -0.0f;
    v[n - 1] = std::numeric_limits<float>::quiet_NaN();
  }
  if (dt == DataType::kF16) return MakeHalf(dims, v);
  return dt == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

ir::Tensor Floats(const std::vector<float>& v) {
  return MakeFloat({static_cast<int64_t>(v.size())}, v);
}

// Runs the fast and the reference kernel of the node on each X in turn (the same kernel
// objects: later runs read the cached tables or rebuild them for a new shape) and expects the
// same dims and bytes. `expect_fast`: the fast kernel is the one Registry::Find picks.
void Compare(ir::OpType op, int since, const Attrs& attrs, DataType dt,
             const std::vector<ir::Tensor>& params, const std::vector<Dims>& shapes,
             const std::string& what) {
  SCOPED_TRACE(absl::StrCat(what, " ", DataTypeOnnxName(dt)));
  ResizeGraph graph(op, since, attrs, dt, params);
  auto fast_def = kernels::Registry::Default().Find(*graph.node, DetectCpuFeatures());
  auto ref_def = kernels::Registry::Default().Find(*graph.node, 0);
  ASSERT_TRUE(fast_def.ok() && ref_def.ok());
  ASSERT_EQ((*fast_def)->isa, Isa::kAvx512);
  ASSERT_EQ((*ref_def)->isa, Isa::kRef);
  auto fast = (*fast_def)->factory(*graph.node);
  auto ref = (*ref_def)->factory(*graph.node);
  ASSERT_TRUE(fast.ok() && ref.ok());
  std::mt19937 rng(7);
  for (const Dims& dims : shapes) {
    for (int run = 0; run < 2; ++run) {
      std::vector<ir::Tensor> in = {Random(dims, dt, rng)};
      in.insert(in.end(), params.begin(), params.end());
      TensorContext a(in), b(in);
      ASSERT_TRUE((*fast)->Run(a).ok());
      ASSERT_TRUE((*ref)->Run(b).ok());
      ASSERT_EQ(a.out().dims(), b.out().dims()) << ir::DimsToString(dims);
      ASSERT_EQ(0, std::memcmp(a.out().raw_data(), b.out().raw_data(), a.out().byte_size()))
          << "X " << ir::DimsToString(dims) << " -> " << ir::DimsToString(a.out().dims());
    }
  }
}

constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const char* const kCoords[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                               "asymmetric", "half_pixel_symmetric", "tf_half_pixel_for_nn"};

TEST(ResizeFast, NearestEveryModeScalesAndSizes) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  for (DataType dt : kTypes) {
    for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      for (const char* coord : kCoords) {
        const Attrs attrs = {{"mode", StringAttr("nearest")},
                             {"nearest_mode", StringAttr(nm)},
                             {"coordinate_transformation_mode", StringAttr(coord)}};
        const std::string what = absl::StrCat(nm, " ", coord);
        // Up, down, fractional, only W, integer factors (the copy loops), a second shape.
        for (const std::vector<float>& s : std::vector<std::vector<float>>{{1, 1, 2, 2},
                                                                           {1, 1, 0.6f, 1.7f},
                                                                           {1, 1, 1, 3},
                                                                           {1, 1, 8, 8},
                                                                           {1, 1, 3, 1},
                                                                           {1, 2, 1, 1}}) {
          Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats(s)},
                  {{2, 3, 7, 9}, {1, 2, 5, 17}}, what + " scales");
        }
        Compare(ir::OpType::kResize, 19, attrs, dt,
                {ir::Tensor(), ir::Tensor(), MakeInt64({4}, {2, 3, 13, 5})}, {{2, 3, 7, 9}},
                what + " sizes");
        // Channels-last-like: H and W resized with a block of 19 channels after them.
        Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats({1, 2, 1.5f, 1})},
                {{1, 6, 5, 19}}, what + " nhwc");
      }
    }
  }
}

TEST(ResizeFast, LinearAndCubicEveryCoordinateMode) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  for (DataType dt : kTypes) {
    for (const char* mode : {"linear", "cubic"}) {
      for (const char* coord : kCoords) {
        if (std::string(coord) == "tf_half_pixel_for_nn") continue;  // nearest only
        for (int exclude : {0, 1}) {
          for (float a : {-0.75f, -0.5f}) {
            if (std::string(mode) == "linear" && (exclude || a != -0.75f)) continue;
            const Attrs attrs = {{"mode", StringAttr(mode)},
                                 {"coordinate_transformation_mode", StringAttr(coord)},
                                 {"cubic_coeff_a", FloatAttr(a)},
                                 {"exclude_outside", IntAttr(exclude)}};
            const std::string what = absl::StrCat(mode, " ", coord, " a=", a, " ex=", exclude);
            for (const std::vector<float>& s : std::vector<std::vector<float>>{
                     {1, 1, 2, 2}, {1, 1, 0.6f, 1.7f}, {1, 1, 1, 3}, {1, 1, 2.5f, 1}}) {
              Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats(s)},
                      {{2, 3, 7, 9}, {1, 2, 4, 33}}, what + " scales");
            }
            Compare(ir::OpType::kResize, 19, attrs, dt,
                    {ir::Tensor(), ir::Tensor(), MakeInt64({4}, {2, 3, 13, 5})}, {{2, 3, 7, 9}},
                    what + " sizes");
            Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats({1, 2, 1.5f, 1})},
                    {{1, 6, 5, 19}}, what + " nhwc");
            // 1-D linear / cubic over the last axis of a rank-3 X.
            Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats({1, 1, 2.5f})},
                    {{2, 3, 10}}, what + " 1-D");
          }
        }
      }
    }
  }
}

TEST(ResizeFast, CropAndResizeAxesAndLegacyForms) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  for (DataType dt : kTypes) {
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      const Attrs crop = {{"mode", StringAttr(mode)},
                          {"coordinate_transformation_mode", StringAttr("tf_crop_and_resize")},
                          {"extrapolation_value", FloatAttr(-7.5f)}};
      Compare(ir::OpType::kResize, 19, crop, dt,
              {Floats({0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}), ir::Tensor(),
               MakeInt64({4}, {2, 3, 6, 21})},
              {{2, 3, 7, 9}}, absl::StrCat(mode, " tf_crop_and_resize"));
      // The axes attribute: H and W given as (-1, 2).
      const Attrs axes = {{"mode", StringAttr(mode)}, {"axes", IntsAttr({-1, 2})}};
      Compare(ir::OpType::kResize, 19, axes, dt, {ir::Tensor(), Floats({1.5f, 0.7f})},
              {{2, 3, 7, 9}}, absl::StrCat(mode, " axes"));
      // keep_aspect_ratio_policy.
      for (const char* policy : {"not_larger", "not_smaller"}) {
        const Attrs keep = {{"mode", StringAttr(mode)},
                            {"keep_aspect_ratio_policy", StringAttr(policy)},
                            {"axes", IntsAttr({2, 3})}};
        Compare(ir::OpType::kResize, 19, keep, dt,
                {ir::Tensor(), ir::Tensor(), MakeInt64({2}, {20, 15})}, {{1, 2, 7, 9}},
                absl::StrCat(mode, " ", policy));
      }
      if (std::string(mode) == "cubic") continue;
      // Upsample-9 and Resize-10 (scales input, asymmetric coordinates).
      const Attrs legacy = {{"mode", StringAttr(mode)}};
      Compare(ir::OpType::kUpsample, 9, legacy, dt, {Floats({1, 1, 2, 3})}, {{1, 2, 5, 7}},
              absl::StrCat(mode, " Upsample-9"));
      Compare(ir::OpType::kResize, 10, legacy, dt, {Floats({1, 1, 0.5f, 1.5f})}, {{1, 2, 6, 7}},
              absl::StrCat(mode, " Resize-10"));
    }
  }
}

// Resizes the fast kernel leaves to the reference (three resized axes in linear mode, N and C
// resized in linear mode) still give the reference's bytes; nearest takes every axis itself.
TEST(ResizeFast, FallbacksAndManyAxes) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  for (DataType dt : kTypes) {
    for (const char* mode : {"nearest", "linear"}) {
      const Attrs attrs = {{"mode", StringAttr(mode)}};
      Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats({1, 1, 2, 1.5f, 0.5f})},
              {{1, 2, 3, 4, 6}}, absl::StrCat(mode, " 3-D"));
      Compare(ir::OpType::kResize, 19, attrs, dt, {ir::Tensor(), Floats({2, 1.5f, 1, 2})},
              {{2, 2, 3, 5}}, absl::StrCat(mode, " N, C and W"));
    }
  }
}

// A large factor-2 and factor-8 nearest upsampling (the feature-pyramid pattern) on the
// threads, and a linear one: the parallel row loops.
TEST(ResizeFast, LargeUpsampling) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  for (DataType dt : kTypes) {
    for (float f : {2.0f, 8.0f}) {
      Compare(ir::OpType::kResize, 13,
              {{"mode", StringAttr("nearest")},
               {"coordinate_transformation_mode", StringAttr("asymmetric")},
               {"nearest_mode", StringAttr("floor")}},
              dt, {ir::Tensor(), Floats({1, 1, f, f})}, {{1, 32, 20, 24}}, "nearest large");
    }
    Compare(ir::OpType::kResize, 13, {{"mode", StringAttr("linear")}}, dt,
            {ir::Tensor(), Floats({1, 1, 2, 2})}, {{1, 32, 20, 24}}, "linear large");
  }
}

TEST(ResizeFast, ErrorsAreTheReferences) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16";
  NodeSpec spec;
  spec.op = ir::OpType::kResize;
  spec.attrs = {{"mode", StringAttr("linear")}};
  spec.since_version = 19;
  spec.inputs = {MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4}), ir::Tensor(), Floats({1, 1, 2})};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "scales has 3 entries");
  spec.inputs = {MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4}), ir::Tensor(), Floats({1, 1, -2, 2})};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "scales must be positive");
  spec.attrs = {{"mode", StringAttr("bogus")}};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "unsupported mode 'bogus'");
}

}  // namespace
}  // namespace kiln::testing
