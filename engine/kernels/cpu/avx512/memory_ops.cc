// Fast data-movement kernels, part 1: Slice, Transpose (the dtypes and permutations the tiled
// kernel of transpose_ops.cc does not take), Expand, Tile and Pad (constant, edge, reflect,
// wrap), each a StridedCopy (memory.h) or row copies planned from the run's own dims (dynamic
// shapes welcome). Concat, Split and Gather are memory_join_ops.cc. Pure data movement of 1-,
// 2-, 4- or 8-byte elements of any dtype: the reference kernel's output exactly. Anything these
// kernels do not plan for (old opsets, arguments the reference reports as errors) runs the
// reference kernel, so errors and their messages are the reference's.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/ir/slice.h"
#include "engine/kernels/cpu/avx512/memory.h"
#include "engine/kernels/cpu/avx512/memory_kernel.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/layout_internal.h"

namespace kiln::kernels::cpu::avx512 {

// memory_join_ops.cc
void RegisterMemoryJoinOps(Registry& r);

namespace {

// ---- Slice ----------------------------------------------------------------------------------

absl::StatusOr<bool> FastSlice(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr || node.since_version < 10 || !Movable(x->dtype())) return false;
  std::vector<int64_t> starts, ends, axes, steps;
  if (!ReadOptionalInts(node, ctx, 1, &starts) || !ReadOptionalInts(node, ctx, 2, &ends)) {
    return false;
  }
  const size_t n = starts.size();
  if (ends.size() != n) return false;
  if (ctx.input(3) != nullptr) {
    if (!ReadOptionalInts(node, ctx, 3, &axes) || axes.size() != n) return false;
  } else {
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.input(4) != nullptr) {
    if (!ReadOptionalInts(node, ctx, 4, &steps) || steps.size() != n) return false;
  } else {
    steps.assign(n, 1);
  }
  const int rank = x->rank();
  std::vector<int64_t> out_dims = x->dims();
  std::vector<int64_t> strides = ref::Strides(x->dims());
  std::vector<bool> seen(rank, false);
  int64_t base = 0;
  for (size_t i = 0; i < n; ++i) {
    if (axes[i] < -rank || axes[i] >= rank || steps[i] == 0) return false;
    const int a = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[a]) return false;
    seen[a] = true;
    const ir::SliceAxis r = ir::SliceRange(starts[i], ends[i], steps[i], x->dim(a));
    out_dims[a] = r.length;
    base += r.start * strides[a];
    strides[a] *= r.step;
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  if (y->num_elements() == 0) return true;
  const int64_t esz = DataTypeSize(x->dtype());
  StridedCopy(static_cast<const char*>(x->raw_data()) + base * esz, y->raw_data(), esz, out_dims,
              strides);
  return true;
}

// ---- Transpose ------------------------------------------------------------------------------

absl::StatusOr<bool> FastTranspose(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr || !Movable(x->dtype())) return false;
  const int rank = x->rank();
  // A bad perm: the reference reports it.
  const absl::StatusOr<std::vector<int64_t>> read_perm = ref::TransposePerm(node, rank);
  if (!read_perm.ok()) return false;
  const std::vector<int64_t>& perm = *read_perm;
  const std::vector<int64_t> in_strides = ref::Strides(x->dims());
  std::vector<int64_t> out_dims(rank), strides(rank);
  for (int i = 0; i < rank; ++i) {
    out_dims[i] = x->dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  if (y->num_elements() == 0) return true;
  StridedCopy(x->raw_data(), y->raw_data(), DataTypeSize(x->dtype()), out_dims, strides);
  return true;
}

// ---- Expand and Tile ------------------------------------------------------------------------

absl::StatusOr<bool> FastExpand(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  std::vector<int64_t> shape;
  if (x == nullptr || !Movable(x->dtype()) || !ReadOptionalInts(node, ctx, 1, &shape)) {
    return false;
  }
  for (int64_t d : shape) {
    if (d < 0) return false;
  }
  auto out_dims = ref::BroadcastShapes(node, x->dims(), shape);
  if (!out_dims.ok()) return false;
  const std::vector<int64_t> strides = ref::BroadcastStrides(x->dims(), *out_dims);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), *out_dims));
  if (y->num_elements() == 0) return true;
  StridedCopy(x->raw_data(), y->raw_data(), DataTypeSize(x->dtype()), *out_dims, strides);
  return true;
}

