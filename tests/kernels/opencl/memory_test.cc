// The OpenCL memory ops (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Slice, Gather,
// Expand, Split, Tile, Pad) against the reference kernels at fp32, fp16 and bf16 storage, on the
// machine's OpenCL device (PoCL in CI). They only move elements, so the outputs must equal the
// reference's bit for bit: the inputs are random bit patterns (NaNs with payloads, a signalling
// NaN, negative zero) that any conversion on the way would change. Each case runs with its
// shape-like inputs as graph constants and as plain device tensors (read back at run time), and
// errors must be the reference's: same code, same message naming the node.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;
using Dims = std::vector<int64_t>;

const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

// Random bits of storage type `dt`, with a quiet NaN with a payload, a signalling NaN and -0
// first.
ir::Tensor RandomBits(DataType dt, const Dims& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = ir::NumElementsOf(dims);
  if (dt == DataType::kF32) {
    std::vector<uint32_t> v(n);
    for (uint32_t& x : v) x = rng();
    const uint32_t special[] = {0x7fc01234u, 0xffa00001u, 0x80000000u};
    for (int64_t i = 0; i < n && i < 3; ++i) v[i] = special[i];
    return MakeTensor<uint32_t>(dims, v, dt);
  }
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());
  const uint16_t special[] = {static_cast<uint16_t>(dt == DataType::kF16 ? 0x7e05u : 0x7fc5u),
                              static_cast<uint16_t>(dt == DataType::kF16 ? 0xfd01u : 0xff81u),
                              0x8000u};
  for (int64_t i = 0; i < n && i < 3; ++i) v[i] = special[i];
  return MakeTensor<uint16_t>(dims, v, dt);
}

ir::Tensor I64(Dims dims, std::vector<int64_t> v) { return MakeInt64(std::move(dims), v); }
ir::Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return MakeInt64({n}, v);
}
ir::Tensor I32(Dims dims, std::vector<int32_t> v) {
  return MakeTensor<int32_t>(std::move(dims), v, DataType::kI32);
}

// One node: data inputs of `data` dims (random bits), then `params` (an undefined tensor omits
// one; a float one takes the data's storage type, as Pad's constant_value must).
struct Case {
  OpType op;
  Attrs attrs;
  std::vector<Dims> data;
  std::vector<ir::Tensor> params = {};
  int since_version = 23;
  int num_outputs = 1;
};

std::vector<NodeSpec> Specs(const Case& c, DataType dt, uint32_t seed) {
  NodeSpec ref;
  ref.op = c.op;
  ref.attrs = c.attrs;
  ref.num_outputs = c.num_outputs;
  ref.since_version = c.since_version;
  for (const Dims& d : c.data) ref.inputs.push_back(RandomBits(dt, d, seed++));
  for (const ir::Tensor& p : c.params) {
    const int index = static_cast<int>(ref.inputs.size());
    if (p.defined() && p.dtype() == DataType::kF32 && dt != DataType::kF32) {
      ref.inputs.push_back(dt == DataType::kF16 ? MakeHalf(p.dims(), ToFloats(p))
                                                : MakeBf16(p.dims(), ToFloats(p)));
    } else {
      ref.inputs.push_back(p);
    }
    if (p.defined()) ref.constant_inputs.push_back(index);
  }
  ref.cpu_features = 0;
  NodeSpec cl = ref;
  cl.cpu_features.reset();
  cl.opencl = true;
  cl.runs = 2;  // the second run reuses the programs and the plan buffer
  NodeSpec cl_dynamic = cl;
  cl_dynamic.constant_inputs.clear();
  return {ref, cl, cl_dynamic};
}

std::string Name(const Case& c, DataType dt, size_t k) {
  std::string dims;
  for (const Dims& d : c.data) absl::StrAppend(&dims, ir::DimsToString(d));
  return absl::StrCat(ir::OpName(c.op), " ", dims, " opset ", c.since_version, " ",
                      DataTypeOnnxName(dt), k == 1 ? " (constant params)" : " (device params)");
}

