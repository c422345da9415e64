// Fast data-movement kernels, part 2: Concat, Split and Gather, as row copies planned from the
// run's dims: each tensor viewed as [outer, dim(axis) * inner], whole contiguous chunks moved per
// row (fixed-size moves for the small chunks of channels-last joins), rows split over the threads
// when large. Gather moves one inner block per (outer, index): memcpy for long blocks, an element
// loop for short ones (a gather along the last axis). Exactly the reference's bytes; anything
// these kernels do not plan for runs the reference kernel (memory_kernel.h).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/kernels/cpu/avx512/memory.h"
#include "engine/kernels/cpu/avx512/memory_kernel.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/layout_internal.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

constexpr int64_t kParallelBytes = int64_t{1} << 17;  // as memory_copy.cc

int64_t Chunks(int64_t work, int64_t bytes) {
  if (bytes < kParallelBytes || work < 2) return 1;
  return std::min<int64_t>(work, 4 * static_cast<int64_t>(omp_get_max_threads()));
}

// ---- Concat ---------------------------------------------------------------------------------

absl::StatusOr<bool> FastConcat(const ir::Node& node, KernelContext& ctx) {
  const int n = ctx.num_inputs();
  if (n < 1 || node.since_version < 4) return false;
  std::vector<const ir::Tensor*> xs(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = ctx.input(i);
    if (xs[i] == nullptr) return false;
  }
  const int rank = xs[0]->rank();
  const int64_t axis_attr = node.GetInt("axis", 0);
  if (rank == 0 || !Movable(xs[0]->dtype()) || axis_attr < -rank || axis_attr >= rank) {
    return false;
  }
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  std::vector<int64_t> out_dims = xs[0]->dims();
  out_dims[axis] = 0;
  for (const ir::Tensor* x : xs) {
    if (x->rank() != rank || x->dtype() != xs[0]->dtype()) return false;
    for (int a = 0; a < rank; ++a) {
      if (a != axis && x->dim(a) != xs[0]->dim(a)) return false;
    }
    out_dims[axis] += x->dim(axis);
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, xs[0]->dtype(), out_dims));
  if (y->num_elements() == 0) return true;
  const int64_t outer = ref::Product(out_dims, 0, axis);
  const int64_t inner_bytes =
      ref::Product(out_dims, axis + 1, rank) * static_cast<int64_t>(DataTypeSize(y->dtype()));
  const int64_t row = out_dims[axis] * inner_bytes;
  char* dst = static_cast<char*>(y->raw_data());
  if (outer == 1) {  // one chunk per input: each a copy of its own, on the threads when large
    for (const ir::Tensor* x : xs) {
      const int64_t chunk = x->dim(axis) * inner_bytes;
      ref::ParallelCopy(dst, x->raw_data(), chunk);
      dst += chunk;
    }
    return true;
  }
  std::vector<std::pair<const char*, int64_t>> parts;  // each input's bytes and chunk per row
  for (const ir::Tensor* x : xs) {
    const int64_t chunk = x->dim(axis) * inner_bytes;
    if (chunk > 0) parts.push_back({static_cast<const char*>(x->raw_data()), chunk});
  }
  const int64_t chunks = Chunks(outer, outer * row);
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t o = outer * c / chunks; o < outer * (c + 1) / chunks; ++o) {
        char* d = dst + o * row;
        for (const auto& [src, chunk] : parts) {
          CopyChunk(d, src + o * chunk, chunk);
          d += chunk;
        }
      }
    }
  });
  return true;
}

// ---- Split ----------------------------------------------------------------------------------

absl::StatusOr<bool> FastSplit(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr || node.since_version < 2 || ctx.num_outputs() < 1 || !Movable(x->dtype())) {
    return false;
  }
  const int rank = x->rank();
  const int64_t axis_attr = node.GetInt("axis", 0);
  if (rank == 0 || axis_attr < -rank || axis_attr >= rank) return false;
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  // Sizes the reference refuses: it reports the error.
  const absl::StatusOr<std::vector<int64_t>> read_sizes = ref::SplitSizes(node, ctx, x->dim(axis));
  if (!read_sizes.ok()) return false;
  const std::vector<int64_t>& sizes = *read_sizes;
  const int64_t outer = ref::Product(x->dims(), 0, axis);
  const int64_t inner_bytes =
      ref::Product(x->dims(), axis + 1, rank) * static_cast<int64_t>(DataTypeSize(x->dtype()));
  const int64_t row = x->dim(axis) * inner_bytes;
  const char* src = static_cast<const char*>(x->raw_data());
  int64_t offset = 0;  // of this output's chunk within an input row
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    const int64_t chunk = sizes[i] * inner_bytes;
    if (ctx.output_requested(i)) {
      std::vector<int64_t> dims = x->dims();
      dims[axis] = sizes[i];
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(i, x->dtype(), dims));
      char* dst = static_cast<char*>(y->raw_data());
      if (outer == 1) {
        ref::ParallelCopy(dst, src + offset, chunk);
      } else {
        CopyRows(src + offset, row, dst, chunk, outer, chunk);
      }
    }
    offset += chunk;
  }
  return true;
}

