// Tests of the BitCast (opset 26) and TensorScatter (opset 24) reference kernels. Both move bits
// without arithmetic, so every expectation is exact (bit patterns, not tolerances).
#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave the trailing fields to their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;

NodeSpec BitCast(const ir::Tensor& x, DataType to) {
  return {OpType::kBitCast, {{"to", IntAttr(static_cast<int64_t>(to))}}, {x}, 1, 26};
}

TEST(BitCastTest, FloatToIntKeepsTheBits) {
  ir::Tensor y = RunNodeOk0(BitCast(MakeFloat({2, 2}, {1.0f, -2.0f, 0.0f, -0.0f}), DataType::kI32));
  EXPECT_EQ(y.dtype(), DataType::kI32);
  EXPECT_THAT(y.dims(), ElementsAre(2, 2));
  // IEEE binary32: 1.0 = 0x3F800000, -2.0 = 0xC0000000, -0.0 = 0x80000000.
  EXPECT_THAT(Values<int32_t>(y), ElementsAre(0x3F800000, static_cast<int32_t>(0xC0000000u), 0,
                                              std::numeric_limits<int32_t>::min()));
}

TEST(BitCastTest, IntToFloatKeepsNaNPayloadsAndScalars) {
  // A quiet NaN with payload 1: a value conversion would lose the payload, a bit cast keeps it.
  ir::Tensor y =
      RunNodeOk0(BitCast(MakeTensor<uint32_t>({}, {0x7FC00001u}, DataType::kU32), DataType::kF32));
  EXPECT_EQ(y.dtype(), DataType::kF32);
  EXPECT_TRUE(y.dims().empty());
  EXPECT_THAT(Values<uint32_t>(y), ElementsAre(0x7FC00001u));
  ir::Tensor d = RunNodeOk0(
      BitCast(MakeTensor<int64_t>({1}, {0x3FF0000000000000}, DataType::kI64), DataType::kF64));
  EXPECT_THAT(Values<double>(d), ElementsAre(1.0));  // binary64 1.0
}

TEST(BitCastTest, HalfTypesAreTheirOwnBits) {
  // fp16 1.0 = 0x3C00, -2.0 = 0xC000; bf16 1.0 = 0x3F80. No widening to fp32 on the way.
  ir::Tensor h = RunNodeOk0(BitCast(MakeHalf({2}, {1.0f, -2.0f}), DataType::kI16));
  EXPECT_EQ(h.dtype(), DataType::kI16);
  EXPECT_THAT(Values<int16_t>(h), ElementsAre(0x3C00, static_cast<int16_t>(0xC000)));
  ir::Tensor b = RunNodeOk0(BitCast(MakeBf16({1}, {1.0f}), DataType::kU16));
  EXPECT_THAT(Values<uint16_t>(b), ElementsAre(0x3F80));
  ir::Tensor back =
      RunNodeOk0(BitCast(MakeTensor<uint16_t>({1}, {0x3C00}, DataType::kU16), DataType::kF16));
  EXPECT_EQ(back.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(back), ElementsAre(1.0f));
}

TEST(BitCastTest, BytesAndBool) {
  ir::Tensor u =
      RunNodeOk0(BitCast(MakeTensor<int8_t>({3}, {-1, -128, 5}, DataType::kI8), DataType::kU8));
  EXPECT_THAT(Values<uint8_t>(u), ElementsAre(255, 128, 5));
  ir::Tensor from_bool =
      RunNodeOk0(BitCast(MakeTensor<uint8_t>({2}, {1, 0}, DataType::kBool), DataType::kU8));
  EXPECT_EQ(from_bool.dtype(), DataType::kU8);
  EXPECT_THAT(Values<uint8_t>(from_bool), ElementsAre(1, 0));
  // To bool, every nonzero byte reads as true and is stored as Kiln's 1 (kernels read bool bytes
  // as C++ bool, for which a byte other than 0 or 1 is undefined behaviour).
  ir::Tensor to_bool =
      RunNodeOk0(BitCast(MakeTensor<uint8_t>({4}, {0, 1, 2, 255}, DataType::kU8), DataType::kBool));
  EXPECT_EQ(to_bool.dtype(), DataType::kBool);
  EXPECT_THAT(Values<uint8_t>(to_bool), ElementsAre(0, 1, 1, 1));
}

