// Reference kernels of the bitwise ops: BitwiseAnd/Or/Xor/Not and BitShift.
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/kernels/nn_test_util.h"

namespace kiln::testing::bitwise {
namespace {

using ir::OpType;
using nn::ExpectInvalid;
using nn::RunOp;

template <typename T>
std::vector<T> RunInts(OpType op, std::vector<ir::Tensor> inputs, nn::Attrs attrs = {},
                       std::vector<int64_t>* dims = nullptr) {
  auto r = RunOp(op, std::move(inputs), std::move(attrs));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(DataTypeSize((*r)[0].dtype()), sizeof(T));
  if (dims) *dims = (*r)[0].dims();
  return Values<T>((*r)[0]);
}

TEST(BitwiseTest, AndOrXorInt32WithBroadcast) {
  auto a = MakeTensor<int32_t>({2, 2}, {0b1100, 0b1010, -1, 0}, DataType::kI32);
  auto b = MakeTensor<int32_t>({2}, {0b1010, 0b0110}, DataType::kI32);  // broadcast over rows
  std::vector<int64_t> dims;
  EXPECT_EQ(RunInts<int32_t>(OpType::kBitwiseAnd, {a, b}, {}, &dims),
            (std::vector<int32_t>{0b1000, 0b0010, 0b1010, 0}));
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(RunInts<int32_t>(OpType::kBitwiseOr, {a, b}),
            (std::vector<int32_t>{0b1110, 0b1110, -1, 0b0110}));
  EXPECT_EQ(RunInts<int32_t>(OpType::kBitwiseXor, {a, b}),
            (std::vector<int32_t>{0b0110, 0b1100, ~0b1010, 0b0110}));
}

TEST(BitwiseTest, NarrowAndWideTypesKeepTheirBits) {
  // uint8 operands promote to int in C++; the result must be the uint8 bit pattern.
  auto a = MakeTensor<uint8_t>({2}, {0xF0, 0xFF}, DataType::kU8);
  auto b = MakeTensor<uint8_t>({2}, {0x0F, 0x81}, DataType::kU8);
  EXPECT_EQ(RunInts<uint8_t>(OpType::kBitwiseXor, {a, b}), (std::vector<uint8_t>{0xFF, 0x7E}));
  auto c = MakeTensor<uint64_t>({1}, {0x8000000000000001ull}, DataType::kU64);
  auto d = MakeTensor<uint64_t>({1}, {0x8000000000000000ull}, DataType::kU64);
  EXPECT_EQ(RunInts<uint64_t>(OpType::kBitwiseAnd, {c, d}),
            (std::vector<uint64_t>{0x8000000000000000ull}));
  auto e = MakeTensor<int16_t>({1}, {-32768}, DataType::kI16);
  auto f = MakeTensor<int16_t>({1}, {1}, DataType::kI16);
  EXPECT_EQ(RunInts<int16_t>(OpType::kBitwiseOr, {e, f}), (std::vector<int16_t>{-32767}));
}

TEST(BitwiseTest, Not) {
  EXPECT_EQ(
      RunInts<int8_t>(OpType::kBitwiseNot, {MakeTensor<int8_t>({3}, {5, 0, -128}, DataType::kI8)}),
      (std::vector<int8_t>{-6, -1, 127}));
  EXPECT_EQ(RunInts<uint16_t>(OpType::kBitwiseNot,
                              {MakeTensor<uint16_t>({2}, {0, 0x00FF}, DataType::kU16)}),
            (std::vector<uint16_t>{0xFFFF, 0xFF00}));
}

TEST(BitShiftTest, LeftAndRightWithBroadcast) {
  auto x = MakeTensor<uint8_t>({3}, {1, 2, 129}, DataType::kU8);
  auto one = MakeTensor<uint8_t>({1}, {1}, DataType::kU8);
  EXPECT_EQ(RunInts<uint8_t>(OpType::kBitShift, {x, one}, {{"direction", StringAttr("LEFT")}}),
            (std::vector<uint8_t>{2, 4, 2}));  // 129 << 1 drops the top bit
  EXPECT_EQ(RunInts<uint8_t>(OpType::kBitShift, {x, one}, {{"direction", StringAttr("RIGHT")}}),
            (std::vector<uint8_t>{0, 1, 64}));
  auto big = MakeTensor<uint64_t>({2}, {1ull << 63, 12}, DataType::kU64);
  auto amt = MakeTensor<uint64_t>({2}, {63, 2}, DataType::kU64);
  EXPECT_EQ(RunInts<uint64_t>(OpType::kBitShift, {big, amt}, {{"direction", StringAttr("RIGHT")}}),
            (std::vector<uint64_t>{1, 3}));
}

TEST(BitShiftTest, ShiftByWidthOrMoreGivesZero) {
  auto x = MakeTensor<uint32_t>({3}, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, DataType::kU32);
  auto s = MakeTensor<uint32_t>({3}, {31, 32, 1000}, DataType::kU32);
  EXPECT_EQ(RunInts<uint32_t>(OpType::kBitShift, {x, s}, {{"direction", StringAttr("LEFT")}}),
            (std::vector<uint32_t>{0x80000000u, 0, 0}));
  EXPECT_EQ(RunInts<uint32_t>(OpType::kBitShift, {x, s}, {{"direction", StringAttr("RIGHT")}}),
            (std::vector<uint32_t>{1, 0, 0}));
}

TEST(BitwiseTest, Errors) {
  auto a = MakeTensor<int32_t>({3}, {1, 2, 3}, DataType::kI32);
  auto b = MakeTensor<int32_t>({2}, {1, 2}, DataType::kI32);
  ExpectInvalid(RunOp(OpType::kBitwiseAnd, {a, b}).status());  // shapes do not broadcast
  auto c = MakeTensor<int64_t>({3}, {1, 2, 3}, DataType::kI64);
  ExpectInvalid(RunOp(OpType::kBitwiseOr, {a, c}).status());  // dtypes differ
  auto u = MakeTensor<uint8_t>({1}, {1}, DataType::kU8);
  ExpectInvalid(RunOp(OpType::kBitShift, {u, u}, {{"direction", StringAttr("UP")}}).status());
  ExpectInvalid(RunOp(OpType::kBitShift, {u, u}).status());  // direction is required
  // Floats are not bitwise types: no kernel.
  auto f = MakeFloat({1}, {1});
  EXPECT_EQ(RunOp(OpType::kBitwiseNot, {f}).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::testing::bitwise
