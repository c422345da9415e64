// The ONNX boundary of the low-bit types (engine/import/tensor_proto.cc): TensorProto raw_data and
// int32_data in ONNX's packed layout (two 4-bit or four 2-bit elements per byte, first element in
// the low bits) read into one element per byte, and written back packed; the float8 types one
// element per byte both ways; size errors that say how the packed types count.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/import/tensor_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The TensorProto.DataType number (Debian's onnx 1.12 headers predate these enum names).
int32_t Onnx(DataType t) { return static_cast<int32_t>(t); }

std::vector<uint8_t> Bytes(const ir::Tensor& t) {
  const uint8_t* p = t.data<uint8_t>();
  return std::vector<uint8_t>(p, p + t.num_elements());
}

absl::StatusOr<ir::Tensor> Read(const onnx::TensorProto& p) {
  return TensorFromProto(p, ExternalDataPolicy{}, "tensor 't'");
}

TEST(LowBitTensorProto, PackedRawDataUnpacksAndPacksBack) {
  // int4 [1, -2, 3]: raw bytes 0xe1 0x03.
  onnx::TensorProto p;
  p.set_data_type(Onnx(DataType::kI4));
  p.add_dims(3);
  p.set_raw_data(std::string("\xe1\x03", 2));
  auto t = Read(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DataType::kI4);
  EXPECT_THAT(Bytes(*t), ElementsAre(1, 0xfe, 3));  // one sign-extended element per byte
  onnx::TensorProto out;
  TensorToProto(*t, "y", &out);
  EXPECT_EQ(out.data_type(), Onnx(DataType::kI4));
  EXPECT_EQ(out.raw_data(), std::string("\xe1\x03", 2));
  // The streamed serialization (head + payload) equals protobuf's own.
  auto bytes = SerializeTensorProto(*t, "y");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, out.SerializeAsString());
  EXPECT_EQ(SerializedTensorProtoSize(*t, "y"), static_cast<int64_t>(bytes->size()));
  auto head = TensorProtoHead(*t, "y");
  ASSERT_TRUE(head.ok()) << head.status();
  std::string storage;
  EXPECT_EQ(*head + std::string(TensorProtoPayload(*t, &storage)), *bytes);
}

TEST(LowBitTensorProto, TwoBitTypesPackFourPerByte) {
  // uint2 [1, 2, 3, 0, 1, 2] = bytes 0b00111001, 0b00001001.
  onnx::TensorProto p;
  p.set_data_type(Onnx(DataType::kU2));
  p.add_dims(2);
  p.add_dims(3);
  p.set_raw_data(std::string("\x39\x09", 2));
  auto t = Read(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Bytes(*t), ElementsAre(1, 2, 3, 0, 1, 2));
  auto back = ParseTensorProto(*SerializeTensorProto(*t, ""), "back");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(Bytes(*back), ElementsAre(1, 2, 3, 0, 1, 2));
  // int2 from int32_data: one packed byte per value. [-2, -1, 0, 1, -2] = 0x4e, 0x02.
  onnx::TensorProto q;
  q.set_data_type(Onnx(DataType::kI2));
  q.add_dims(5);
  q.add_int32_data(0x4e);
  q.add_int32_data(0x02);
  auto i2 = Read(q);
  ASSERT_TRUE(i2.ok()) << i2.status();
  EXPECT_THAT(Bytes(*i2), ElementsAre(0xfe, 0xff, 0, 1, 0xfe));
}

TEST(LowBitTensorProto, Int32DataOfFourBitTypesIsPacked) {
  // The ONNX 1.22 test data writes y_zero_point uint4 [1, 1, 1] as int32_data [0x11, 0x01].
  onnx::TensorProto p;
  p.set_data_type(Onnx(DataType::kU4));
  p.add_dims(3);
  p.add_int32_data(0x11);
  p.add_int32_data(0x01);
  auto t = Read(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Bytes(*t), ElementsAre(1, 1, 1));
  // float4e2m1 keeps its codes.
  p.set_data_type(Onnx(DataType::kF4E2M1));
  p.set_int32_data(0, 0x9f);
  auto f4 = Read(p);
  ASSERT_TRUE(f4.ok()) << f4.status();
  EXPECT_THAT(Bytes(*f4), ElementsAre(0xf, 0x9, 0x1));
  // One value per element is the wrong count for a packed type, and the error says why.
  p.add_int32_data(0);
  auto bad = Read(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("tensor 't'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("holds 3 values"));
  EXPECT_THAT(bad.status().message(), HasSubstr("need 2 (float4e2m1 packs 2 elements per byte)"));
}

TEST(LowBitTensorProto, Float8IsOneElementPerByte) {
  onnx::TensorProto p;
  p.set_data_type(Onnx(DataType::kF8E4M3FN));
  p.add_dims(3);
  p.add_int32_data(0x38);
  p.add_int32_data(0x7f);
  p.add_int32_data(0xc0);
  auto t = Read(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DataType::kF8E4M3FN);
  EXPECT_THAT(Bytes(*t), ElementsAre(0x38, 0x7f, 0xc0));
  onnx::TensorProto out;
  TensorToProto(*t, "", &out);
  EXPECT_EQ(out.raw_data(), std::string("\x38\x7f\xc0", 3));
  onnx::TensorProto raw;
  raw.set_data_type(Onnx(DataType::kF8E8M0));
  raw.add_dims(2);
  raw.set_raw_data(std::string("\x7f\xff", 2));
  auto e8 = Read(raw);
  ASSERT_TRUE(e8.ok()) << e8.status();
  EXPECT_EQ(ir::ElementAsDouble(*e8, 0), 1.0);
}

TEST(LowBitTensorProto, RawDataSizeErrors) {
  onnx::TensorProto p;
  p.set_data_type(Onnx(DataType::kI4));
  p.add_dims(3);
  p.set_raw_data(std::string(3, '\0'));  // one byte per element: wrong, 3 int4 take 2 bytes
  auto t = Read(p);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("raw_data has 3 bytes but dims [3] need 2 bytes (int4 packs 2"));
  // An empty packed tensor has an empty payload.
  onnx::TensorProto e;
  e.set_data_type(Onnx(DataType::kU2));
  e.add_dims(0);
  e.set_raw_data("");
  auto empty = Read(e);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->num_elements(), 0);
}

}  // namespace
}  // namespace kiln::import
