// The fast data-movement kernels (cpu/avx512/memory_ops.cc, memory_join_ops.cc) against the
// reference kernels, byte for byte: Slice (steps of any sign, axes given or not, starts and ends
// past the bounds, a size-1 innermost axis, the collapse to one memcpy), Transpose of 1- and
// 8-byte types (rows copied, tiles, size-1 axes), Expand and Tile (broadcast inner and outer
// axes), constant Pad (positive, negative and mixed pads, axes, opset 2's attribute value),
// Concat, Split and Gather on every axis with small and long chunks, int32 and negative indices;
// every element size (1, 2, 4, 8 bytes: bool, int8, fp16, bf16, fp32, int64, double), shapes
// large enough to run on the threads, and the reference's errors for bad arguments. Random bits
// (NaN payloads included) show that bits move untouched.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;
using kernels::Isa;

ir::Tensor RandomBits(DataType dtype, const Dims& dims, std::mt19937& rng) {
  ir::Tensor t = *ir::Tensor::Allocate(dtype, dims);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  // bool must hold 0 or 1 (the reference would copy other bytes just as well, but a bool
  // tensor never holds them).
  for (size_t i = 0; i < t.byte_size(); ++i) {
    p[i] = static_cast<uint8_t>(dtype == DataType::kBool ? rng() & 1 : rng());
  }
  return t;
}

ir::Tensor Ints(const Dims& v, DataType dt = DataType::kI64) {
  if (dt == DataType::kI32) {
    std::vector<int32_t> w(v.begin(), v.end());
    return MakeTensor<int32_t>({static_cast<int64_t>(v.size())}, w, dt);
  }
  return MakeInt64({static_cast<int64_t>(v.size())}, v);
}

const DataType kAllSizes[] = {DataType::kBool, DataType::kI8,  DataType::kF16, DataType::kBF16,
                              DataType::kF32,  DataType::kI64, DataType::kF64};

#define SKIP_WITHOUT_AVX512() \
  if (!kernels::CpuHasIsa(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU"

TEST(MemoryOps, RegistryPicksTheFastKernels) {
  SKIP_WITHOUT_AVX512();
  for (ir::OpType op :
       {ir::OpType::kSlice, ir::OpType::kConcat, ir::OpType::kSplit, ir::OpType::kGather,
        ir::OpType::kPad, ir::OpType::kTile, ir::OpType::kExpand, ir::OpType::kTranspose}) {
    for (DataType t : {DataType::kBool, DataType::kI64, DataType::kU8, DataType::kF64}) {
      auto def = FindKernelFor(op, t, DetectCpuFeatures());
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kAvx512) << ir::OpName(op) << " " << DataTypeOnnxName(t);
    }
  }
}

TEST(MemoryOps, SliceMatchesReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(1);
  struct Case {
    std::string name;
    Dims dims, starts, ends, axes, steps;  // axes / steps empty: the input omitted
  };
  const std::vector<Case> cases = {
      {"identity_inner1", {6, 64, 50, 1}, {0, 0, 0, 0}, {6, 64, 50, 1}, {0, 1, 2, 3}, {1, 1, 1, 1}},
      {"rows_step2", {1, 3, 40, 42}, {0}, {1000}, {2}, {2}},
      {"inner_step2", {1, 3, 20, 42}, {1}, {INT64_MAX}, {3}, {2}},
      {"negative_steps", {3, 5, 17}, {-1, 100}, {-1000, 2}, {2, 1}, {-3, -1}},
      {"no_axes_no_steps", {7, 9, 11}, {1, -5}, {5, -1}, {}, {}},
      {"negative_axes", {4, 6, 8, 10}, {2, 1}, {7, 5}, {-1, -3}, {}},
      {"empty_result", {4, 6}, {3}, {1}, {1}, {1}},
      {"large_threads", {8, 128, 300}, {0, 5}, {8, 290}, {0, 2}, {1, 1}},
      {"large_strided", {4, 256, 256}, {1, 255}, {256, 0}, {1, 2}, {2, -3}},
      {"scalar_axis_step_big", {5, 9}, {0, 8}, {5, -100}, {0, 1}, {1, -20}},
  };
  for (DataType dt : kAllSizes) {
    for (const Case& c : cases) {
      NodeSpec spec;
      spec.op = ir::OpType::kSlice;
      spec.since_version = 13;
      spec.inputs = {RandomBits(dt, c.dims, rng), Ints(c.starts), Ints(c.ends, DataType::kI32)};
      if (!c.axes.empty()) spec.inputs.push_back(Ints(c.axes));
      if (!c.steps.empty()) {
        if (c.axes.empty()) spec.inputs.push_back(ir::Tensor());
        spec.inputs.push_back(Ints(c.steps));
      }
      ExpectSameBytesAsReference(spec, c.name + " " + DataTypeOnnxName(dt));
    }
  }
}

TEST(MemoryOps, SliceErrorsAreTheReferences) {
  SKIP_WITHOUT_AVX512();
  NodeSpec spec;
  spec.op = ir::OpType::kSlice;
  spec.since_version = 13;
  const ir::Tensor x = MakeFloat({2, 3}, Iota(6, 0));
  spec.inputs = {x, Ints({0}), Ints({1}), Ints({5})};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "out of range");
  spec.inputs = {x, Ints({0}), Ints({1}), Ints({0}), Ints({0})};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "step");
  spec.inputs = {x, Ints({0, 0}), Ints({1}), Ints({0})};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "ends");
}

