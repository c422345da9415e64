// The fast Pad in edge / reflect / wrap modes (cpu/avx512/memory_ops.cc), TopK
// (cpu/avx512/topk_ops.cc) and LogSoftmax (cpu/avx512/unary_ops.cc) against the reference
// kernels. Pad and TopK are data movement / selection: byte for byte (every element size for
// Pad, pads larger than the axis, crops, axes; TopK with ties, NaN, -0/+0, largest and smallest,
// small and large k, inner axes, only one output requested). LogSoftmax within a stated bound.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;
using kernels::Isa;

#define SKIP_WITHOUT_AVX512() \
  if (!kernels::CpuHasIsa(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU"

ir::Tensor RandomBits(DataType dtype, const Dims& dims, std::mt19937& rng) {
  ir::Tensor t = *ir::Tensor::Allocate(dtype, dims);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) {
    p[i] = static_cast<uint8_t>(dtype == DataType::kBool ? rng() & 1 : rng());
  }
  return t;
}

ir::Tensor Ints(const Dims& v) { return MakeInt64({static_cast<int64_t>(v.size())}, v); }

TEST(Avx512PadModes, RegistryPicksTheFastKernels) {
  SKIP_WITHOUT_AVX512();
  for (ir::OpType op : {ir::OpType::kTopK, ir::OpType::kLogSoftmax}) {
    for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      auto def = FindKernelFor(op, t, DetectCpuFeatures());
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kAvx512) << ir::OpName(op) << " " << DataTypeOnnxName(t);
    }
  }
}

TEST(Avx512PadModes, EdgeReflectWrapMatchReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(11);
  struct Case {
    Dims dims, pads, axes;
  };
  const std::vector<Case> cases = {
      {{1, 3, 5, 7}, {0, 0, 1, 2, 0, 0, 3, 4}, {}},       // spatial pads
      {{1, 1, 37}, {0, 0, 5, 0, 0, 9}, {}},               // 1-D reflect of audio (Silero)
      {{2, 4, 6}, {1, 0, 0, 0, 2, 1}, {}},                // outer and inner axes
      {{3, 9, 10}, {0, -2, -3, 0, 3, 4}, {}},             // crops mixed with pads
      {{2, 5, 3}, {2, 7, 8, 11}, {-1, 1}},                // pads past the axis: repeated
      {{4, 1}, {1, 3, 2, 2}, {}},                         // a size-1 axis (reflect: edge)
      {{1, 17, 19}, {0, 0, 0, 0, 0, 0}, {}},              // no padding at all
      {{1, 64, 100, 100}, {0, 0, 2, 2, 0, 0, 2, 2}, {}},  // threads
  };
  const DataType kSizes[] = {DataType::kBool, DataType::kI8,  DataType::kF16,
                             DataType::kBF16, DataType::kF32, DataType::kI64};
  for (const char* mode : {"edge", "reflect", "wrap"}) {
    for (DataType dt : kSizes) {
      for (const Case& c : cases) {
        // Reflect needs pads below the kept size only in numpy's old form; the reference (and
        // this kernel) reflects repeatedly, so every case is valid for every mode.
        NodeSpec spec;
        spec.op = ir::OpType::kPad;
        spec.since_version = 19;
        spec.attrs = {{"mode", StringAttr(mode)}};
        spec.inputs = {RandomBits(dt, c.dims, rng), Ints(c.pads), ir::Tensor()};
        if (!c.axes.empty()) spec.inputs.push_back(Ints(c.axes));
        ExpectSameBytesAsReference(spec, std::string(mode) + " " + ir::DimsToString(c.dims) +
                                             " pads " + ir::DimsToString(c.pads) + " " +
                                             DataTypeOnnxName(dt));
      }
    }
    // Opset 2 and 11 forms.
    NodeSpec spec;
    spec.op = ir::OpType::kPad;
    spec.since_version = 2;
    spec.attrs = {{"mode", StringAttr(mode)}, {"pads", IntsAttr({1, 2, 3, 0})}};
    spec.inputs = {RandomBits(DataType::kF32, {3, 4}, rng)};
    ExpectSameBytesAsReference(spec, std::string("opset 2 ") + mode);
    spec.since_version = 11;
    spec.attrs = {{"mode", StringAttr(mode)}};
    spec.inputs = {RandomBits(DataType::kF16, {3, 4}, rng), Ints({1, 2, 3, 0})};
    ExpectSameBytesAsReference(spec, std::string("opset 11 ") + mode);
    // The reference's error for an empty axis padded in this mode.
    NodeSpec bad;
    bad.op = ir::OpType::kPad;
    bad.since_version = 19;
    bad.attrs = {{"mode", StringAttr(mode)}};
    bad.inputs = {RandomBits(DataType::kF32, {3, 4}, rng), Ints({0, -4, 0, 1})};
    ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "empty axis");
  }
}