// Output axis a of length repeats[a] * dim(a) is the pair (repeat, i) in row-major order: the
// copy walks [r0, d0, r1, d1, ...] with strides [0, s0, 0, s1, ...].
absl::StatusOr<bool> FastTile(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  std::vector<int64_t> repeats;
  if (x == nullptr || node.since_version < 6 || !Movable(x->dtype()) ||
      !ReadOptionalInts(node, ctx, 1, &repeats)) {
    return false;
  }
  const int rank = x->rank();
  if (static_cast<int>(repeats.size()) != rank) return false;
  const std::vector<int64_t> in_strides = ref::Strides(x->dims());
  std::vector<int64_t> out_dims(rank), dims, strides;
  for (int a = 0; a < rank; ++a) {
    if (repeats[a] < 0) return false;
    if (repeats[a] > 0 && x->dim(a) > std::numeric_limits<int64_t>::max() / repeats[a]) {
      return false;
    }
    out_dims[a] = x->dim(a) * repeats[a];
    dims.insert(dims.end(), {repeats[a], x->dim(a)});
    strides.insert(strides.end(), {0, in_strides[a]});
  }
  if (ir::NumElementsOf(out_dims) < 0) return false;
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  if (y->num_elements() == 0) return true;
  StridedCopy(x->raw_data(), y->raw_data(), DataTypeSize(x->dtype()), dims, strides);
  return true;
}

// ---- Pad ------------------------------------------------------------------------------------

// The constant as the data's bytes, as the reference reads it; false where it would fail.
bool PadConstant(const ir::Node& node, KernelContext& ctx, DataType dt, uint64_t* bits) {
  *bits = 0;
  if (node.since_version < 11) {
    const float v = node.GetFloat("value", 0.0f);
    return ref::DispatchAll(dt,
                            [&](auto tag) -> absl::Status {
                              using T = typename decltype(tag)::type;
                              T t;
                              if constexpr (std::is_same_v<T, bool>) {
                                t = v != 0.0f;
                              } else {
                                t = ref::Store<T>(v);
                              }
                              std::memcpy(bits, &t, sizeof(T));
                              return absl::OkStatus();
                            })
        .ok();
  }
  const ir::Tensor* c = ctx.input(2);
  if (c == nullptr || c->num_elements() == 0) return true;
  if (c->dtype() != dt || c->num_elements() != 1) return false;
  std::memcpy(bits, c->raw_data(), DataTypeSize(dt));
  return true;
}

using ref::PadMode;

// Edge, reflect and wrap: every output element reads an input element. Per axis a table of the
// input offset (in elements) of each output position; each output row is its left border from
// the last axis's table, the kept run memcpy'd, its right border from the table.
template <typename U>
void PadIndexedRows(const U* in, U* out, const std::vector<int64_t>& out_dims,
                    const std::vector<std::vector<int64_t>>& offsets, int64_t left, int64_t mid,
                    int64_t mid_src) {
  const int rank = static_cast<int>(out_dims.size());
  const int64_t inner = out_dims[rank - 1];
  const int64_t rows = ref::Product(out_dims, 0, rank - 1);
  const std::vector<int64_t>& last = offsets[rank - 1];
  const int64_t bytes = rows * inner * static_cast<int64_t>(sizeof(U));
  const int64_t chunks =
      bytes >= (int64_t{1} << 17) ? std::min<int64_t>(rows, 4 * omp_get_max_threads()) : 1;
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        int64_t rem = r, off = 0;
        for (int a = rank - 2; a >= 0; --a) {
          off += offsets[a][rem % out_dims[a]];
          rem /= out_dims[a];
        }
        const U* src = in + off;
        U* dst = out + r * inner;
        for (int64_t j = 0; j < left; ++j) dst[j] = src[last[j]];
        if (mid > 0) std::memcpy(dst + left, src + mid_src, mid * sizeof(U));
        for (int64_t j = left + mid; j < inner; ++j) dst[j] = src[last[j]];
      }
    }
  });
}