TEST(MemoryOps, TransposeMatchesReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(2);
  struct Case {
    Dims dims, perm;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {3, 1, 0, 2}},
      {{2, 30, 4, 17}, {0, 2, 1, 3}},  // rows memcpy'd
      {{1, 3, 67, 45}, {0, 2, 3, 1}},
      {{3, 70, 33}, {0, 2, 1}},  // tiles, tails
      {{1, 1, 5, 1}, {3, 2, 1, 0}},
      {{5}, {0}},  // size-1 axes, a copy
      {{2, 3, 3, 2, 5}, {4, 0, 3, 2, 1}},
      {{128, 520}, {1, 0}},  // threads
      {{6, 2, 3}, {}},       // default: reversed
  };
  for (DataType dt : {DataType::kBool, DataType::kU8, DataType::kI64, DataType::kF64,
                      DataType::kF32, DataType::kF16}) {
    for (const Case& c : cases) {
      NodeSpec spec;
      spec.op = ir::OpType::kTranspose;
      if (!c.perm.empty()) spec.attrs = {{"perm", IntsAttr(c.perm)}};
      spec.inputs = {RandomBits(dt, c.dims, rng)};
      ExpectSameBytesAsReference(spec, ir::DimsToString(c.dims) + " " + DataTypeOnnxName(dt));
    }
  }
  NodeSpec bad;
  bad.op = ir::OpType::kTranspose;
  bad.attrs = {{"perm", IntsAttr({0, 0})}};
  bad.inputs = {RandomBits(DataType::kI64, {2, 2}, rng)};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "permutation");
}

TEST(MemoryOps, ExpandAndTileMatchReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(3);
  struct Case {
    Dims dims, shape;
  };
  const std::vector<Case> expand = {
      {{3, 1}, {2, 3, 37}},   {{1, 5, 1, 7}, {4, 5, 3, 7}}, {{6, 2048, 1}, {6, 2048, 1}},
      {{1}, {1000, 3}},       {{2, 1, 9}, {1, 1}},          {{1, 1, 300}, {64, 16, 300}},
      {{4, 1, 1}, {4, 0, 5}},
  };
  const std::vector<Case> tile = {
      {{3, 5}, {2, 3}}, {{2, 1, 7}, {1, 40, 3}}, {{4, 3, 2}, {1, 1, 1}},
      {{2, 3}, {0, 2}}, {{64, 100}, {3, 7}},
  };
  for (DataType dt : kAllSizes) {
    for (const Case& c : expand) {
      NodeSpec spec;
      spec.op = ir::OpType::kExpand;
      spec.inputs = {RandomBits(dt, c.dims, rng), Ints(c.shape)};
      ExpectSameBytesAsReference(spec, "Expand " + ir::DimsToString(c.dims) + " to " +
                                           ir::DimsToString(c.shape) + " " + DataTypeOnnxName(dt));
    }
    for (const Case& c : tile) {
      NodeSpec spec;
      spec.op = ir::OpType::kTile;
      spec.inputs = {RandomBits(dt, c.dims, rng), Ints(c.shape, DataType::kI64)};
      ExpectSameBytesAsReference(spec, "Tile " + ir::DimsToString(c.dims) + " by " +
                                           ir::DimsToString(c.shape) + " " + DataTypeOnnxName(dt));
    }
  }
  NodeSpec bad;
  bad.op = ir::OpType::kExpand;
  bad.inputs = {RandomBits(DataType::kF32, {3, 2}, rng), Ints({4, 2})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "");
  bad.op = ir::OpType::kTile;
  bad.inputs = {RandomBits(DataType::kF32, {3, 2}, rng), Ints({2})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "repeats");
}

