// Type and shape inference for DFT, STFT, the window ops, MelWeightMatrix, NonMaxSuppression,
// RoiAlign and DeformConv (shape_inference_signal.h).
#include "engine/import/shape_inference_signal.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;

// A shape of known rank whose dims are all unknown.
Shape RankOnly(int rank) {
  Shape s;
  s.rank_known = true;
  s.dims.resize(rank);
  return s;
}

// Dim `d` of input `i`, when the input's rank is known and the dim static.
std::optional<int64_t> StaticDim(const Node& n, int i, int d) {
  const Value* v = n.input(i);
  if (!v || !v->shape.rank_known || d < 0 || d >= v->shape.rank()) return std::nullopt;
  const Dim& dim = v->shape.dims[d];
  return dim.is_static() ? std::optional<int64_t>(dim.value) : std::nullopt;
}

// The value of input `i` when it is a constant integer scalar (0-D or one element).
std::optional<int64_t> ConstScalar(const Node& n, int i) {
  const Value* v = n.input(i);
  if (!v || !v->constant) return std::nullopt;
  const ir::Tensor& t = *v->constant;
  if ((t.dtype() != DataType::kI64 && t.dtype() != DataType::kI32) || t.num_elements() != 1) {
    return std::nullopt;
  }
  return ir::ElementAsInt64(t, 0);
}

Dim DimOf(std::optional<int64_t> v) { return v && *v >= 0 ? Dim::Static(*v) : Dim{}; }

absl::StatusOr<DataType> OutputDatatype(const Node& n) {
  const int64_t v = n.GetInt("output_datatype", 1);
  const DataType t = v < INT32_MIN || v > INT32_MAX ? DataType::kUndefined
                                                    : DataTypeFromOnnx(static_cast<int32_t>(v));
  if (t == DataType::kUndefined || t == DataType::kString || t == DataType::kBool) {
    const std::string name = v < INT32_MIN || v > INT32_MAX
                                 ? absl::StrCat("number ", v)
                                 : OnnxDataTypeName(static_cast<int32_t>(v));
    return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype ", name,
                                                 ": attribute 'output_datatype' = ", v));
  }
  return t;
}

Shape DftShape(const Node& n) {
  const Value* x = n.input(0);
  if (!x || !x->shape.rank_known || x->shape.rank() < 2) return Shape::Unknown();
  const int r = x->shape.rank();
  const bool inverse = n.GetInt("inverse", 0) != 0, onesided = n.GetInt("onesided", 0) != 0;
  Shape out = x->shape;
  out.dims[r - 1] = Dim::Static(inverse && onesided ? 1 : 2);
  std::optional<int64_t> axis = n.since_version >= 20 ? -2 : n.GetInt("axis", 1);
  if (n.since_version >= 20 && n.input(2)) axis = ConstScalar(n, 2);
  if (!axis) {  // any dim but the last may be the transformed one
    for (int d = 0; d < r - 1; ++d) out.dims[d] = Dim{};
    return out;
  }
  const int64_t a = *axis < 0 ? *axis + r : *axis;
  if (a < 0 || a > r - 2) return Shape::Unknown();  // the kernel reports it
  std::optional<int64_t> len;
  if (n.input(1)) {
    len = ConstScalar(n, 1);
  } else if (std::optional<int64_t> d = StaticDim(n, 0, static_cast<int>(a))) {
    len = inverse && onesided ? 2 * (*d - 1) : *d;
  }
  if (len && *len >= 1) {
    out.dims[a] = Dim::Static(onesided && !inverse ? *len / 2 + 1 : *len);
  } else {
    out.dims[a] = Dim{};
  }
  return out;
}

Shape StftShape(const Node& n) {
  Shape out = RankOnly(4);
  out.dims[0] = DimOf(StaticDim(n, 0, 0));
  out.dims[3] = Dim::Static(2);
  std::optional<int64_t> frame = StaticDim(n, 0, 1);  // the signal length when nothing sets it
  if (n.input(3)) {
    frame = ConstScalar(n, 3);
  } else if (n.input(2)) {
    frame = StaticDim(n, 2, 0);
  }
  const std::optional<int64_t> len = StaticDim(n, 0, 1), step = ConstScalar(n, 1);
  if (frame && *frame >= 1) {
    out.dims[2] = Dim::Static(n.GetInt("onesided", 1) != 0 ? *frame / 2 + 1 : *frame);
    if (len && step && *step >= 1 && *len >= *frame) {
      out.dims[1] = Dim::Static((*len - *frame) / *step + 1);
    }
  }
  return out;
}

}  // namespace

bool IsSignalOp(ir::OpType op) {
  switch (op) {
    case ir::OpType::kDFT:
    case ir::OpType::kSTFT:
    case ir::OpType::kHannWindow:
    case ir::OpType::kHammingWindow:
    case ir::OpType::kBlackmanWindow:
    case ir::OpType::kMelWeightMatrix:
    case ir::OpType::kNonMaxSuppression:
    case ir::OpType::kRoiAlign:
    case ir::OpType::kDeformConv:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<DataType> SignalOutputType(const Node& n, int k) {
  (void)k;
  switch (n.op) {
    case OpType::kHannWindow:
    case OpType::kHammingWindow:
    case OpType::kBlackmanWindow:
    case OpType::kMelWeightMatrix:
      return OutputDatatype(n);
    case OpType::kNonMaxSuppression:
      return DataType::kI64;
    default:
      return n.input(0) ? n.input(0)->dtype : DataType::kUndefined;
  }
}

Shape SignalOutputShape(const Node& n, int k) {
  if (k != 0) return Shape::Unknown();
  switch (n.op) {
    case OpType::kDFT:
      return DftShape(n);
    case OpType::kSTFT:
      return StftShape(n);
    case OpType::kHannWindow:
    case OpType::kHammingWindow:
    case OpType::kBlackmanWindow: {
      Shape s = RankOnly(1);
      s.dims[0] = DimOf(ConstScalar(n, 0));
      return s;
    }
    case OpType::kMelWeightMatrix: {
      Shape s = RankOnly(2);
      const std::optional<int64_t> dft = ConstScalar(n, 1);
      if (dft && *dft >= 1) s.dims[0] = Dim::Static(*dft / 2 + 1);
      s.dims[1] = DimOf(ConstScalar(n, 0));
      return s;
    }
    case OpType::kNonMaxSuppression: {
      Shape s = RankOnly(2);
      s.dims[1] = Dim::Static(3);
      return s;
    }
    case OpType::kRoiAlign: {
      Shape s = RankOnly(4);
      s.dims[0] = DimOf(StaticDim(n, 1, 0));
      s.dims[1] = DimOf(StaticDim(n, 0, 1));
      s.dims[2] = DimOf(n.GetInt("output_height", 1));
      s.dims[3] = DimOf(n.GetInt("output_width", 1));
      return s;
    }
    case OpType::kDeformConv: {
      const Value* offset = n.input(2);
      if (!offset || !offset->shape.rank_known || offset->shape.rank() < 3) return Shape::Unknown();
      Shape s = offset->shape;  // [N, ..., O...]: N from X where offset's is unknown
      if (std::optional<int64_t> batch = StaticDim(n, 0, 0)) s.dims[0] = Dim::Static(*batch);
      s.dims[1] = DimOf(StaticDim(n, 1, 0));
      return s;
    }
    default:
      return Shape::Unknown();
  }
}

}  // namespace kiln::import
