// Shared helpers of the reference kernels: dtype dispatch, the fp16/bf16 compute rule, broadcast
// indexing, axis normalisation and reading small integer tensors (shapes, axes, pads).
//
// Precision rule (DESIGN.md §5): a kernel on fp16/bf16 data converts inputs to fp32, computes in
// fp32 and rounds each output once. `Compute<T>` is the arithmetic type for storage type T.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/cpu/ref/thread_scratch.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels::cpu::ref {

/// Arithmetic type for storage type T: double stays double, fp16/bf16 compute in float,
/// integers compute in themselves.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Float16> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <typename T>
using Compute = typename ComputeType<T>::type;

/// Storage -> compute value.
template <typename T>
inline Compute<T> Load(T v) {
  return static_cast<Compute<T>>(v);
}
/// Compute value -> storage (rounds to nearest even for fp16/bf16).
template <typename T, typename C>
inline T Store(C v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
constexpr DataType DataTypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::kF32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::kF64;
  else if constexpr (std::is_same_v<T, Float16>)
    return DataType::kF16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DataType::kBF16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DataType::kI8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DataType::kU8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return DataType::kI16;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return DataType::kU16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DataType::kI32;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return DataType::kU32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DataType::kI64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return DataType::kU64;
  else if constexpr (std::is_same_v<T, bool>)
    return DataType::kBool;
  else
    return DataType::kUndefined;
}

/// Tag carrying a storage type through a generic lambda: `[&](auto tag) { using T =
/// typename decltype(tag)::type; ... }`.
template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls `f(TypeTag<T>{})` for the storage type of `dt` among the floating types.
template <typename F>
absl::Status DispatchFloat(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kF32:
      return f(TypeTag<float>{});
    case DataType::kF64:
      return f(TypeTag<double>{});
    case DataType::kF16:
      return f(TypeTag<Float16>{});
    case DataType::kBF16:
      return f(TypeTag<BFloat16>{});
    default:
      return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeOnnxName(dt)));
  }
}

/// Calls `f(TypeTag<T>{})` for any numeric type (floating, integer; bool maps to bool).
template <typename F>
absl::Status DispatchAll(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kF32:
      return f(TypeTag<float>{});
    case DataType::kF64:
      return f(TypeTag<double>{});
    case DataType::kF16:
      return f(TypeTag<Float16>{});
    case DataType::kBF16:
      return f(TypeTag<BFloat16>{});
    case DataType::kI8:
      return f(TypeTag<int8_t>{});
    case DataType::kU8:
      return f(TypeTag<uint8_t>{});
    case DataType::kI16:
      return f(TypeTag<int16_t>{});
    case DataType::kU16:
      return f(TypeTag<uint16_t>{});
    case DataType::kI32:
      return f(TypeTag<int32_t>{});
    case DataType::kU32:
      return f(TypeTag<uint32_t>{});
    case DataType::kI64:
      return f(TypeTag<int64_t>{});
    case DataType::kU64:
      return f(TypeTag<uint64_t>{});
    case DataType::kBool:
      return f(TypeTag<bool>{});
    default:
      return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeOnnxName(dt)));
  }
}

/// Dispatch over every dtype by element size only (for pure data movement).
template <typename F>
absl::Status DispatchBySize(DataType dt, F&& f) {
  switch (DataTypeSize(dt)) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeOnnxName(dt)));
  }
}

