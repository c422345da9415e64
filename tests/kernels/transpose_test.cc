// The AVX-512 Transpose (cpu/avx512/transpose_ops.cc) against the reference kernel, bit for bit:
// few-row batched transposes (NCHW to NHWC of 1 to 16 planes, column counts with and without a
// tail of less than 16 (32 for 2-byte types), a batch, int32, fp16, bf16) on the permute path,
// other batched 2-D transposes in 16 x 16 tiles (4- and 2-byte elements, row and column tails), a
// permutation of size-1 axes as a copy, every other permutation on the reference inside it, NaN
// payloads moved untouched, and the reference's error for a bad perm.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;

// Random bits (NaN payloads included) in a tensor of `dtype` and `dims`.
ir::Tensor RandomBits(DataType dtype, const Dims& dims, std::mt19937& rng) {
  ir::Tensor t = *ir::Tensor::Allocate(dtype, dims);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

ir::Tensor Transpose(const ir::Tensor& x, const Dims& perm, std::optional<uint64_t> cpu) {
  NodeSpec spec;
  spec.op = ir::OpType::kTranspose;
  spec.attrs = {{"perm", IntsAttr(perm)}};
  spec.inputs = {x};
  spec.cpu_features = cpu;
  spec.runs = 2;  // the second run on the plan the first made
  return RunNodeOk0(spec);
}

TEST(Avx512Transpose, MatchesTheReferenceBitForBit) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  struct Case {
    DataType dtype;
    Dims dims, perm;
  };
  const Case cases[] = {
      {DataType::kF32, {1, 3, 224, 224}, {0, 2, 3, 1}},  // an image's planes: 3 x 50176
      {DataType::kF32, {2, 3, 17, 19}, {0, 2, 3, 1}},    // a batch; 323 columns, a tail of 3
      {DataType::kF32, {1, 16, 5, 7}, {0, 2, 3, 1}},     // 16 rows, 35 columns
      {DataType::kF32, {1, 2, 9, 1}, {0, 2, 3, 1}},      // 2 rows, 9 columns: the tail alone
      {DataType::kI32, {4, 40}, {1, 0}},                 // int32, a plain 2-D transpose
      {DataType::kF32, {1, 17, 6, 6}, {0, 2, 3, 1}},     // 17 rows: 16 x 16 tiles, tails of 1, 4
      {DataType::kF32, {1, 6, 6, 3}, {0, 3, 1, 2}},      // NHWC to NCHW: 36 rows, 3 columns
      {DataType::kF32, {1, 56, 56, 112}, {0, 3, 1, 2}},  // NHWC to NCHW: whole tiles, threads
      {DataType::kF32, {1, 112, 7, 9}, {0, 2, 3, 1}},    // 112 rows, 63 columns: a column tail
      {DataType::kU32, {3, 20, 33}, {0, 2, 1}},          // a batch, tails in both directions
      {DataType::kF32, {1, 1, 1, 40}, {0, 3, 1, 2}},     // only size-1 axes move: a copy
      {DataType::kF32, {2, 1, 3, 1}, {3, 2, 1, 0}},      // 2 and 3 swap: 2 rows, the tail
      {DataType::kF32, {2, 3, 4, 5}, {3, 1, 0, 2}},      // no batched transpose: the reference
      {DataType::kF16, {1, 3, 224, 224}, {0, 2, 3, 1}},  // fp16 planes: 3 x 50176
      {DataType::kF16, {2, 3, 17, 19}, {0, 2, 3, 1}},    // 323 columns, a tail of 3 after 32s
      {DataType::kBF16, {1, 16, 5, 7}, {0, 2, 3, 1}},    // 16 rows, 35 columns
      {DataType::kI16, {1, 5, 31, 1}, {0, 2, 3, 1}},     // 31 columns: the tail alone
      {DataType::kF16, {1, 1, 1, 40}, {0, 3, 1, 2}},     // a copy
      {DataType::kF16, {1, 6, 6, 3}, {0, 3, 1, 2}},      // 2-byte, 36 rows: 16 x 16 tiles
      {DataType::kBF16, {1, 28, 28, 37}, {0, 3, 1, 2}},  // 2-byte NHWC to NCHW, column tail
  };
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    SCOPED_TRACE(ir::DimsToString(c.dims) + " perm " + ir::DimsToString(c.perm));
    const ir::Tensor x = RandomBits(c.dtype, c.dims, rng);
    const ir::Tensor want = Transpose(x, c.perm, 0), got = Transpose(x, c.perm, std::nullopt);
    ASSERT_TRUE(want.defined() && got.defined());
    ASSERT_EQ(got.dims(), want.dims());
    ASSERT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.byte_size()), 0);
  }
}

TEST(Avx512Transpose, ChosenForFourAndTwoByteTypesAndReportsABadPerm) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (DataType t : {DataType::kF32, DataType::kI32, DataType::kU32, DataType::kF16,
                     DataType::kBF16, DataType::kI16, DataType::kU16}) {
    ir::Graph g;
    ir::Node* n = g.AddNode(ir::OpType::kTranspose, "t");
    ir::Value* v = *g.AddValue("x");
    v->dtype = t;
    n->inputs.push_back(v);
    n->outputs.push_back(*g.AddValue("y"));
    auto def = kernels::Registry::Default().Find(*n);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ((*def)->isa, kernels::Isa::kAvx512) << DataTypeName(t);
  }
  std::mt19937 rng(9);
  NodeSpec spec;
  spec.op = ir::OpType::kTranspose;
  spec.attrs = {{"perm", IntsAttr({0, 2, 2, 1})}};
  spec.inputs = {RandomBits(DataType::kF32, {1, 3, 4, 4}, rng)};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "is not a permutation");
}

}  // namespace
}  // namespace kiln::testing