TEST(BitCastTest, FourBitTypesKeepTheirFourBits) {
  // Kiln holds int4 -1 as byte 0xff and uint4 15 as 0x0f: the same four bits, re-extended.
  ir::Tensor u =
      RunNodeOk0(BitCast(MakeTensor<int8_t>({3}, {-1, -8, 7}, DataType::kI4), DataType::kU4));
  EXPECT_EQ(u.dtype(), DataType::kU4);
  EXPECT_THAT(Values<uint8_t>(u), ElementsAre(15, 8, 7));
  ir::Tensor i = RunNodeOk0(BitCast(u, DataType::kI4));
  EXPECT_THAT(Values<int8_t>(i), ElementsAre(-1, -8, 7));
  // float4e2m1 code 0xa is -1.0; the same bits as int4 -6.
  ir::Tensor f =
      RunNodeOk0(BitCast(MakeTensor<int8_t>({1}, {-6}, DataType::kI4), DataType::kF4E2M1));
  EXPECT_THAT(Values<uint8_t>(f), ElementsAre(0x0a));
}

TEST(BitCastTest, Errors) {
  const ir::Tensor x = MakeFloat({2}, {1, 2});
  ExpectNodeError(BitCast(x, DataType::kI16), absl::StatusCode::kInvalidArgument,
                  "float (32 bits) as int16 (16 bits)");
  ExpectNodeError(BitCast(x, DataType::kF64), absl::StatusCode::kInvalidArgument, "same bit width");
  // Low-bit widths are ONNX's (int4 is 4 bits, although Kiln stores it in a byte).
  ExpectNodeError({OpType::kBitCast, {{"to", IntAttr(17)}}, {x}, 1, 26},
                  absl::StatusCode::kInvalidArgument, "float (32 bits) as float8e4m3fn (8 bits)");
  ExpectNodeError({OpType::kBitCast,
                   {{"to", IntAttr(22)}},
                   {MakeTensor<uint8_t>({1}, {1}, DataType::kU8)},
                   1,
                   26},
                  absl::StatusCode::kInvalidArgument, "uint8 (8 bits) as int4 (4 bits)");
  // ONNX types Kiln has no DataType for are named, not numbered.
  ExpectNodeError({OpType::kBitCast, {{"to", IntAttr(27)}}, {x}, 1, 26},
                  absl::StatusCode::kUnimplemented, "unsupported dtype float6e2m3");
  ExpectNodeError({OpType::kBitCast, {{"to", IntAttr(1000)}}, {x}, 1, 26},
                  absl::StatusCode::kUnimplemented, "unsupported dtype number 1000");
  ExpectNodeError({OpType::kBitCast, {}, {x}, 1, 26}, absl::StatusCode::kInvalidArgument,
                  "attribute 'to'");
}

// past_cache [2, 4, 2] = 0..15 (batch 0: positions {0,1} {2,3} {4,5} {6,7}; batch 1: 8..15),
// update [2, 2, 2] = 100..107; the sequence axis is 1 (the default -2).
ir::Tensor Past() { return MakeFloat({2, 4, 2}, Iota(16, 0)); }
ir::Tensor Update() { return MakeFloat({2, 2, 2}, Iota(8, 100)); }

NodeSpec Scatter(std::vector<ir::Tensor> inputs, const char* mode = "linear") {
  return {OpType::kTensorScatter, {{"mode", StringAttr(mode)}}, std::move(inputs), 1, 24};
}

TEST(TensorScatterTest, LinearAtWriteIndices) {
  ir::Tensor y = RunNodeOk0(Scatter({Past(), Update(), MakeInt64({2}, {1, 2})}));
  EXPECT_THAT(y.dims(), ElementsAre(2, 4, 2));
  // Batch 0 writes positions 1, 2; batch 1 positions 2, 3.
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 1, 100, 101, 102, 103, 6, 7,  //
                                       8, 9, 10, 11, 104, 105, 106, 107));
}

TEST(TensorScatterTest, NoWriteIndicesWritesAtZero) {
  ir::Tensor y = RunNodeOk0(Scatter({Past(), Update()}));
  EXPECT_THAT(ToFloats(y), ElementsAre(100, 101, 102, 103, 4, 5, 6, 7,  //
                                       104, 105, 106, 107, 12, 13, 14, 15));
}

