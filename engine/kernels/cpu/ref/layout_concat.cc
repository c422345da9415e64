// Concat and Split: both view each tensor as [outer, dim(axis) * inner] rows and move whole
// contiguous chunks per row, so they work on raw bytes for every dtype.
#include <algorithm>
#include <cstring>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/layout_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

absl::StatusOr<std::vector<int64_t>> SplitSizes(const ir::Node& node, KernelContext& ctx,
                                                int64_t dim) {
  const int n = ctx.num_outputs();
  std::vector<int64_t> sizes;
  bool given = false;
  if (node.since_version < 13) {
    given = node.has_attr("split");
    sizes = node.GetInts("split");
  } else if (const ir::Tensor* s = ctx.input(1)) {
    given = true;
    ASSIGN_OR_RETURN(sizes, ReadInts(node, *s, "split"));
  }
  if (given && node.since_version >= 18 && node.has_attr("num_outputs")) {
    return InvalidNode(node, "split and num_outputs must not both be given");
  }
  if (given) {
    if (static_cast<int>(sizes.size()) != n) {
      return InvalidNode(node, "split has ", sizes.size(), " entries for ", n, " outputs");
    }
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) return InvalidNode(node, "split ", ir::DimsToString(sizes), " has a negative");
      sum += s;
    }
    if (sum != dim) {
      return InvalidNode(node, "split ", ir::DimsToString(sizes), " sums to ", sum, ", axis has ",
                         dim);
    }
    return sizes;
  }
  if (node.since_version >= 18 && node.has_attr("num_outputs")) {
    const int64_t k = node.GetInt("num_outputs", 0);
    if (k != n) return InvalidNode(node, "num_outputs is ", k, " but the node has ", n);
    // Chunks of ceil(dim / n); the last one takes what is left (opset 18 semantics).
    const int64_t chunk = (dim + n - 1) / n;
    for (int i = 0; i < n; ++i) {
      sizes.push_back(std::clamp<int64_t>(dim - i * chunk, 0, chunk));
    }
    return sizes;
  }
  if (dim % n != 0) {
    return InvalidNode(node, "axis of size ", dim, " does not split evenly into ", n, " outputs");
  }
  sizes.assign(n, dim / n);
  return sizes;
}

absl::StatusOr<ConcatArgs> ReadConcat(const ir::Node& node, KernelContext& ctx) {
  const int n = ctx.num_inputs();
  if (n < 1) return InvalidNode(node, "needs at least one input");
  std::vector<const ir::Tensor*> xs(n);
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(xs[i], RequireInput(node, ctx, i));
  }
  const int rank = xs[0]->rank();
  if (rank == 0) return InvalidNode(node, "cannot concatenate scalars");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), rank));
  std::vector<int64_t> out_dims = xs[0]->dims();
  out_dims[axis] = 0;
  for (int i = 0; i < n; ++i) {
    const ir::Tensor& x = *xs[i];
    bool same = x.rank() == rank && x.dtype() == xs[0]->dtype();
    for (int a = 0; same && a < rank; ++a) same = a == axis || x.dim(a) == xs[0]->dim(a);
    if (!same) {
      return InvalidNode(node, "input ", i, " ", DataTypeOnnxName(x.dtype()),
                         ir::DimsToString(x.dims()), " does not match input 0 ",
                         DataTypeOnnxName(xs[0]->dtype()), ir::DimsToString(xs[0]->dims()),
                         " outside axis ", axis);
    }
    out_dims[axis] += x.dim(axis);
  }
  return ConcatArgs{std::move(xs), axis, std::move(out_dims)};
}

namespace {

absl::Status RunConcat(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(ConcatArgs args, ReadConcat(node, ctx));
  const std::vector<const ir::Tensor*>& xs = args.xs;
  const int axis = args.axis;
  const std::vector<int64_t>& out_dims = args.out_dims;
  const int rank = static_cast<int>(out_dims.size());
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, xs[0]->dtype(), out_dims));
  const int64_t outer = Product(out_dims, 0, axis);
  const size_t inner_bytes = Product(out_dims, axis + 1, rank) * DataTypeSize(out->dtype());
  const size_t row = out_dims[axis] * inner_bytes;  // one output row: every input's chunk
  char* dst = static_cast<char*>(out->raw_data());
  // Rows on the threads when there are many (a channels-last join: one row per pixel).
  ParallelFor(outer, outer >= 64 && outer * row >= (size_t{1} << 16),
              [&](int64_t o_begin, int64_t o_end) {
                for (int64_t o = o_begin; o < o_end; ++o) {
                  char* d = dst + o * row;
                  for (const ir::Tensor* x : xs) {
                    const size_t chunk = x->dim(axis) * inner_bytes;
                    if (chunk == 0) continue;
                    std::memcpy(d, static_cast<const char*>(x->raw_data()) + o * chunk, chunk);
                    d += chunk;
                  }
                }
              });
  return absl::OkStatus();
}

absl::Status RunSplit(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  if (rank == 0) return InvalidNode(node, "cannot split a scalar");
  if (ctx.num_outputs() < 1) return InvalidNode(node, "needs at least one output");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), rank));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, SplitSizes(node, ctx, x->dim(axis)));
  const int64_t outer = Product(x->dims(), 0, axis);
  const size_t inner_bytes = Product(x->dims(), axis + 1, rank) * DataTypeSize(x->dtype());
  const size_t row_bytes = x->dim(axis) * inner_bytes;
  const char* src = static_cast<const char*>(x->raw_data());
  size_t offset = 0;  // byte offset of this output's chunk within an input row
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    const size_t chunk = sizes[i] * inner_bytes;
    if (ctx.output_requested(i)) {
      std::vector<int64_t> dims = x->dims();
      dims[axis] = sizes[i];
      ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(i, x->dtype(), dims));
      char* dst = static_cast<char*>(out->raw_data());
      if (chunk > 0) {
        for (int64_t o = 0; o < outer; ++o) {
          std::memcpy(dst + o * chunk, src + o * row_bytes + offset, chunk);
        }
      }
    }
    offset += chunk;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSplit(const ir::Node& node) {
  if (node.since_version >= 18 && node.has_attr("num_outputs")) {
    if (node.GetInt("num_outputs", 0) < 1) {
      return InvalidNode(node, "num_outputs must be >= 1, got ", node.GetInt("num_outputs", 0));
    }
  }
  return FunctionKernel<RunSplit>::Create(node);
}

}  // namespace

void RegisterLayoutConcat(Registry& r) {
  const auto all = AllTypes();
  r.AddRef(ir::OpType::kConcat, all, FunctionKernel<RunConcat>::Create);
  r.AddRef(ir::OpType::kSplit, all, CreateSplit);
}

}  // namespace kiln::kernels::cpu::ref