// The OpenCL outputs equal the reference's, bit for bit, for every type and both kinds of params.
void Check(const std::vector<Case>& cases) {
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (DataType dt : kTypes) {
      const std::vector<NodeSpec> specs = Specs(c, dt, seed);
      seed += 10;
      absl::StatusOr<std::vector<ir::Tensor>> want = RunNode(specs[0]);
      ASSERT_TRUE(want.ok()) << Name(c, dt, 0) << ": " << want.status();
      for (size_t k = 1; k < specs.size(); ++k) {
        SCOPED_TRACE(Name(c, dt, k));
        absl::StatusOr<std::vector<ir::Tensor>> got = RunNode(specs[k]);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->size(), want->size());
        for (size_t o = 0; o < want->size(); ++o) {
          const ir::Tensor& w = (*want)[o];
          const ir::Tensor& g = (*got)[o];
          ASSERT_EQ(g.dtype(), w.dtype()) << "output " << o;
          ASSERT_EQ(g.dims(), w.dims()) << "output " << o;
          ASSERT_EQ(g.byte_size(), w.byte_size());
          const size_t es = DataTypeSize(w.dtype());
          for (int64_t i = 0; i < w.num_elements(); ++i) {
            const char* wp = static_cast<const char*>(w.raw_data()) + i * es;
            const char* gp = static_cast<const char*>(g.raw_data()) + i * es;
            if (std::memcmp(wp, gp, es) != 0) {
              ADD_FAILURE() << "output " << o << " element " << i << " differs";
              break;
            }
          }
        }
      }
    }
  }
}