TEST(MemoryOps, ConstantPadMatchesReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(4);
  struct Case {
    Dims dims, pads, axes;
  };
  const std::vector<Case> cases = {
      {{1, 3, 5, 7}, {0, 0, 1, 2, 0, 0, 3, 4}, {}},       // spatial pads
      {{2, 4, 6}, {1, 0, 0, 0, 2, 1}, {}},                // outer and inner axes
      {{3, 9, 10}, {0, -2, -3, 0, 3, -4}, {}},            // crops mixed with pads
      {{2, 5, 5}, {2, 1, 3, 1}, {-1, 1}},                 // axes, negative
      {{4, 8}, {0, -8, 0, 2}, {}},                        // a whole axis cropped: all constant
      {{1, 64, 100, 100}, {0, 0, 1, 1, 0, 0, 1, 1}, {}},  // threads
  };
  for (DataType dt : kAllSizes) {
    for (const Case& c : cases) {
      NodeSpec spec;
      spec.op = ir::OpType::kPad;
      spec.since_version = 19;
      ir::Tensor value = RandomBits(dt, {}, rng);
      spec.inputs = {RandomBits(dt, c.dims, rng), Ints(c.pads), value};
      if (!c.axes.empty()) spec.inputs.push_back(Ints(c.axes));
      ExpectSameBytesAsReference(spec, ir::DimsToString(c.dims) + " pads " +
                                           ir::DimsToString(c.pads) + " " + DataTypeOnnxName(dt));
      spec.inputs[2] = ir::Tensor();  // no constant: zero
      ExpectSameBytesAsReference(spec, "zero " + ir::DimsToString(c.dims));
    }
  }
  // Opset 2: pads and value as attributes (value converted to the dtype, rounded once).
  for (DataType dt : {DataType::kF16, DataType::kBF16, DataType::kI8, DataType::kF32}) {
    NodeSpec spec;
    spec.op = ir::OpType::kPad;
    spec.since_version = 2;
    spec.attrs = {{"pads", IntsAttr({1, 2, 3, 0})}, {"value", FloatAttr(2.7182818f)}};
    spec.inputs = {RandomBits(dt, {3, 4}, rng)};
    ExpectSameBytesAsReference(spec, std::string("opset 2 ") + DataTypeOnnxName(dt));
  }
  // Edge and reflect (more in avx512_topk_pad_test.cc).
  for (const char* mode : {"edge", "reflect"}) {
    NodeSpec spec;
    spec.op = ir::OpType::kPad;
    spec.since_version = 19;
    spec.attrs = {{"mode", StringAttr(mode)}};
    spec.inputs = {RandomBits(DataType::kF32, {3, 4}, rng), Ints({1, 2, 2, 1})};
    ExpectSameBytesAsReference(spec, mode);
  }
  NodeSpec bad;
  bad.op = ir::OpType::kPad;
  bad.since_version = 19;
  bad.inputs = {RandomBits(DataType::kF32, {3, 4}, rng), Ints({1, 2, 3})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "pads");
  bad.inputs = {RandomBits(DataType::kF32, {3, 4}, rng), Ints({0, -5, 0, 0})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "negative");
}