// Values with many ties (a few distinct values), NaN, -0 and +0, infinities.
ir::Tensor TopKInput(DataType dt, const Dims& dims, std::mt19937& rng, bool ties) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (float& f : v) {
    const uint32_t r = rng() % 64;
    if (r < 5) {
      f = specials[r];
    } else {
      f = ties ? static_cast<float>(rng() % 7) - 3.0f : normal(rng);
    }
  }
  if (dt == DataType::kF16) return MakeHalf(dims, v);
  return dt == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

TEST(Avx512TopK, MatchesReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(12);
  struct Case {
    Dims dims;
    int64_t axis, k;
  };
  const std::vector<Case> cases = {
      {{1, 8400}, -1, 100},  // detector scores: heap scan
      {{1, 8400}, 1, 1000},  // large k: nth_element
      {{2, 300}, -1, 300},   // k = n: a full sort
      {{3, 17, 5}, 1, 4},    // an inner axis (strided lanes)
      {{3, 17, 5}, 0, 2},    // the outer axis
      {{64, 1000}, -1, 10},  // many lanes: threads
      {{5, 9}, -1, 0},       // k = 0
      {{1}, 0, 1},           // one element
  };
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const Case& c : cases) {
      for (int largest : {1, 0}) {
        for (bool ties : {true, false}) {
          NodeSpec spec;
          spec.op = ir::OpType::kTopK;
          spec.since_version = 11;
          spec.num_outputs = 2;
          spec.attrs = {{"axis", IntAttr(c.axis)}, {"largest", IntAttr(largest)}};
          spec.inputs = {TopKInput(dt, c.dims, rng, ties), Ints({c.k})};
          ExpectSameBytesAsReference(
              spec, ir::DimsToString(c.dims) + " axis " + std::to_string(c.axis) + " k " +
                        std::to_string(c.k) + " largest " + std::to_string(largest) +
                        (ties ? " ties " : " ") + DataTypeOnnxName(dt));
        }
      }
    }
  }
  // Opset 1: k as an attribute; only the values output.
  NodeSpec spec;
  spec.op = ir::OpType::kTopK;
  spec.since_version = 1;
  spec.attrs = {{"k", IntAttr(3)}};
  spec.inputs = {TopKInput(DataType::kF32, {4, 20}, rng, true)};
  ExpectSameBytesAsReference(spec, "opset 1");
  // The reference's errors.
  NodeSpec bad;
  bad.op = ir::OpType::kTopK;
  bad.since_version = 11;
  bad.num_outputs = 2;
  bad.inputs = {TopKInput(DataType::kF32, {4, 20}, rng, false), Ints({21})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "out of range");
  bad.attrs = {{"axis", IntAttr(2)}};
  bad.inputs[1] = Ints({2});
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "axis");
}

