// Reference kernels of the data-ops family, part 1: the data-movement ops Compress,
// ReverseSequence and CenterCropPad. MeanVarianceNormalization and DynamicQuantizeLinear live in
// data_ops_numeric.cc; RegisterDataOps here registers both parts.
//
// The movement ops copy bytes (dtype-agnostic): each is reduced to a list of contiguous chunks to
// copy, so no element type dispatch is needed.
#include <cstring>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

void RegisterDataOpsNumeric(Registry& r);  // data_ops_numeric.cc

namespace {

// ---------------------------------------------------------------------------------------------
// Compress: keeps the slices along `axis` (or the elements of the flattened input when there is
// no axis) whose condition is true. The condition may be shorter than the axis: the slices past
// its end are dropped, as the spec says.

absl::Status CheckCompress(const ir::Node& node) {
  const ir::Value* v = node.input(0);
  if (node.has_attr("axis") && v != nullptr && v->shape.rank_known) {
    return NormalizeAxis(node, node.GetInt("axis", 0), v->shape.rank()).status();
  }
  return absl::OkStatus();
}

absl::Status RunCompress(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* cond, RequireInput(node, ctx, 1));
  if (cond->dtype() != DataType::kBool) {
    return InvalidNode(node, "condition must be bool, got ", DataTypeOnnxName(cond->dtype()));
  }
  if (cond->rank() != 1) {
    return InvalidNode(node, "condition must be 1-D, got shape ", ir::DimsToString(cond->dims()));
  }
  // Without an axis the input is flattened: one axis of num_elements, no outer or inner dims.
  int64_t outer = 1, len = x->num_elements(), inner = 1;
  int axis = -1;
  if (node.has_attr("axis")) {
    ASSIGN_OR_RETURN(axis, NormalizeAxis(node, node.GetInt("axis", 0), x->rank()));
    outer = Product(x->dims(), 0, axis);
    len = x->dim(axis);
    inner = Product(x->dims(), axis + 1, x->rank());
  }
  if (cond->dim(0) > len) {
    return InvalidNode(node, "condition has ", cond->dim(0), " elements, more than the ", len,
                       " slices it selects from");
  }
  const uint8_t* c = static_cast<const uint8_t*>(cond->raw_data());
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond->dim(0); ++i)
    if (c[i] != 0) keep.push_back(i);
  std::vector<int64_t> out_dims = {static_cast<int64_t>(keep.size())};
  if (axis >= 0) {
    out_dims = x->dims();
    out_dims[axis] = static_cast<int64_t>(keep.size());
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  const size_t esz = DataTypeSize(x->dtype());
  const size_t chunk = static_cast<size_t>(inner) * esz;
  if (chunk == 0) return absl::OkStatus();
  const char* src = static_cast<const char*>(x->raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    const char* so = src + static_cast<size_t>(o * len) * chunk;
    for (int64_t i : keep) {
      std::memcpy(dst, so + static_cast<size_t>(i) * chunk, chunk);
      dst += chunk;
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence: for each batch entry b, reverses the first sequence_lens[b] steps along the
// time axis and copies the rest. batch_axis and time_axis are 0 and 1 in either order.

absl::Status CheckReverseSequence(const ir::Node& node) {
  const int64_t batch_axis = node.GetInt("batch_axis", 1);
  const int64_t time_axis = node.GetInt("time_axis", 0);
  if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) ||
      batch_axis == time_axis) {
    return InvalidNode(node, "batch_axis and time_axis must be 0 and 1 in some order, got ",
                       batch_axis, " and ", time_axis);
  }
  return absl::OkStatus();
}

absl::Status RunReverseSequence(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* lens_t, RequireInput(node, ctx, 1));
  if (x->rank() < 2) {
    return InvalidNode(node, "input must have rank >= 2, got shape ", ir::DimsToString(x->dims()));
  }
  const int batch_axis = static_cast<int>(node.GetInt("batch_axis", 1));
  const int time_axis = 1 - batch_axis;
  const int64_t batch = x->dim(batch_axis);
  const int64_t steps = x->dim(time_axis);
  if (lens_t->rank() != 1 || lens_t->dim(0) != batch) {
    return InvalidNode(node, "sequence_lens must have shape [", batch, "], got ",
                       ir::DimsToString(lens_t->dims()));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> lens, ReadInts(node, *lens_t, "sequence_lens"));
  for (int64_t l : lens) {
    if (l < 0 || l > steps) {
      return InvalidNode(node, "sequence length ", l, " is out of range [0, ", steps, "]");
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
  const size_t chunk =
      static_cast<size_t>(Product(x->dims(), 2, x->rank())) * DataTypeSize(x->dtype());
  if (chunk == 0) return absl::OkStatus();
  const char* src = static_cast<const char*>(x->raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  // Chunk (b, t) sits at (b * steps + t) or (t * batch + b) depending on which axis comes first.
  const int64_t b_stride = batch_axis == 0 ? steps : 1;
  const int64_t t_stride = batch_axis == 0 ? 1 : batch;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
      std::memcpy(dst + static_cast<size_t>(b * b_stride + t * t_stride) * chunk,
                  src + static_cast<size_t>(b * b_stride + from * t_stride) * chunk, chunk);
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// CenterCropPad: crops or zero-pads each listed axis to the requested size, centred. When the
// difference is odd the extra element is cropped from (or padded at) the end, as the spec's
// reference does.

absl::StatusOr<std::vector<int>> CenterCropPadAxes(const ir::Node& node, int rank) {
  std::vector<int> axes;
  if (!node.has_attr("axes")) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
    return axes;
  }
  std::vector<bool> seen(rank, false);
  for (int64_t a : node.GetInts("axes")) {
    ASSIGN_OR_RETURN(int d, NormalizeAxis(node, a, rank));
    if (seen[d]) return InvalidNode(node, "axes lists axis ", a, " twice");
    seen[d] = true;
    axes.push_back(d);
  }
  return axes;
}

absl::Status CheckCenterCropPad(const ir::Node& node) {
  const ir::Value* v = node.input(0);
  if (v == nullptr || !v->shape.rank_known) return absl::OkStatus();
  return CenterCropPadAxes(node, v->shape.rank()).status();
}

absl::Status RunCenterCropPad(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* shape_t, RequireInput(node, ctx, 1));
  const int rank = x->rank();
  ASSIGN_OR_RETURN(std::vector<int> axes, CenterCropPadAxes(node, rank));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *shape_t, "shape"));
  if (shape.size() != axes.size()) {
    return InvalidNode(node, "shape has ", shape.size(), " elements but ", axes.size(),
                       " axes are cropped or padded");
  }
  std::vector<int64_t> out_dims = x->dims();
  // Per axis: elements copied, and where the copy starts in the input and in the output.
  std::vector<int64_t> count = x->dims(), src0(rank, 0), dst0(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int a = axes[i];
    const int64_t in = x->dim(a), want = shape[i];
    if (want < 0) return InvalidNode(node, "shape value ", want, " is negative");
    out_dims[a] = want;
    if (want < in) {
      src0[a] = (in - want) / 2;
      count[a] = want;
    } else {
      dst0[a] = (want - in) / 2;
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  std::memset(y->raw_data(), 0, y->byte_size());  // padding is zeros; the buffer may be reused
  if (Product(count, 0, rank) == 0) return absl::OkStatus();
  const size_t esz = DataTypeSize(x->dtype());
  const char* src = static_cast<const char*>(x->raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  if (rank == 0) {
    std::memcpy(dst, src, esz);
    return absl::OkStatus();
  }
  const std::vector<int64_t> ss = Strides(x->dims()), ds = Strides(out_dims);
  int64_t s = 0, d = 0;
  for (int k = 0; k < rank; ++k) {
    s += src0[k] * ss[k];
    d += dst0[k] * ds[k];
  }
  // Odometer over the copied region's outer dims; the last dim is one contiguous memcpy.
  const size_t row = static_cast<size_t>(count[rank - 1]) * esz;
  std::vector<int64_t> ctr(rank - 1, 0);
  while (true) {
    std::memcpy(dst + d * esz, src + s * esz, row);
    int k = rank - 2;
    for (; k >= 0; --k) {
      s += ss[k];
      d += ds[k];
      if (++ctr[k] < count[k]) break;
      s -= count[k] * ss[k];
      d -= count[k] * ds[k];
      ctr[k] = 0;
    }
    if (k < 0) break;
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterDataOps(Registry& r) {
  r.AddRef(ir::OpType::kCompress, AllTypes(), &CheckedFactory<CheckCompress, RunCompress>);
  r.AddRef(ir::OpType::kReverseSequence, AllTypes(),
           &CheckedFactory<CheckReverseSequence, RunReverseSequence>);
  r.AddRef(ir::OpType::kCenterCropPad, AllTypes(),
           &CheckedFactory<CheckCenterCropPad, RunCenterCropPad>);
  RegisterDataOpsNumeric(r);
}

}  // namespace kiln::kernels::cpu::ref