absl::StatusOr<bool> FastPad(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr || node.since_version < 2 || !Movable(x->dtype())) return false;
  const absl::StatusOr<PadMode> parsed = ref::ParsePadMode(node);
  if (!parsed.ok()) return false;  // the reference reports the mode
  const PadMode mode = *parsed;
  const int rank = x->rank();
  std::vector<int64_t> pads, axes;
  if (node.since_version < 11) {
    pads = node.GetInts("pads");
  } else if (!ReadOptionalInts(node, ctx, 1, &pads)) {
    return false;
  }
  if (node.since_version >= 18 && ctx.input(3) != nullptr) {
    if (!ReadOptionalInts(node, ctx, 3, &axes)) return false;
  } else {
    for (int a = 0; a < rank; ++a) axes.push_back(a);
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na) return false;
  constexpr int64_t kMaxPad = int64_t{1} << 60;  // the reference's bound
  for (int64_t p : pads) {
    if (p > kMaxPad || p < -kMaxPad) return false;
  }
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < na; ++i) {
    if (axes[i] < -rank || axes[i] >= rank) return false;
    const int a = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[a]) return false;
    seen[a] = true;
    begin[a] = pads[i];
    end[a] = pads[na + i];
  }
  uint64_t fill = 0;
  if (!PadConstant(node, ctx, x->dtype(), &fill)) return false;
  // Output coordinate o of axis a reads input lo[a] + o - pb[a] when 0 <= o - pb[a] < keep[a]
  // (negative pads crop), else the constant.
  std::vector<int64_t> out_dims(rank), lo(rank), keep(rank), pb(rank);
  for (int a = 0; a < rank; ++a) {
    out_dims[a] = x->dim(a) + begin[a] + end[a];
    if (out_dims[a] < 0) return false;
    lo[a] = std::max<int64_t>(0, -begin[a]);
    keep[a] = std::max<int64_t>(0, x->dim(a) - lo[a] - std::max<int64_t>(0, -end[a]));
    pb[a] = std::max<int64_t>(0, begin[a]);
  }
  if (mode != PadMode::kConstant) {
    for (int a = 0; a < rank; ++a) {
      if (keep[a] <= 0 && out_dims[a] > 0) return false;  // the reference: an empty axis
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  const int64_t total = y->num_elements();
  if (total == 0) return true;
  const int64_t esz = DataTypeSize(x->dtype());
  const char* in = static_cast<const char*>(x->raw_data());
  char* out = static_cast<char*>(y->raw_data());
  if (rank == 0) {
    std::memcpy(out, in, esz);
    return true;
  }
  if (mode != PadMode::kConstant) {
    const std::vector<int64_t> in_strides = ref::Strides(x->dims());
    std::vector<std::vector<int64_t>> offsets(rank);
    for (int a = 0; a < rank; ++a) {
      offsets[a].resize(out_dims[a]);
      for (int64_t o = 0; o < out_dims[a]; ++o) {
        const int64_t i = o - pb[a];
        const int64_t c = i >= 0 && i < keep[a] ? i : ref::PadCoord(mode, i, keep[a]);
        offsets[a][o] = (lo[a] + c) * in_strides[a];
      }
    }
    const int64_t inner = out_dims[rank - 1];
    const int64_t left = std::min(pb[rank - 1], inner);
    const int64_t mid = std::min(keep[rank - 1], inner - left);
    const int64_t mid_src = lo[rank - 1];
    RETURN_IF_ERROR(ref::DispatchBySize(x->dtype(), [&](auto tag) -> absl::Status {
      using U = typename decltype(tag)::type;
      PadIndexedRows(static_cast<const U*>(x->raw_data()), static_cast<U*>(y->raw_data()), out_dims,
                     offsets, left, mid, mid_src);
      return absl::OkStatus();
    }));
    return true;
  }
  const std::vector<int64_t> strides = ref::Strides(x->dims());
  const int64_t inner = out_dims[rank - 1], rows = total / inner;
  // The last axis of a row: [0, left) constant, `mid` elements copied, the rest constant.
  const int64_t left = std::min(pb[rank - 1], inner);
  const int64_t mid = std::min(keep[rank - 1], inner - left);
  const int64_t chunks =
      total * esz >= (int64_t{1} << 17) ? std::min<int64_t>(rows, 4 * omp_get_max_threads()) : 1;
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        char* dst = out + r * inner * esz;
        int64_t rem = r, off = 0;
        bool inside = true;
        for (int a = rank - 2; a >= 0 && inside; --a) {
          const int64_t i = rem % out_dims[a] - pb[a];
          rem /= out_dims[a];
          inside = i >= 0 && i < keep[a];
          off += (lo[a] + i) * strides[a];
        }
        if (!inside || mid <= 0) {
          FillElements(dst, inner, esz, &fill);
          continue;
        }
        FillElements(dst, left, esz, &fill);
        std::memcpy(dst + left * esz, in + (off + lo[rank - 1]) * esz, mid * esz);
        FillElements(dst + (left + mid) * esz, inner - left - mid, esz, &fill);
      }
    }
  });
  return true;
}

}  // namespace

void RegisterMemoryOps(Registry& r) {
  const std::vector<DataType> all = ref::AllTypes();
  auto add = [&](ir::OpType op, std::vector<DataType> dtypes, KernelFactory f) {
    r.Add(KernelDef{op, std::move(dtypes), 0, Backend::kCpu, Isa::kAvx512, f});
  };
  add(ir::OpType::kSlice, all, &MemoryKernel<FastSlice>::Create);
  // After RegisterTranspose: its kernel keeps the dtypes it takes (Find prefers the first of one
  // Isa); this one takes the rest (1- and 8-byte elements, the low-bit types).
  add(ir::OpType::kTranspose, ref::MovementTypes(), &MemoryKernel<FastTranspose>::Create);
  add(ir::OpType::kExpand, all, &MemoryKernel<FastExpand>::Create);
  add(ir::OpType::kTile, all, &MemoryKernel<FastTile>::Create);
  add(ir::OpType::kPad, all, &MemoryKernel<FastPad>::Create);
  RegisterMemoryJoinOps(r);
}

}  // namespace kiln::kernels::cpu::avx512