TEST(Avx512LogSoftmax, WithinBoundOfReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(13);
  struct Case {
    Dims dims;
    int64_t axis;
    int opset;
  };
  const std::vector<Case> cases = {
      {{2, 50, 6625}, -1, 13},  // a CTC head over its vocabulary (PP-OCR rec), threads
      {{4, 37}, -1, 13},        // a row not a multiple of 16
      {{3, 7, 5}, 1, 13},       // a middle axis (strided)
      {{2, 9, 40}, 1, 13},      // 16 columns at a time: two full vectors and a tail
      {{4, 30, 600}, 1, 13},    // tasks of 256 columns on the threads
      {{3, 7, 5}, 0, 13},       // the outer axis
      {{3, 7, 5}, 1, 11},       // opset 11: the dims from axis 1 on are one row
      {{1, 1}, -1, 13},         // one element: 0
  };
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const Case& c : cases) {
      NodeSpec spec;
      spec.op = ir::OpType::kLogSoftmax;
      spec.since_version = c.opset;
      spec.attrs = {{"axis", IntAttr(c.axis)}};
      ir::Tensor x = RandomNormal(c.dims, dt, rng);
      std::vector<float> xv = ToFloats(x);
      for (float& f : xv) f *= 4.0f;  // logits spread over a few units
      spec.inputs = {dt == DataType::kF16    ? MakeHalf(c.dims, xv)
                     : dt == DataType::kBF16 ? MakeBf16(c.dims, xv)
                                             : MakeFloat(c.dims, xv)};
      const std::string what = ir::DimsToString(c.dims) + " axis " + std::to_string(c.axis) +
                               " opset " + std::to_string(c.opset) + " " + DataTypeOnnxName(dt);
      SCOPED_TRACE(what);
      spec.runs = 2;
      auto fast = RunNode(spec);
      spec.cpu_features = 0;
      auto ref = RunNode(spec);
      ASSERT_TRUE(fast.ok()) << fast.status();
      ASSERT_TRUE(ref.ok()) << ref.status();
      const std::vector<float> a = ToFloats((*fast)[0]), b = ToFloats((*ref)[0]);
      ASSERT_EQ(a.size(), b.size());
      // fp32: the two differ only in log(sum), off by the sums' relative difference: the
      // reference adds its n exps one after another (relative error up to (n - 1) 2^-24, the
      // bound of a recursive sum of positive terms), this kernel in 16 lanes (less), and each
      // exp within 1 ulp: (n + 16) 2^-24 absolute, plus 4e-7 relative for the final rounding of
      // shifted - log(sum). fp16 / bf16: those fp32 values rounded once, so at most one step of
      // the type apart (2^-10 and 2^-7 relative, with an absolute floor of the same size).
      const size_t axis = c.axis < 0 ? c.dims.size() - 1 : static_cast<size_t>(c.axis);
      int64_t row = c.dims[axis];  // elements per row (opset 11: every dim from axis on)
      for (size_t d = axis + 1; c.opset < 13 && d < c.dims.size(); ++d) row *= c.dims[d];
      const float sum_err = static_cast<float>(row + 16) * std::ldexp(1.0f, -24);
      const float rel = dt == DataType::kF32 ? 4e-7f : dt == DataType::kF16 ? 1e-3f : 8e-3f;
      const float abs = sum_err + (dt == DataType::kF32 ? 0.0f : rel);
      int bad = 0;
      for (size_t i = 0; i < a.size() && bad < 5; ++i) {
        if (a[i] != b[i] && !(std::fabs(a[i] - b[i]) <= abs + rel * std::fabs(b[i]))) {
          ADD_FAILURE() << "element " << i << ": fast " << a[i] << " reference " << b[i];
          ++bad;
        }
      }
    }
  }
  // NaN and -Inf rows: NaN everywhere in a row holding a NaN, as the reference.
  NodeSpec spec;
  spec.op = ir::OpType::kLogSoftmax;
  spec.since_version = 13;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  spec.inputs = {MakeFloat({3, 3}, {1.0f, nan, 2.0f, -inf, -inf, -inf, -inf, 0.0f, 1.0f})};
  auto fast = RunNode(spec);
  spec.cpu_features = 0;
  auto ref = RunNode(spec);
  ASSERT_TRUE(fast.ok() && ref.ok());
  const std::vector<float> a = ToFloats((*fast)[0]), b = ToFloats((*ref)[0]);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::isnan(a[i]), std::isnan(b[i])) << i;
    if (!std::isnan(b[i]) && a[i] != b[i]) {
      EXPECT_NEAR(a[i], b[i], 1e-6f) << i;  // rows of 3: (3 + 16) 2^-24 as the bound above
    }
  }
}

}  // namespace
}  // namespace kiln::testing