/// Floating dtypes every float kernel registers.
inline std::vector<DataType> FloatTypes() {
  return {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64};
}
/// Integer dtypes of arithmetic kernels.
inline std::vector<DataType> IntTypes() {
  return {DataType::kI8,  DataType::kU8,  DataType::kI16, DataType::kU16,
          DataType::kI32, DataType::kU32, DataType::kI64, DataType::kU64};
}
/// Floating + integer.
inline std::vector<DataType> NumericTypes() {
  auto v = FloatTypes();
  auto i = IntTypes();
  v.insert(v.end(), i.begin(), i.end());
  return v;
}
/// Every fixed-size dtype (data movement ops).
inline std::vector<DataType> AllTypes() {
  auto v = NumericTypes();
  v.push_back(DataType::kBool);
  return v;
}
/// The low-bit dtypes (float8 x5, float4e2m1, int4, uint4, int2, uint2), one element per byte
/// inside Kiln: only Cast, CastLike, QuantizeLinear, DequantizeLinear and byte-moving ops take
/// them.
inline std::vector<DataType> LowBitTypes() {
  return {DataType::kF8E4M3FN, DataType::kF8E4M3FNUZ, DataType::kF8E5M2, DataType::kF8E5M2FNUZ,
          DataType::kF8E8M0,   DataType::kF4E2M1,     DataType::kU4,     DataType::kI4,
          DataType::kU2,       DataType::kI2};
}
/// AllTypes() and LowBitTypes(): ops that only move or reinterpret bytes and whose ONNX schema
/// lists the low-bit types (Reshape, Identity, Transpose, Constant, Shape, ...).
inline std::vector<DataType> MovementTypes() {
  auto v = AllTypes();
  auto low = LowBitTypes();
  v.insert(v.end(), low.begin(), low.end());
  return v;
}

/// Writes `v` into element i of a tensor of any floating dtype (f32, f64, f16, bf16; other
/// dtypes are the caller's to refuse before any store), rounding once to that dtype.
inline void StoreFloat(ir::Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DataType::kF32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DataType::kF64:
      t.data<double>()[i] = v;
      break;
    case DataType::kF16:
      t.data<Float16>()[i] = Float16(static_cast<float>(v));
      break;
    case DataType::kBF16:
      t.data<BFloat16>()[i] = BFloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

/// Error with the node's label: `NodeError(node, absl::InvalidArgumentError, "...")`.
template <typename... Args>
absl::Status InvalidNode(const ir::Node& node, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(node.Label(), " ", args...));
}

/// Normalises a possibly negative axis into [0, rank); error names the node.
absl::StatusOr<int> NormalizeAxis(const ir::Node& node, int64_t axis, int rank);

/// Reads a 0-D or 1-D integer tensor (int32/int64) into int64s.
absl::StatusOr<std::vector<int64_t>> ReadInts(const ir::Node& node, const ir::Tensor& t,
                                              const char* what);

/// Numpy-style broadcast of two shapes; error names the node.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const ir::Node& node,
                                                     const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b);

/// Product of dims[begin, end) (1 for an empty range).
int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end);

/// dst = src for `bytes` bytes (no overlap), split over the OpenMP threads from 512 KB on: a
/// copy between parallel kernels that one core alone would make the others wait for.
void ParallelCopy(void* dst, const void* src, int64_t bytes);

/// Row-major strides of `dims`.
std::vector<int64_t> Strides(const std::vector<int64_t>& dims);

/// When `perm` of `view_dims` only swaps two blocks of axes behind a leading block (axes of size
/// 1 dropped, axes that stay neighbours merged), e.g. NCHW to NHWC ([N, C, HW] to [N, HW, C]):
/// {batch, rows, cols} of that transpose (out[b][c][r] = in[b][r][c]); nullopt otherwise.
std::optional<std::array<int64_t, 3>> AsBatchedTranspose(const std::vector<int64_t>& view_dims,
                                                         const std::vector<int64_t>& perm);

/// Strides of `in` broadcast to `out` (0 on broadcast dims), right-aligned.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out);

/// The dtype of output k as the graph types it; `fallback` (usually input 0's dtype) when the
/// graph leaves it undefined.
DataType OutputDtype(const ir::Node& node, int k, DataType fallback);

/// Requires input `i` to be present; error names the node and the input index.
absl::StatusOr<const ir::Tensor*> RequireInput(const ir::Node& node, KernelContext& ctx, int i);

}  // namespace kiln::kernels::cpu::ref