// The OpenCL node fails as the reference does: same code, same message (naming the node), which
// contains `fragment`.
void CheckError(const Case& c, absl::StatusCode code, const std::string& fragment) {
  for (DataType dt : kTypes) {
    const std::vector<NodeSpec> specs = Specs(c, dt, 7);
    const absl::Status want = RunNode(specs[0]).status();
    SCOPED_TRACE(Name(c, dt, 0));
    ExpectStatusError(want, code, fragment);
    for (size_t k = 1; k < specs.size(); ++k) {
      const absl::Status got = RunNode(specs[k]).status();
      ExpectStatusError(got, code, fragment);
      EXPECT_EQ(got.message(), want.message());
    }
  }
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(OpenClMemoryTest, Transpose) {
  Check({
      {OpType::kTranspose, {}, {{5}}},
      {OpType::kTranspose, {}, {{}}},
      {OpType::kTranspose, {}, {{2, 3, 4}}},
      {OpType::kTranspose, {{"perm", IntsAttr({2, 0, 1})}}, {{2, 3, 4}}},
      {OpType::kTranspose, {{"perm", IntsAttr({0, 2, 1})}}, {{3, 17, 33}}},
      {OpType::kTranspose, {{"perm", IntsAttr({4, 2, 0, 3, 1})}}, {{2, 3, 1, 4, 2}}},
      {OpType::kTranspose, {{"perm", IntsAttr({5, 0, 4, 1, 3, 2})}}, {{2, 1, 3, 2, 2, 3}}},
      {OpType::kTranspose, {}, {{2, 1, 2, 1, 2, 3, 2}}},
      {OpType::kTranspose, {{"perm", IntsAttr({1, 0})}}, {{0, 3}}},
  });
  CheckError({OpType::kTranspose, {{"perm", IntsAttr({0, 0, 1})}}, {{2, 3, 4}}}, kInvalid,
             "is not a permutation");
  CheckError({OpType::kTranspose, {{"perm", IntsAttr({1, 0})}}, {{2, 3, 4}}}, kInvalid,
             "perm has 2 entries");
  CheckError({OpType::kTranspose, {{"perm", IntsAttr({0, 3, 1})}}, {{2, 3, 4}}}, kInvalid,
             "is not a permutation");
}

TEST(OpenClMemoryTest, ReshapeAndItsKin) {
  Check({
      {OpType::kReshape, {}, {{2, 3, 4}}, {I64({4, -1})}},
      {OpType::kReshape, {}, {{2, 3, 4}}, {I64({0, 0, -1})}},
      {OpType::kReshape, {}, {{2, 3, 4}}, {I64({-1})}},
      {OpType::kReshape, {}, {{24}}, {I64({1, 2, 3, 1, 4})}},
      {OpType::kReshape, {}, {{2, 3, 4}}, {I32({6}, {1, 2, 1, 3, 2, 2})}},
      {OpType::kReshape, {{"allowzero", IntAttr(1)}}, {{0, 3, 4}}, {I64({3, 0})}},
      {OpType::kReshape, {}, {{0, 3, 4}}, {I64({0, 12})}},
      {OpType::kFlatten, {{"axis", IntAttr(0)}}, {{2, 3, 4}}},
      {OpType::kFlatten, {}, {{2, 3, 4}}},
      {OpType::kFlatten, {{"axis", IntAttr(-1)}}, {{2, 3, 1, 2, 2}}},
      {OpType::kFlatten, {{"axis", IntAttr(0)}}, {{}}},
      {OpType::kSqueeze, {}, {{2, 1, 3, 1}}, {I64({1, -1})}},
      {OpType::kSqueeze, {}, {{1, 3, 1, 1, 2}}},
      {OpType::kSqueeze, {{"axes", IntsAttr({0})}}, {{1, 4}}, {}, 11},
      {OpType::kSqueeze, {}, {{0, 1, 3}}, {I64({1})}},
      {OpType::kUnsqueeze, {}, {{3, 4}}, {I64({0, -1})}},
      {OpType::kUnsqueeze, {}, {{2, 3, 4, 5}}, {I64({1, 3})}},
      {OpType::kUnsqueeze, {{"axes", IntsAttr({1})}}, {{7}}, {}, 11},
      {OpType::kUnsqueeze, {}, {{}}, {I64({0})}},
  });
  CheckError({OpType::kReshape, {}, {{2, 3, 4}}, {I64({-1, -1})}}, kInvalid, "has two -1");
  CheckError({OpType::kReshape, {}, {{2, 3, 4}}, {I64({5, 5})}}, kInvalid, "has 25 elements");
  CheckError({OpType::kReshape, {}, {{2, 3, 4}}, {MakeFloat({2}, {4, 6})}}, kInvalid,
             "must be int64 or int32");
  CheckError({OpType::kFlatten, {{"axis", IntAttr(4)}}, {{2, 3, 4}}}, kInvalid,
             "out of range for rank 3");
  CheckError({OpType::kSqueeze, {}, {{2, 1}}, {I64({0})}}, kInvalid, "cannot squeeze axis 0");
  CheckError({OpType::kSqueeze, {}, {{2, 1}}, {I64({-3})}}, kInvalid, "out of range");
  CheckError({OpType::kUnsqueeze, {}, {{2, 3}}, {I64({1, 1})}}, kInvalid, "is repeated");
  CheckError({OpType::kUnsqueeze, {}, {{2, 3}}, {I64({4})}}, kInvalid, "out of range");
  CheckError({OpType::kUnsqueeze, {}, {{2, 3}}}, kInvalid, "axes are required");
}

TEST(OpenClMemoryTest, Concat) {
  Check({
      {OpType::kConcat, {{"axis", IntAttr(1)}}, {{2, 3}, {2, 1}, {2, 4}}},
      {OpType::kConcat, {{"axis", IntAttr(-1)}}, {{2, 2, 3}, {2, 2, 1}}},
      {OpType::kConcat, {}, {{3}, {0}, {4}}},
      {OpType::kConcat, {{"axis", IntAttr(2)}}, {{1, 2, 1, 2, 1, 3}, {1, 2, 2, 2, 1, 3}}},
      {OpType::kConcat, {{"axis", IntAttr(-6)}}, {{1, 2, 1, 2, 1, 3}, {2, 2, 1, 2, 1, 3}}},
      {OpType::kConcat, {{"axis", IntAttr(1)}}, {{0, 3}, {0, 2}}},
      {OpType::kConcat, {}, {{5, 7}}},
  });
  CheckError({OpType::kConcat, {{"axis", IntAttr(1)}}, {{2, 3}, {3, 3}}}, kInvalid,
             "does not match input 0");
  CheckError({OpType::kConcat, {{"axis", IntAttr(2)}}, {{2, 3}, {2, 3}}}, kInvalid,
             "out of range for rank 2");
  CheckError({OpType::kConcat, {{"axis", IntAttr(-3)}}, {{2, 3}, {2, 3}}}, kInvalid,
             "out of range for rank 2");
}

TEST(OpenClMemoryTest, Slice) {
  const ir::Tensor none;
  Check({
      {OpType::kSlice, {}, {{10}}, {I64({2}), I64({8})}},
      {OpType::kSlice, {}, {{10}}, {I64({-1}), I64({-100}), none, I64({-2})}},
      {OpType::kSlice, {}, {{4, 5, 6}}, {I64({1, -4}), I64({3, 1000}), I64({0, -1}), I64({1, 2})}},
      {OpType::kSlice, {}, {{4, 5, 6}}, {I64({3, 4}), I64({0, -6}), I64({-3, 1}), I64({-1, -2})}},
      {OpType::kSlice,
       {},
       {{2, 3, 2, 3, 2, 4}},
       {I64({2, 1, 3}), I64({-10, 3, 0}), I64({1, 3, 5}), I64({-1, 1, -2})}},
      {OpType::kSlice,
       {},
       {{2, 3, 2, 3, 2}},
       {I32({2}, {1, -2}), I32({2}, {2, 100}), I32({2}, {4, 1})}},
      {OpType::kSlice, {}, {{4, 5}}, {I64({3}), I64({1}), I64({0})}},
      {OpType::kSlice, {}, {{0, 5}}, {I64({1}), I64({4}), I64({1})}},
      {OpType::kSlice,
       {{"starts", IntsAttr({1, 0})}, {"ends", IntsAttr({3, -1})}, {"axes", IntsAttr({1, 0})}},
       {{3, 4}},
       {},
       9},
  });
  CheckError({OpType::kSlice, {}, {{4, 5, 6}}, {I64({0}), I64({1}), I64({3})}}, kInvalid,
             "axis 3 is out of range for rank 3");
  CheckError({OpType::kSlice, {}, {{4, 5, 6}}, {I64({0}), I64({1}), I64({1}), I64({0})}}, kInvalid,
             "is 0");
  CheckError({OpType::kSlice, {}, {{4, 5, 6}}, {I64({0, 0}), I64({1, 1}), I64({1, -2})}}, kInvalid,
             "is repeated");
  CheckError({OpType::kSlice, {}, {{4, 5, 6}}, {I64({0, 0}), I64({1})}}, kInvalid,
             "but ends has 1");
}

TEST(OpenClMemoryTest, Gather) {
  Check({
      {OpType::kGather, {}, {{5, 3}}, {I64({4, 0, -1, 2})}},
      {OpType::kGather, {{"axis", IntAttr(-1)}}, {{2, 3, 4}}, {I32({2, 2}, {2, 0, 1, -3})}},
      {OpType::kGather, {{"axis", IntAttr(1)}}, {{3, 4}}, {I64({}, {1})}},
      {OpType::kGather, {{"axis", IntAttr(2)}}, {{2, 3, 2, 2, 3}}, {I64({1, 0, -1, -2})}},
      {OpType::kGather, {{"axis", IntAttr(5)}}, {{2, 1, 3, 1, 2, 4}}, {I64({3, 3, 0})}},
      {OpType::kGather, {}, {{7}}, {I64({6, -7, 3})}},
      {OpType::kGather, {}, {{4, 3}}, {I64({0}, {})}},
      {OpType::kGather, {{"axis", IntAttr(1)}}, {{0, 3}}, {I64({2, 1})}},
  });
  CheckError({OpType::kGather, {}, {{5, 3}}, {I64({1, 5})}}, kInvalid,
             "index 5 is out of range for a dimension of size 5");
  CheckError({OpType::kGather, {}, {{5, 3}}, {I64({-6})}}, kInvalid, "index -6 is out of range");
  CheckError({OpType::kGather, {{"axis", IntAttr(2)}}, {{5, 3}}, {I64({0})}}, kInvalid,
             "out of range for rank 2");
}

TEST(OpenClMemoryTest, Expand) {
  Check({
      {OpType::kExpand, {}, {{3, 1}}, {I64({2, 1, 4})}},
      {OpType::kExpand, {}, {{1}}, {I64({5})}},
      {OpType::kExpand, {}, {{4}}, {I64({0}, {})}},
      {OpType::kExpand, {}, {{1, 3, 1, 2, 1, 1}}, {I64({2, 1, 2, 1, 2, 3})}},
      {OpType::kExpand, {}, {{2, 1, 3}}, {I64({4, 1})}},
      {OpType::kExpand, {}, {{1, 3}}, {I64({0, 3})}},
      {OpType::kExpand, {}, {{}}, {I64({2, 1, 3, 1, 2})}},
  });
  CheckError({OpType::kExpand, {}, {{2, 3}}, {I64({4, 3})}}, kInvalid, "cannot be broadcast");
  CheckError({OpType::kExpand, {}, {{2, 3}}, {I64({-1, 3})}}, kInvalid, "has a negative dim");
}

TEST(OpenClMemoryTest, Split) {
  Check({
      {OpType::kSplit, {}, {{6, 4}}, {I64({2, 4})}, 23, 2},
      {OpType::kSplit, {{"axis", IntAttr(-1)}}, {{2, 9}}, {}, 23, 3},
      {OpType::kSplit, {{"axis", IntAttr(1)}, {"num_outputs", IntAttr(3)}}, {{2, 7}}, {}, 18, 3},
      {OpType::kSplit, {{"split", IntsAttr({1, 2})}}, {{3}}, {}, 11, 2},
      {OpType::kSplit, {{"axis", IntAttr(2)}}, {{2, 2, 6, 1, 2}}, {I64({1, 0, 5})}, 23, 3},
      {OpType::kSplit, {{"axis", IntAttr(-3)}}, {{1, 2, 1, 4, 1, 2}}, {}, 23, 2},
      {OpType::kSplit, {{"axis", IntAttr(1)}}, {{0, 4}}, {}, 23, 2},
  });
  CheckError({OpType::kSplit, {}, {{6, 4}}, {I64({2, 2})}, 23, 2}, kInvalid, "sums to 4");
  CheckError({OpType::kSplit, {{"axis", IntAttr(2)}}, {{6, 4}}, {}, 23, 2}, kInvalid,
             "out of range for rank 2");
  CheckError({OpType::kSplit, {}, {{5, 4}}, {}, 23, 2}, kInvalid, "does not split evenly");
  CheckError({OpType::kSplit, {{"num_outputs", IntAttr(0)}}, {{6, 4}}, {}, 18, 2}, kInvalid,
             "num_outputs must be >= 1");
}

TEST(OpenClMemoryTest, Tile) {
  Check({
      {OpType::kTile, {}, {{3}}, {I64({2})}},
      {OpType::kTile, {}, {{2, 1, 3}}, {I64({1, 4, 2})}},
      {OpType::kTile, {}, {{1, 2, 1, 2, 1}}, {I64({2, 1, 3, 1, 2})}},
      {OpType::kTile, {}, {{2, 1, 2, 1, 2, 1}}, {I32({6}, {1, 2, 1, 3, 1, 2})}},
      {OpType::kTile, {}, {{2, 3}}, {I64({0, 2})}},
      {OpType::kTile, {}, {{0, 2}}, {I64({3, 2})}},
  });
  CheckError({OpType::kTile, {}, {{2, 3}}, {I64({2})}}, kInvalid, "repeats has 1 entries");
  CheckError({OpType::kTile, {}, {{2, 3}}, {I64({2, -1})}}, kInvalid, "repeats must be >= 0");
}

TEST(OpenClMemoryTest, Pad) {
  const ir::Tensor none;
  const Attrs reflect = {{"mode", StringAttr("reflect")}};
  const Attrs edge = {{"mode", StringAttr("edge")}};
  Check({
      {OpType::kPad, {}, {{3, 4}}, {I64({1, 2, 0, 1}), MakeFloat({}, {7.5f})}},
      {OpType::kPad, {}, {{3, 4}}, {I64({1, 2, 0, 1})}},
      {OpType::kPad, {}, {{3, 4}}, {I64({1, 2, 0, 1}), MakeFloat({0}, {})}},
      {OpType::kPad, reflect, {{3, 4}}, {I64({2, 5, 2, 3})}},
      {OpType::kPad, reflect, {{5}}, {I64({3, 2})}},
      {OpType::kPad, reflect, {{1, 3}}, {I64({2, 1, 1, 2})}},
      {OpType::kPad, edge, {{2, 3, 4}}, {I64({0, 1, 2, 1, 0, 3})}},
      {OpType::kPad, edge, {{1, 2, 1, 2, 3}}, {I64({1, 0, 2, 1, 0, 0, 1, 0, 2, 1})}},
      {OpType::kPad, {{"mode", StringAttr("wrap")}}, {{3, 4}}, {I64({1, 5, 2, 0})}},
      {OpType::kPad, {}, {{4, 5}}, {I64({-1, 2, 1, -2}), MakeFloat({1}, {-3.0f})}},
      {OpType::kPad, edge, {{4, 5}}, {I64({-1, 2, 1, -2})}},
      {OpType::kPad, {}, {{2, 3, 4}}, {I64({1, 1, 2, 2}), none, I64({-1, 0})}},
      {OpType::kPad, {}, {{0, 3}}, {I64({1, 0, 1, 0}), MakeFloat({}, {2.0f})}},
      {OpType::kPad, {}, {{1, 2, 1, 2, 1, 2}}, {I64({0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0})}},
      {OpType::kPad,
       {{"pads", IntsAttr({1, 0, 0, 2})}, {"value", FloatAttr(3.25f)}},
       {{2, 3}},
       {},
       2},
  });
  CheckError({OpType::kPad, {{"mode", StringAttr("bogus")}}, {{3, 4}}, {I64({1, 1, 1, 1})}},
             kInvalid, "mode must be constant, reflect, edge or wrap");
  CheckError({OpType::kPad, {}, {{3, 4}}, {I64({1, 1, 1})}}, kInvalid, "pads has 3 entries");
  CheckError({OpType::kPad, reflect, {{0, 4}}, {I64({1, 0, 1, 0})}}, kInvalid,
             "cannot pad an empty axis 0");
  CheckError({OpType::kPad, {}, {{3, 4}}, {I64({-2, 0, -2, 0})}}, kInvalid, "give a negative size");
  CheckError({OpType::kPad, {}, {{3, 4}}, {I64({1, 1, 1, 1}), MakeFloat({2}, {1, 2})}}, kInvalid,
             "constant_value must be a scalar");
}

// Integer data is not theirs: the OpenCL registry refuses it (placement keeps such nodes on the
// CPU), and the reference still runs it.
TEST(OpenClMemoryTest, OnlyFloatStorageRunsOnTheDevice) {
  NodeSpec spec;
  spec.op = OpType::kTranspose;
  spec.inputs = {I64({2, 2}, {1, 2, 3, 4})};
  spec.opencl = true;
  ExpectNodeError(spec, absl::StatusCode::kUnimplemented, "unsupported dtype");
  spec.opencl = false;
  spec.cpu_features = 0;
  EXPECT_EQ(Values<int64_t>(RunNodeOk0(spec)), (std::vector<int64_t>{1, 3, 2, 4}));
}

}  // namespace
}  // namespace kiln::testing