TEST(MemoryOps, ConcatAndSplitMatchReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(5);
  // {dims of input 0, the axis, sizes along it}: channels-last joins with chunks of 4, 1 and 1
  // elements, long chunks, a leading axis (one chunk per input), an empty input, threads.
  struct Case {
    Dims dims;
    int64_t axis;
    Dims sizes;
  };
  const std::vector<Case> cases = {
      {{1, 52, 52, 0}, 3, {4, 1, 1}},  {{1, 26, 26, 0}, -1, {96, 96}},      {{0, 3, 5}, 0, {2, 7}},
      {{2, 0, 9}, 1, {3, 0, 5, 1}},    {{1, 0, 208, 208}, 1, {3, 3, 3, 3}}, {{7, 0}, 1, {1, 2, 3}},
      {{1, 104, 104, 0}, 3, {24, 24}},
  };
  for (DataType dt : kAllSizes) {
    for (const Case& c : cases) {
      const int rank = static_cast<int>(c.dims.size());
      const int axis = static_cast<int>(c.axis < 0 ? c.axis + rank : c.axis);
      NodeSpec concat;
      concat.op = ir::OpType::kConcat;
      concat.attrs = {{"axis", IntAttr(c.axis)}};
      Dims whole = c.dims;
      whole[axis] = 0;
      for (int64_t s : c.sizes) {
        Dims d = c.dims;
        d[axis] = s;
        whole[axis] += s;
        concat.inputs.push_back(RandomBits(dt, d, rng));
      }
      const std::string name =
          ir::DimsToString(whole) + " axis " + std::to_string(c.axis) + " " + DataTypeOnnxName(dt);
      ExpectSameBytesAsReference(concat, "Concat " + name);
      NodeSpec split;
      split.op = ir::OpType::kSplit;
      split.since_version = 18;
      split.attrs = {{"axis", IntAttr(c.axis)}};
      split.inputs = {RandomBits(dt, whole, rng), Ints(c.sizes)};
      split.num_outputs = static_cast<int>(c.sizes.size());
      ExpectSameBytesAsReference(split, "Split " + name);
    }
  }
  // Split by num_outputs (the last output takes what is left) and evenly (opset 11).
  std::mt19937 rng2(6);
  NodeSpec split;
  split.op = ir::OpType::kSplit;
  split.since_version = 18;
  split.attrs = {{"axis", IntAttr(1)}, {"num_outputs", IntAttr(3)}};
  split.inputs = {RandomBits(DataType::kF32, {2, 8, 3}, rng2)};
  split.num_outputs = 3;
  ExpectSameBytesAsReference(split, "num_outputs");
  split.since_version = 11;
  split.attrs = {{"axis", IntAttr(-1)}};
  split.inputs = {RandomBits(DataType::kI64, {2, 4, 9}, rng2)};
  ExpectSameBytesAsReference(split, "even");
  // The reference's errors.
  NodeSpec bad;
  bad.op = ir::OpType::kConcat;
  bad.attrs = {{"axis", IntAttr(1)}};
  bad.inputs = {RandomBits(DataType::kF32, {2, 3}, rng2), RandomBits(DataType::kF32, {3, 3}, rng2)};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "does not match");
  bad.op = ir::OpType::kSplit;
  bad.since_version = 13;
  bad.inputs = {RandomBits(DataType::kF32, {2, 6}, rng2), Ints({2, 3})};
  bad.num_outputs = 2;
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "sums to");
}

TEST(MemoryOps, GatherMatchesReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(7);
  struct Case {
    Dims dims;
    int64_t axis;
    Dims idx_dims;
  };
  const std::vector<Case> cases = {
      {{10, 7}, 0, {4}},     {{10, 7}, 1, {2, 3}}, {{5, 6, 40}, -2, {3}},   {{5, 6, 40}, 2, {}},
      {{300, 64}, 0, {600}}, {{4, 3}, 0, {0}},     {{2, 50000}, 1, {7, 9}}, {{8, 9, 10}, 1, {2, 2}},
  };
  for (DataType dt : kAllSizes) {
    for (const Case& c : cases) {
      const int rank = static_cast<int>(c.dims.size());
      const int64_t n = c.dims[c.axis < 0 ? c.axis + rank : c.axis];
      for (DataType it : {DataType::kI64, DataType::kI32}) {
        const int64_t count = ir::NumElementsOf(c.idx_dims);
        std::vector<int64_t> v(count);
        for (int64_t& i : v) i = static_cast<int64_t>(rng() % (2 * n)) - n;  // [-n, n)
        ir::Tensor idx;
        if (it == DataType::kI32) {
          idx = MakeTensor<int32_t>(c.idx_dims, std::vector<int32_t>(v.begin(), v.end()), it);
        } else {
          idx = MakeTensor<int64_t>(c.idx_dims, v, it);
        }
        NodeSpec spec;
        spec.op = ir::OpType::kGather;
        spec.attrs = {{"axis", IntAttr(c.axis)}};
        spec.inputs = {RandomBits(dt, c.dims, rng), idx};
        ExpectSameBytesAsReference(spec, ir::DimsToString(c.dims) + " axis " +
                                             std::to_string(c.axis) + " " + DataTypeOnnxName(dt) +
                                             " " + DataTypeOnnxName(it));
      }
    }
  }
  NodeSpec bad;
  bad.op = ir::OpType::kGather;
  bad.inputs = {RandomBits(DataType::kF32, {3, 2}, rng), MakeInt64({2}, {0, 3})};
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "out of range");
}

}  // namespace
}  // namespace kiln::testing
