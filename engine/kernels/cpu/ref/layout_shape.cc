// Layout reference kernels that only change the shape: the output holds the input's bytes
// unchanged (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference-mode Dropout).
#include <algorithm>
#include <cstring>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/layout_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// Output 0 = `x`'s bytes with new dims (the caller checked the element count).
absl::Status CopyWithDims(KernelContext& ctx, const ir::Tensor& x, std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x.dtype(), std::move(dims)));
  if (x.byte_size() > 0 && out->raw_data() != x.raw_data()) {
    ParallelCopy(out->raw_data(), x.raw_data(), x.byte_size());
  }
  return absl::OkStatus();
}

// Axes from the attribute (before `input_version`) or from optional input 1 (from it on).
// `present` tells whether any axes were given.
absl::StatusOr<std::vector<int64_t>> ReadAxes(const ir::Node& node, KernelContext& ctx,
                                              int input_version, bool* present) {
  if (node.since_version < input_version) {
    *present = node.has_attr("axes");
    return node.GetInts("axes");
  }
  const ir::Tensor* t = ctx.input(1);
  *present = t != nullptr;
  if (t == nullptr) return std::vector<int64_t>{};
  return ReadInts(node, *t, "axes");
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ReshapeDims(const ir::Node& node, KernelContext& ctx,
                                                 const ir::Tensor& x) {
  ASSIGN_OR_RETURN(const ir::Tensor* s, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *s, "shape"));
  const bool allowzero = node.since_version >= 14 && node.GetInt("allowzero", 0) != 0;
  std::vector<int64_t> dims(shape.size());
  int infer = -1;
  bool has_zero = false;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == -1) {
      if (infer >= 0) return InvalidNode(node, "shape ", ir::DimsToString(shape), " has two -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (d < -1) return InvalidNode(node, "shape ", ir::DimsToString(shape), " has dim ", d);
    if (d == 0) {
      has_zero = true;
      if (!allowzero) {
        if (static_cast<int>(i) >= x.rank()) {
          return InvalidNode(node, "shape ", ir::DimsToString(shape), " copies dim ", i,
                             " of an input of rank ", x.rank());
        }
        d = x.dim(static_cast<int>(i));
      }
    }
    dims[i] = d;
    known *= d;
  }
  if (allowzero && has_zero && infer >= 0) {
    return InvalidNode(node, "shape ", ir::DimsToString(shape),
                       " has both 0 and -1 with allowzero=1");
  }
  const int64_t total = x.num_elements();
  if (infer >= 0) {
    if (known == 0 || total % known != 0) {
      return InvalidNode(node, "cannot infer the -1 dim of ", ir::DimsToString(shape),
                         " for input ", ir::DimsToString(x.dims()));
    }
    dims[infer] = total / known;
  } else if (known != total) {
    return InvalidNode(node, "shape ", ir::DimsToString(shape), " has ", known, " elements, input ",
                       ir::DimsToString(x.dims()), " has ", total);
  }
  return dims;
}

absl::StatusOr<std::vector<int64_t>> SqueezeDims(const ir::Node& node, KernelContext& ctx,
                                                 const ir::Tensor& x) {
  bool present = false;
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ReadAxes(node, ctx, 13, &present));
  const int rank = x.rank();
  std::vector<bool> drop(rank, false);
  // An empty axes list means "not given" (ONNX Runtime does the same).
  if (!present || axes.empty()) {
    for (int a = 0; a < rank; ++a) drop[a] = x.dim(a) == 1;
  }
  for (int64_t ax : axes) {
    if (ax < -rank || ax >= rank) {
      return InvalidNode(node, "axis ", ax, " is out of range for rank ", rank);
    }
    const int a = static_cast<int>(ax < 0 ? ax + rank : ax);
    if (x.dim(a) != 1) {
      return InvalidNode(node, "cannot squeeze axis ", ax, " of size ", x.dim(a));
    }
    drop[a] = true;
  }
  std::vector<int64_t> dims;
  for (int a = 0; a < rank; ++a) {
    if (!drop[a]) dims.push_back(x.dim(a));
  }
  return dims;
}