// ---- Gather ---------------------------------------------------------------------------------

template <typename U>
void GatherBlocks(const U* data, U* out, const std::vector<int64_t>& idx, int64_t outer, int64_t n,
                  int64_t inner) {
  const int64_t count = static_cast<int64_t>(idx.size());
  const int64_t rows = outer * count;
  const int64_t bytes = rows * inner * static_cast<int64_t>(sizeof(U));
  const int64_t chunks = Chunks(rows, bytes);
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        const U* src = data + (r / count * n + idx[r % count]) * inner;
        U* dst = out + r * inner;
        if (inner == 1) {
          *dst = *src;
        } else if (inner * static_cast<int64_t>(sizeof(U)) >= 64) {
          std::memcpy(dst, src, inner * sizeof(U));
        } else {
          for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
        }
      }
    }
  });
}

absl::StatusOr<bool> FastGather(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* data = ctx.input(0);
  const ir::Tensor* indices = ctx.input(1);
  if (data == nullptr || indices == nullptr || data->rank() < 1 || !Movable(data->dtype()) ||
      (indices->dtype() != DataType::kI64 && indices->dtype() != DataType::kI32)) {
    return false;
  }
  const int rank = data->rank();
  const int64_t axis_attr = node.GetInt("axis", 0);
  if (axis_attr < -rank || axis_attr >= rank) return false;
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const std::vector<int64_t>& dd = data->dims();
  const int64_t n = dd[axis];
  std::vector<int64_t> idx(indices->num_elements());
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t v = indices->dtype() == DataType::kI64 ? indices->data<int64_t>()[i]
                                                   : indices->data<int32_t>()[i];
    if (v < 0) v += n;
    if (v < 0 || v >= n) return false;  // the reference names the index
    idx[i] = v;
  }
  std::vector<int64_t> out_dims(dd.begin(), dd.begin() + axis);
  out_dims.insert(out_dims.end(), indices->dims().begin(), indices->dims().end());
  out_dims.insert(out_dims.end(), dd.begin() + axis + 1, dd.end());
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, data->dtype(), std::move(out_dims)));
  if (y->num_elements() == 0) return true;
  const int64_t outer = ref::Product(dd, 0, axis);
  const int64_t inner = ref::Product(dd, axis + 1, dd.size());
  switch (DataTypeSize(data->dtype())) {
    case 1:
      GatherBlocks(data->data<uint8_t>(), y->data<uint8_t>(), idx, outer, n, inner);
      break;
    case 2:
      GatherBlocks(data->data<uint16_t>(), y->data<uint16_t>(), idx, outer, n, inner);
      break;
    case 4:
      GatherBlocks(data->data<uint32_t>(), y->data<uint32_t>(), idx, outer, n, inner);
      break;
    default:
      GatherBlocks(data->data<uint64_t>(), y->data<uint64_t>(), idx, outer, n, inner);
      break;
  }
  return true;
}

}  // namespace

void RegisterMemoryJoinOps(Registry& r) {
  const std::vector<DataType> all = ref::AllTypes();
  r.Add(KernelDef{ir::OpType::kConcat, all, 0, Backend::kCpu, Isa::kAvx512,
                  &MemoryKernel<FastConcat>::Create});
  r.Add(KernelDef{ir::OpType::kSplit, all, 0, Backend::kCpu, Isa::kAvx512,
                  &MemoryKernel<FastSplit>::Create});
  r.Add(KernelDef{ir::OpType::kGather, all, 0, Backend::kCpu, Isa::kAvx512,
                  &MemoryKernel<FastGather>::Create});
}

}  // namespace kiln::kernels::cpu::avx512
