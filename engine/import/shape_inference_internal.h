// What the files of Kiln's own shape inference share (shape_inference.cc holds the driver, the
// output dtypes and the switch over ops that calls the rest): helpers reading constant and
// partially known inputs and doing shape algebra (shape_inference_util.cc), the output shapes of
// the data movement ops (shape_inference_tensor.cc) and of convolutions, pools, matrix products,
// reductions and Resize (shape_inference_nn.cc), and the build-time checks of constant operands
// and of the tensor size limit (shape_inference_checks.cc). Internal to engine/import.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/common/dtype.h"
#include "engine/ir/graph.h"

namespace kiln::import::shape_internal {

// The IR names every file of the shape inference uses.
using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;

// ---- Helpers (shape_inference_util.cc) ----

/// Input `i` of `n` (nullptr when absent).
const ir::Value* In(const ir::Node& n, int i);

/// The dtype of input `i` of `n`, kUndefined when absent.
DataType InType(const ir::Node& n, int i);

/// The integer contents of constant `v` (an initializer or a Constant node's output) of rank at
/// most `max_rank`; nullopt for anything else.
std::optional<std::vector<int64_t>> ConstantInts(const ir::Value* v, int max_rank);

/// The constant integer contents of input `i`, if it is a constant.
std::optional<std::vector<int64_t>> ConstInts(const ir::Node& n, int i);

/// The integer contents of constant `v` (int32 / int64, at most 1-D), nullopt otherwise.
std::optional<std::vector<int64_t>> ConstIntsOf(const ir::Value* v);

/// An entry of PartialInts that is known only at run time.
inline constexpr int64_t kUnknownInt = std::numeric_limits<int64_t>::min();

/// The integer contents of `v` as far as they are known before run time (entries known only at
/// run time are kUnknownInt); nullopt when not even the length is known.
std::optional<std::vector<int64_t>> PartialInts(const ir::Value* v, int depth = 0);

/// Axes from the attribute (versions before `since_input`) or the constant input `input_index`.
std::optional<std::vector<int64_t>> AxesOf(const ir::Node& n, int input_index, int since_input);

/// The shape of input `i` (unknown when absent).
ir::Shape SameShape(const ir::Node& n, int i);

/// Numpy broadcast of known-rank shapes; a dim is unknown unless it follows from the inputs.
ir::Shape Broadcast(const std::vector<const ir::Shape*>& shapes);

/// A shape of rank `rank` whose dims are all unknown.
ir::Shape RankOnly(int rank);

/// a * b for non-negative dims, or -1 (unknown) when either is unknown or the product overflows.
int64_t MulDims(int64_t a, int64_t b);

/// `axis` in [0, rank) after adding rank to a negative one; nullopt when out of range.
std::optional<int> NormAxis(int64_t axis, int rank);

/// The dims of `v` when its shape is static.
std::optional<std::vector<int64_t>> StaticDimsOf(const ir::Value* v);

/// The constant floating contents of input `i`, if it is a constant.
std::optional<std::vector<double>> ConstFloats(const ir::Node& n, int i);

// ---- Output shapes of the data movement ops (shape_inference_tensor.cc) ----
// Each gives the shape of output `k` of `n`: rank and dims where they follow from the inputs'
// shapes, constant inputs and attributes, unknown otherwise (the kernel computes and checks the
// real shape at run time).

ir::Shape SliceShape(const ir::Node& n, int k);
ir::Shape ExpandShape(const ir::Node& n, int k);
ir::Shape ReshapeShape(const ir::Node& n, int k);
ir::Shape FlattenShape(const ir::Node& n, int k);
ir::Shape TransposeShape(const ir::Node& n, int k);
/// Squeeze and Unsqueeze.
ir::Shape SqueezeShape(const ir::Node& n, int k);
ir::Shape ConcatShape(const ir::Node& n, int k);
ir::Shape GatherShape(const ir::Node& n, int k);

// ---- Output shapes of convolutions, pools, matrix products, reductions and Resize
// (shape_inference_nn.cc), as above ----

/// Resize and Upsample.
ir::Shape ResizeShape(const ir::Node& n, int k);
/// MatMul, FusedMatMul, MatMulInteger, MatMulIntegerToFloat and QLinearMatMul.
ir::Shape MatMulShape(const ir::Node& n, int k);
ir::Shape GemmShape(const ir::Node& n, int k);
/// Conv, FusedConv, ConvInteger, ConvIntegerToFloat and QLinearConv.
ir::Shape ConvShape(const ir::Node& n, int k);
/// ConvTranspose's Y from X's shape `x` and the weight `w_value`.
ir::Shape ConvTransposeShape(const ir::Node& n, const ir::Shape& x, const ir::Value* w_value);
/// MaxPool and AveragePool.
ir::Shape PoolShape(const ir::Node& n, int k);
/// GlobalAveragePool and GlobalMaxPool.
ir::Shape GlobalPoolShape(const ir::Node& n, int k);
/// The Reduce* ops, ArgMax and ArgMin.
ir::Shape ReduceShape(const ir::Node& n, int k);

// ---- Build-time checks (shape_inference_checks.cc) ----

/// Why a tensor of `elements` elements (negative: no count at all) of `dtype` is over the 1 TiB
/// limit of one tensor, or an empty string.
std::string TooLarge(double elements, DataType dtype);

/// Element count of static dims as a double, or -1 when a dim is negative.
double CountOf(const std::vector<int64_t>& dims);

/// Operands fixed at build time that make the op fail whatever the inputs: the error (naming the
/// node) the kernel would give at run time, given at build time. `out_dtype`: output 0's dtype.
absl::Status CheckStaticOperands(const ir::Node& n, DataType out_dtype);

}  // namespace kiln::import::shape_internal