absl::StatusOr<std::vector<int64_t>> UnsqueezeDims(const ir::Node& node, KernelContext& ctx,
                                                   const ir::Tensor& x) {
  bool present = false;
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ReadAxes(node, ctx, 13, &present));
  if (!present) return InvalidNode(node, "axes are required");
  const int out_rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t ax : axes) {
    if (ax < -out_rank || ax >= out_rank) {
      return InvalidNode(node, "axis ", ax, " is out of range for output rank ", out_rank);
    }
    const int a = static_cast<int>(ax < 0 ? ax + out_rank : ax);
    if (inserted[a]) return InvalidNode(node, "axis ", ax, " is repeated");
    inserted[a] = true;
  }
  std::vector<int64_t> dims(out_rank);
  for (int a = 0, j = 0; a < out_rank; ++a) dims[a] = inserted[a] ? 1 : x.dim(j++);
  return dims;
}

namespace {

absl::Status RunReshape(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReshapeDims(node, ctx, *x));
  return CopyWithDims(ctx, *x, std::move(dims));
}

absl::Status RunFlatten(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  int64_t axis = node.GetInt("axis", 1);
  if (axis < -rank || axis > rank) {
    return InvalidNode(node, "axis ", axis, " is out of range for rank ", rank);
  }
  if (axis < 0) axis += rank;
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= x->dim(a);
  int64_t inner = 1;
  for (int a = static_cast<int>(axis); a < rank; ++a) inner *= x->dim(a);
  return CopyWithDims(ctx, *x, {outer, inner});
}

absl::Status RunSqueeze(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, SqueezeDims(node, ctx, *x));
  return CopyWithDims(ctx, *x, std::move(dims));
}

absl::Status RunUnsqueeze(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, UnsqueezeDims(node, ctx, *x));
  return CopyWithDims(ctx, *x, std::move(dims));
}

absl::Status RunIdentity(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  // A sequence or an empty optional is passed on as it is (immutable, owning its elements).
  if (x->kind() != ir::TensorKind::kDense) return ctx.set_output(0, *x);
  return CopyWithDims(ctx, *x, x->dims());
}

// Inference Dropout is the identity; the optional mask says every element was kept. Training
// mode with a non-zero ratio would need the framework's random stream, which no inference
// engine can reproduce, so it is refused rather than approximated.
absl::Status RunDropout(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  if (node.since_version >= 12) {
    const ir::Tensor* training = ctx.input(2);
    if (training != nullptr && training->num_elements() > 0 &&
        ir::ElementAsDouble(*training, 0) != 0) {
      double ratio = 0.5;
      if (const ir::Tensor* r = ctx.input(1); r != nullptr && r->num_elements() > 0) {
        ratio = ir::ElementAsDouble(*r, 0);
      }
      if (ratio < 0 || ratio >= 1) {
        return InvalidNode(node, "ratio must be in [0, 1), got ", ratio);
      }
      if (ratio != 0) {
        return absl::UnimplementedError(absl::StrCat(
            node.Label(), " unsupported training_mode=true with ratio ", ratio,
            ": random dropout is not reproducible; only ratio 0 is supported in training mode"));
      }
    }
  }
  if (ctx.output_requested(0)) RETURN_IF_ERROR(CopyWithDims(ctx, *x, x->dims()));
  if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
    // Opset 7 typed the mask like the data; from opset 10 it is bool.
    const DataType mask_type = node.since_version >= 10 ? DataType::kBool : x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * mask, ctx.output(1, mask_type, x->dims()));
    return DispatchAll(mask_type, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T one;
      if constexpr (std::is_same_v<T, bool>) {
        one = true;
      } else {
        one = Store<T>(1.0f);
      }
      std::fill(mask->data<T>(), mask->data<T>() + mask->num_elements(), one);
      return absl::OkStatus();
    });
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLayoutShape(Registry& r) {
  const auto all = MovementTypes();  // shape-only: any byte-sized element, low-bit types too
  r.AddRef(ir::OpType::kReshape, all, FunctionKernel<RunReshape>::Create);
  r.AddRef(ir::OpType::kFlatten, all, FunctionKernel<RunFlatten>::Create);
  r.AddRef(ir::OpType::kSqueeze, all, FunctionKernel<RunSqueeze>::Create);
  r.AddRef(ir::OpType::kUnsqueeze, all, FunctionKernel<RunUnsqueeze>::Create);
  r.AddRef(ir::OpType::kIdentity, all, FunctionKernel<RunIdentity>::Create);
  r.AddRef(ir::OpType::kDropout, FloatTypes(), FunctionKernel<RunDropout>::Create);
}

}  // namespace kiln::kernels::cpu::ref