TEST(TensorScatterTest, CircularWraps) {
  // Batch 0 from 3: positions 3, 0. Batch 1 from 5 = 1 (mod 4): positions 1, 2.
  ir::Tensor y = RunNodeOk0(Scatter({Past(), Update(), MakeInt64({2}, {3, 5})}, "circular"));
  EXPECT_THAT(ToFloats(y), ElementsAre(102, 103, 2, 3, 4, 5, 100, 101,  //
                                       8, 9, 104, 105, 106, 107, 14, 15));
  // A negative index counts from the end (floored modulo, as the ONNX reference's Python %):
  // -1 is position 3.
  ir::Tensor n = RunNodeOk0(Scatter({Past(), Update(), MakeInt64({2}, {-1, 0})}, "circular"));
  EXPECT_THAT(ToFloats(n), ElementsAre(102, 103, 2, 3, 4, 5, 100, 101,  //
                                       104, 105, 106, 107, 12, 13, 14, 15));
}

TEST(TensorScatterTest, HeadsOfABatchShareItsIndex) {
  // past [batch 2, heads 2, seq 3, 1] = 0..11, sequence axis 2 (-2 of rank 4); each batch's
  // index applies to both of its heads.
  ir::Tensor y =
      RunNodeOk0(Scatter({MakeFloat({2, 2, 3, 1}, Iota(12, 0)),
                          MakeFloat({2, 2, 1, 1}, {100, 101, 102, 103}), MakeInt64({2}, {0, 2})}));
  EXPECT_THAT(ToFloats(y), ElementsAre(100, 1, 2, 101, 4, 5, 6, 7, 102, 9, 10, 103));
  // An explicit positive axis: the last of a [2, 3] cache.
  ir::Tensor z = RunNodeOk0(
      {OpType::kTensorScatter,
       {{"axis", IntAttr(1)}},
       {MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({2, 1}, {-1, -2}), MakeInt64({2}, {2, 1})},
       1,
       24});
  EXPECT_THAT(ToFloats(z), ElementsAre(0, 1, -1, 3, -2, 5));
}

TEST(TensorScatterTest, OtherDtypesMoveBits) {
  // fp16 and uint8 caches: the bits of the update land unchanged.
  ir::Tensor h = RunNodeOk0(Scatter(
      {MakeHalf({1, 2, 1}, {0.5f, 0.25f}), MakeHalf({1, 1, 1}, {65504.0f}), MakeInt64({1}, {1})}));
  EXPECT_EQ(h.dtype(), DataType::kF16);
  EXPECT_THAT(Bits16(h), ElementsAre(0x3800, 0x7BFF));
  ir::Tensor u = RunNodeOk0(Scatter({MakeTensor<uint8_t>({1, 3, 1}, {1, 2, 3}, DataType::kU8),
                                     MakeTensor<uint8_t>({1, 1, 1}, {9}, DataType::kU8)}));
  EXPECT_THAT(Values<uint8_t>(u), ElementsAre(9, 2, 3));
}

TEST(TensorScatterTest, Errors) {
  // Linear: 3 + 2 positions do not fit an axis of 4.
  ExpectNodeError(Scatter({Past(), Update(), MakeInt64({2}, {3, 0})}),
                  absl::StatusCode::kInvalidArgument, "write_indices[0] = 3");
  ExpectNodeError(Scatter({Past(), Update(), MakeInt64({2}, {0, -1})}),
                  absl::StatusCode::kInvalidArgument, "write_indices[1] = -1");
  ExpectNodeError(Scatter({Past(), Update(), MakeInt64({3}, {0, 0, 0})}),
                  absl::StatusCode::kInvalidArgument, "batch size 2");
  ExpectNodeError({OpType::kTensorScatter, {{"axis", IntAttr(0)}}, {Past(), Update()}, 1, 24},
                  absl::StatusCode::kInvalidArgument, "batch axis");
  ExpectNodeError({OpType::kTensorScatter, {{"axis", IntAttr(3)}}, {Past(), Update()}, 1, 24},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError(Scatter({Past(), MakeFloat({2, 5, 2}, Iota(20, 0))}),
                  absl::StatusCode::kInvalidArgument, "does not fit past_cache");
  ExpectNodeError(Scatter({Past(), MakeFloat({2, 2, 3}, Iota(12, 0))}),
                  absl::StatusCode::kInvalidArgument, "does not fit past_cache");
  ExpectNodeError(Scatter({Past(), MakeHalf({2, 2, 2}, Iota(8, 0))}),
                  absl::StatusCode::kInvalidArgument, "update is float16");
  ExpectNodeError(Scatter({Past(), Update()}, "ring"), absl::StatusCode::kInvalidArgument,
                  "mode must be");
}

}  // namespace
}  // namespace kiln::testing
