// Layout reference kernels built on one primitive: every output element along axis `a` at index
// `o` reads the input at offset sum_a map[a][o] (or a fill value when a map entry is kFill).
// Transpose, DepthToSpace, SpaceToDepth, Slice, Pad, Tile and Expand differ only in how they
// build the per-axis maps, so the element loop exists once and moves bytes of any fixed-size
// dtype (DispatchBySize). Shape-only ops live in layout_shape.cc, Concat/Split in
// layout_concat.cc, Resize/Upsample in layout_resize.cc.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include "engine/ir/slice.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/layout_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

// Defined in the other layout_*.cc files; RegisterLayout is the family's single entry point.
void RegisterLayoutShape(Registry& r);
void RegisterLayoutConcat(Registry& r);
void RegisterLayoutResize(Registry& r);

std::optional<std::array<int64_t, 3>> AsBatchedTranspose(const std::vector<int64_t>& view_dims,
                                                         const std::vector<int64_t>& perm) {
  // Output axes (as input axes) without the size-1 ones, merged where consecutive in the input.
  std::vector<std::pair<int64_t, int64_t>> groups;  // {first input axis, size}, output order
  int64_t prev = -2;
  for (int64_t a : perm) {
    if (view_dims[a] == 1) continue;
    if (!groups.empty() && a == prev + 1) {
      groups.back().second *= view_dims[a];
    } else {
      groups.push_back({a, view_dims[a]});
    }
    prev = a;
  }
  // A group that follows the previous one in the input as well merges with it only if it
  // also comes right after it in the output: what is left is the order of the blocks.
  const size_t n = groups.size();
  if (n == 2 && groups[0].first > groups[1].first) {
    return std::array<int64_t, 3>{1, groups[1].second, groups[0].second};
  }
  if (n == 3 && groups[0].first < groups[2].first && groups[2].first < groups[1].first) {
    return std::array<int64_t, 3>{groups[0].second, groups[2].second, groups[1].second};
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<int64_t>> TransposePerm(const ir::Node& node, int rank) {
  std::vector<int64_t> perm;
  if (node.has_attr("perm")) {
    perm = node.GetInts("perm");
  } else {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int>(perm.size()) != rank) {
    return InvalidNode(node, "perm has ", perm.size(), " entries for input of rank ", rank);
  }
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) {
      return InvalidNode(node, "perm ", ir::DimsToString(perm), " is not a permutation of ", rank,
                         " axes");
    }
    seen[p] = true;
  }
  return perm;
}

namespace {

constexpr int64_t kFill = -1;

using AxisMaps = std::vector<std::vector<int64_t>>;

// Walks `iter_dims` in row-major order writing `out` contiguously. Whole rows whose outer
// coordinates hit a kFill entry are filled without touching the input; rows whose inner map is
// contiguous are copied. Large gathers split their rows over the threads (each output element
// is written once, by one thread: the result does not depend on the split).
template <typename U>
void GatherRows(const U* in, U* out, const std::vector<int64_t>& iter_dims, const AxisMaps& maps,
                U fill) {
  const int rank = static_cast<int>(iter_dims.size());
  const int64_t total = ir::NumElementsOf(iter_dims);
  if (total <= 0) return;
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  const int64_t inner = iter_dims[rank - 1];
  const int64_t* last = maps[rank - 1].data();
  const int64_t rows = total / inner;
  bool contiguous = last[0] >= 0;
  for (int64_t j = 1; j < inner && contiguous; ++j) contiguous = last[j] == last[0] + j;
  // Rows [r0, r1): the odometer starts from r0's coordinates, then advances with a running
  // offset per outer level so each step costs O(levels changed).
  auto run = [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(rank, 0);
    std::vector<int64_t> partial(rank, 0);  // partial[a] = sum of maps[0..a-1]; < 0 means fill
    for (int64_t a = rank - 2, rem = r0; a >= 0; --a) {
      idx[a] = rem % iter_dims[a];
      rem /= iter_dims[a];
    }
    for (int a = 0; a + 1 < rank; ++a) {
      int64_t m = maps[a][idx[a]];
      partial[a + 1] = (partial[a] < 0 || m < 0) ? kFill : partial[a] + m;
    }
    for (int64_t r = r0; r < r1; ++r) {
      U* dst = out + r * inner;
      const int64_t base = partial[rank - 1];
      if (base < 0) {
        std::fill(dst, dst + inner, fill);
      } else if (contiguous) {
        std::memcpy(dst, in + base + last[0], inner * sizeof(U));
      } else {
        const U* src = in + base;
        for (int64_t j = 0; j < inner; ++j) dst[j] = last[j] < 0 ? fill : src[last[j]];
      }
      int a = rank - 2;
      while (a >= 0 && ++idx[a] == iter_dims[a]) idx[a--] = 0;
      for (a = std::max(a, 0); a + 1 < rank; ++a) {
        int64_t m = maps[a][idx[a]];
        partial[a + 1] = (partial[a] < 0 || m < 0) ? kFill : partial[a] + m;
      }
    }
  };
  // Memory bound: worth a second thread from about a hundred KB on.
  const int64_t bytes = total * static_cast<int64_t>(sizeof(U));
  const int64_t chunks = bytes >= (int64_t{1} << 17) ? std::min<int64_t>(rows, 16) : 1;
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) run(rows * c / chunks, rows * (c + 1) / chunks);
  });
}

// Runs GatherRows over `in`'s bytes into `out` (already allocated with the right element
// count). `fill` points to one element of the tensor's dtype, or is null when nothing fills.
absl::Status Gather(const ir::Tensor& in, ir::Tensor& out, const std::vector<int64_t>& iter_dims,
                    const AxisMaps& maps, const void* fill = nullptr) {
  return DispatchBySize(in.dtype(), [&](auto tag) -> absl::Status {
    using U = typename decltype(tag)::type;
    U f{};
    if (fill != nullptr) std::memcpy(&f, fill, sizeof(U));
    GatherRows(in.data<U>(), out.data<U>(), iter_dims, maps, f);
    return absl::OkStatus();
  });
}

// Map of an axis of length `n` whose output index o reads input coordinate `coord(o)` (or
// kFill when coord returns a negative value).
template <typename F>
std::vector<int64_t> MakeMap(int64_t n, int64_t stride, F coord) {
  std::vector<int64_t> m(n);
  for (int64_t o = 0; o < n; ++o) {
    int64_t c = coord(o);
    m[o] = c < 0 ? kFill : c * stride;
  }
  return m;
}

// out[b][c][r] = in[b][r][c] for b < batch, r < rows, c < cols, in tiles of 32 x 32 (both sides
// touch whole cache lines of a tile), split over the threads from a hundred KB on.
template <typename U>
void TransposeTiles(const U* in, U* out, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
  const int64_t bytes = batch * rows * cols * static_cast<int64_t>(sizeof(U));
  const int64_t tiles = batch * rt * ct;
  ParallelFor(tiles, bytes >= (int64_t{1} << 17) && tiles > 1, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t b = t / (rt * ct), r0 = t / ct % rt * kTile, c0 = t % ct * kTile;
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      const U* src = in + b * rows * cols;
      U* dst = out + b * rows * cols;
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
      }
    }
  });
}

// Output = `in` viewed with `view_dims`, transposed by `perm`, stored with `out_dims`.
absl::Status PermuteView(KernelContext& ctx, const ir::Tensor& in,
                         const std::vector<int64_t>& view_dims, const std::vector<int64_t>& perm,
                         std::vector<int64_t> out_dims) {
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, in.dtype(), std::move(out_dims)));
  if (const auto t = AsBatchedTranspose(view_dims, perm)) {
    return DispatchBySize(in.dtype(), [&](auto tag) -> absl::Status {
      using U = typename decltype(tag)::type;
      TransposeTiles(in.data<U>(), out->data<U>(), (*t)[0], (*t)[1], (*t)[2]);
      return absl::OkStatus();
    });
  }
  std::vector<int64_t> strides = Strides(view_dims);
  std::vector<int64_t> iter(perm.size());
  AxisMaps maps(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    iter[i] = view_dims[perm[i]];
    maps[i] = MakeMap(iter[i], strides[perm[i]], [](int64_t o) { return o; });
  }
  return Gather(in, *out, iter, maps);
}

// ---------------------------------------------------------------------------------------------
// Transpose

absl::Status RunTranspose(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  ASSIGN_OR_RETURN(const std::vector<int64_t> perm, TransposePerm(node, rank));
  std::vector<int64_t> out_dims(rank);
  for (int i = 0; i < rank; ++i) out_dims[i] = x->dim(perm[i]);
  return PermuteView(ctx, *x, x->dims(), perm, out_dims);
}

// ---------------------------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth: a reshape to 6-D, a fixed permutation, a reshape back.

// Checks blocksize and mode (DepthToSpace; SpaceToDepth from opset 28) once, when the node is
// compiled.
template <absl::Status (*Fn)(const ir::Node&, KernelContext&)>
absl::StatusOr<std::unique_ptr<Kernel>> CreateDepthSpace(const ir::Node& node) {
  if (node.GetInt("blocksize", 0) <= 0) {
    return InvalidNode(node, "blocksize must be positive, got ", node.GetInt("blocksize", 0));
  }
  if (node.op == ir::OpType::kSpaceToDepth && node.since_version < 28 && node.has_attr("mode")) {
    return InvalidNode(node, "SpaceToDepth has no mode attribute before opset 28");
  }
  if (node.op == ir::OpType::kDepthToSpace || node.op == ir::OpType::kSpaceToDepth) {
    std::string mode = node.GetString("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") {
      return InvalidNode(node, "mode must be DCR or CRD, got '", mode, "'");
    }
  }
  return FunctionKernel<Fn>::Create(node);
}

absl::Status RunDepthToSpace(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int64_t b = node.GetInt("blocksize", 0);
  if (x->rank() != 4) return InvalidNode(node, "input must be 4-D, got rank ", x->rank());
  const int64_t n = x->dim(0), c = x->dim(1), h = x->dim(2), w = x->dim(3);
  if (c % (b * b) != 0) {
    return InvalidNode(node, "channels ", c, " are not divisible by blocksize^2 = ", b * b);
  }
  const int64_t oc = c / (b * b);
  std::vector<int64_t> out_dims = {n, oc, h * b, w * b};
  if (node.GetString("mode", "DCR") == "CRD") {
    return PermuteView(ctx, *x, {n, oc, b, b, h, w}, {0, 1, 4, 2, 5, 3}, out_dims);
  }
  return PermuteView(ctx, *x, {n, b, b, oc, h, w}, {0, 3, 4, 1, 5, 2}, out_dims);
}

absl::Status RunSpaceToDepth(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int64_t b = node.GetInt("blocksize", 0);
  if (x->rank() != 4) return InvalidNode(node, "input must be 4-D, got rank ", x->rank());
  const int64_t n = x->dim(0), c = x->dim(1), h = x->dim(2), w = x->dim(3);
  if (h % b != 0 || w % b != 0) {
    return InvalidNode(node, "spatial dims ", h, "x", w, " are not divisible by blocksize ", b);
  }
  const std::vector<int64_t> out_dims = {n, c * b * b, h / b, w / b};
  if (node.GetString("mode", "DCR") == "CRD") {  // opset 28: channel-major blocks
    return PermuteView(ctx, *x, {n, c, h / b, b, w / b, b}, {0, 1, 3, 5, 2, 4}, out_dims);
  }
  return PermuteView(ctx, *x, {n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4}, out_dims);
}

// ---------------------------------------------------------------------------------------------
// Slice

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

absl::StatusOr<SliceArgs> ReadSliceArgs(const ir::Node& node, KernelContext& ctx) {
  SliceArgs a;
  if (node.since_version < 10) {
    a.starts = node.GetInts("starts");
    a.ends = node.GetInts("ends");
    a.axes = node.GetInts("axes");
  } else {
    ASSIGN_OR_RETURN(const ir::Tensor* s, RequireInput(node, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* e, RequireInput(node, ctx, 2));
    ASSIGN_OR_RETURN(a.starts, ReadInts(node, *s, "starts"));
    ASSIGN_OR_RETURN(a.ends, ReadInts(node, *e, "ends"));
    if (const ir::Tensor* t = ctx.input(3)) {
      ASSIGN_OR_RETURN(a.axes, ReadInts(node, *t, "axes"));
    }
    if (const ir::Tensor* t = ctx.input(4)) {
      ASSIGN_OR_RETURN(a.steps, ReadInts(node, *t, "steps"));
    }
  }
  const size_t n = a.starts.size();
  if (a.ends.size() != n) {
    return InvalidNode(node, "starts has ", n, " entries but ends has ", a.ends.size());
  }
  if (node.since_version < 10 ? node.has_attr("axes") : ctx.input(3) != nullptr) {
    if (a.axes.size() != n) {
      return InvalidNode(node, "axes has ", a.axes.size(), " entries, starts has ", n);
    }
  } else {
    for (size_t i = 0; i < n; ++i) a.axes.push_back(static_cast<int64_t>(i));
  }
  if (a.steps.empty() && (node.since_version < 10 || ctx.input(4) == nullptr)) {
    a.steps.assign(n, 1);
  }
  if (a.steps.size() != n) {
    return InvalidNode(node, "steps has ", a.steps.size(), " entries, starts has ", n);
  }
  return a;
}

}  // namespace

absl::StatusOr<SliceWindow> ReadSlice(const ir::Node& node, KernelContext& ctx,
                                      const ir::Tensor& x) {
  ASSIGN_OR_RETURN(SliceArgs args, ReadSliceArgs(node, ctx));
  const int rank = x.rank();
  SliceWindow w{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), x.dims()};
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < args.starts.size(); ++i) {
    if (args.axes[i] < -rank || args.axes[i] >= rank) {
      return InvalidNode(node, "axis ", args.axes[i], " is out of range for rank ", rank);
    }
    const int a = static_cast<int>(args.axes[i] < 0 ? args.axes[i] + rank : args.axes[i]);
    if (seen[a]) return InvalidNode(node, "axis ", args.axes[i], " is repeated");
    seen[a] = true;
    if (args.steps[i] == 0) return InvalidNode(node, "step for axis ", args.axes[i], " is 0");
    const ir::SliceAxis r = ir::SliceRange(args.starts[i], args.ends[i], args.steps[i], x.dim(a));
    w.start[a] = r.start;
    w.step[a] = r.step;
    w.dims[a] = r.length;
  }
  return w;
}

namespace {

absl::Status RunSlice(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const SliceWindow w, ReadSlice(node, ctx, *x));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), w.dims));
  std::vector<int64_t> strides = Strides(x->dims());
  AxisMaps maps(x->rank());
  for (int a = 0; a < x->rank(); ++a) {
    maps[a] = MakeMap(w.dims[a], strides[a], [&](int64_t o) { return w.start[a] + o * w.step[a]; });
  }
  return Gather(*x, *out, w.dims, maps);
}

// ---------------------------------------------------------------------------------------------
// Pad

}  // namespace

absl::StatusOr<PadMode> ParsePadMode(const ir::Node& node) {
  std::string mode = node.GetString("mode", "constant");
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  if (mode == "wrap") return PadMode::kWrap;
  return InvalidNode(node, "mode must be constant, reflect, edge or wrap, got '", mode, "'");
}

namespace {

// The constant as the data's dtype (raw bytes), from the opset-2 float attribute or the
// opset-11 scalar input (same dtype as the data; absent or empty means 0).
absl::Status PadValue(const ir::Node& node, KernelContext& ctx, DataType dt, uint64_t* bits) {
  *bits = 0;
  if (node.since_version < 11) {
    const float v = node.GetFloat("value", 0.0f);
    return DispatchAll(dt, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T t;
      if constexpr (std::is_same_v<T, bool>) {
        t = v != 0.0f;
      } else {
        t = Store<T>(v);
      }
      std::memcpy(bits, &t, sizeof(T));
      return absl::OkStatus();
    });
  }
  const ir::Tensor* c = ctx.input(2);
  if (c == nullptr || c->num_elements() == 0) return absl::OkStatus();
  if (c->dtype() != dt) {
    return InvalidNode(node, "constant_value has dtype ", DataTypeOnnxName(c->dtype()),
                       ", data has ", DataTypeOnnxName(dt));
  }
  if (c->num_elements() != 1) {
    return InvalidNode(node, "constant_value must be a scalar, got ", c->num_elements(),
                       " elements");
  }
  std::memcpy(bits, c->raw_data(), DataTypeSize(dt));
  return absl::OkStatus();
}

}  // namespace

int64_t PadCoord(PadMode mode, int64_t i, int64_t n) {
  switch (mode) {
    case PadMode::kEdge:
      return std::clamp<int64_t>(i, 0, n - 1);
    case PadMode::kWrap:
      return ((i % n) + n) % n;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      // Repeated reflection is a triangle wave of period 2(n-1) (numpy's "reflect").
      const int64_t period = 2 * (n - 1);
      int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
    case PadMode::kConstant:
      break;
  }
  return kFill;
}

namespace {

absl::Status RunPad(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(PadMode mode, ParsePadMode(node));
  const int rank = x->rank();
  std::vector<int64_t> pads, axes;
  if (node.since_version < 11) {
    pads = node.GetInts("pads");
  } else {
    ASSIGN_OR_RETURN(const ir::Tensor* p, RequireInput(node, ctx, 1));
    ASSIGN_OR_RETURN(pads, ReadInts(node, *p, "pads"));
    if (const ir::Tensor* t = ctx.input(3)) {
      ASSIGN_OR_RETURN(axes, ReadInts(node, *t, "axes"));
    }
  }
  if (node.since_version < 18 || ctx.input(3) == nullptr) {
    for (int a = 0; a < rank; ++a) axes.push_back(a);
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na) {
    return InvalidNode(node, "pads has ", pads.size(), " entries, expected 2 * ", na);
  }
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  std::vector<bool> seen(rank, false);
  // Far beyond any allocatable size, small enough that dim + begin + end cannot overflow.
  constexpr int64_t kMaxPad = int64_t{1} << 60;
  for (int64_t p : pads) {
    if (p > kMaxPad || p < -kMaxPad) return InvalidNode(node, "pad ", p, " is too large");
  }
  for (size_t i = 0; i < na; ++i) {
    ASSIGN_OR_RETURN(int a, NormalizeAxis(node, axes[i], rank));
    if (seen[a]) return InvalidNode(node, "axis ", axes[i], " is repeated");
    seen[a] = true;
    begin[a] = pads[i];
    end[a] = pads[na + i];
  }
  uint64_t fill = 0;
  RETURN_IF_ERROR(PadValue(node, ctx, x->dtype(), &fill));
  std::vector<int64_t> out_dims(rank);
  for (int a = 0; a < rank; ++a) {
    out_dims[a] = x->dim(a) + begin[a] + end[a];
    if (out_dims[a] < 0) {
      return InvalidNode(node, "pads ", begin[a], ",", end[a], " on axis ", a, " of size ",
                         x->dim(a), " give a negative size");
    }
  }
  std::vector<int64_t> strides = Strides(x->dims());
  AxisMaps maps(rank);
  for (int a = 0; a < rank; ++a) {
    // Negative pads crop first; the other modes then read from the kept window [lo, lo + n).
    const int64_t lo = std::max<int64_t>(0, -begin[a]);
    const int64_t n = x->dim(a) - lo - std::max<int64_t>(0, -end[a]);
    const int64_t pb = std::max<int64_t>(0, begin[a]);
    if (n <= 0 && mode != PadMode::kConstant && out_dims[a] > 0) {
      return InvalidNode(node, "cannot pad an empty axis ", a, " in mode ",
                         node.GetString("mode", "constant"));
    }
    maps[a] = MakeMap(out_dims[a], strides[a], [&](int64_t o) -> int64_t {
      const int64_t i = o - pb;
      if (i >= 0 && i < n) return lo + i;
      const int64_t c = PadCoord(mode, i, n);
      return c < 0 ? kFill : lo + c;
    });
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), out_dims));
  return Gather(*x, *out, out_dims, maps, &fill);
}

// ---------------------------------------------------------------------------------------------
// Tile and Expand

}  // namespace

absl::StatusOr<std::vector<int64_t>> TileDims(const ir::Node& node, KernelContext& ctx,
                                              const ir::Tensor& x) {
  ASSIGN_OR_RETURN(const ir::Tensor* r, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ReadInts(node, *r, "repeats"));
  const int rank = x.rank();
  if (static_cast<int>(repeats.size()) != rank) {
    return InvalidNode(node, "repeats has ", repeats.size(), " entries for input of rank ", rank);
  }
  std::vector<int64_t> out_dims(rank);
  for (int a = 0; a < rank; ++a) {
    if (repeats[a] < 0) return InvalidNode(node, "repeats must be >= 0, got ", repeats[a]);
    if (repeats[a] > 0 && x.dim(a) > std::numeric_limits<int64_t>::max() / repeats[a]) {
      return InvalidNode(node, "repeats ", repeats[a], " overflow axis ", a);
    }
    out_dims[a] = x.dim(a) * repeats[a];
  }
  if (ir::NumElementsOf(out_dims) < 0) {
    return InvalidNode(node, "output shape ", ir::DimsToString(out_dims), " is too large");
  }
  return out_dims;
}

absl::StatusOr<std::vector<int64_t>> ExpandDims(const ir::Node& node, KernelContext& ctx,
                                                const ir::Tensor& x) {
  ASSIGN_OR_RETURN(const ir::Tensor* s, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *s, "shape"));
  for (int64_t d : shape) {
    if (d < 0) return InvalidNode(node, "shape ", ir::DimsToString(shape), " has a negative dim");
  }
  return BroadcastShapes(node, x.dims(), shape);
}

namespace {

absl::Status RunTile(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const std::vector<int64_t> out_dims, TileDims(node, ctx, *x));
  const int rank = x->rank();
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), out_dims));
  std::vector<int64_t> strides = Strides(x->dims());
  AxisMaps maps(rank);
  for (int a = 0; a < rank; ++a) {
    const int64_t n = x->dim(a);
    maps[a] = MakeMap(out_dims[a], strides[a], [n](int64_t o) { return o % n; });
  }
  return Gather(*x, *out, out_dims, maps);
}

absl::Status RunExpand(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const std::vector<int64_t> out_dims, ExpandDims(node, ctx, *x));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), out_dims));
  std::vector<int64_t> strides = BroadcastStrides(x->dims(), out_dims);
  AxisMaps maps(out_dims.size());
  for (size_t a = 0; a < out_dims.size(); ++a) {
    maps[a] = MakeMap(out_dims[a], strides[a], [](int64_t o) { return o; });
  }
  return Gather(*x, *out, out_dims, maps);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePad(const ir::Node& node) {
  RETURN_IF_ERROR(ParsePadMode(node).status());
  return FunctionKernel<RunPad>::Create(node);
}

}  // namespace

void RegisterLayout(Registry& r) {
  const auto all = AllTypes();
  r.AddRef(ir::OpType::kTranspose, MovementTypes(), FunctionKernel<RunTranspose>::Create);
  r.AddRef(ir::OpType::kSlice, all, FunctionKernel<RunSlice>::Create);
  r.AddRef(ir::OpType::kPad, all, CreatePad);
  r.AddRef(ir::OpType::kTile, all, FunctionKernel<RunTile>::Create);
  r.AddRef(ir::OpType::kExpand, all, FunctionKernel<RunExpand>::Create);
  r.AddRef(ir::OpType::kDepthToSpace, all, CreateDepthSpace<RunDepthToSpace>);
  r.AddRef(ir::OpType::kSpaceToDepth, all, CreateDepthSpace<RunSpaceToDepth>);
  RegisterLayoutShape(r);
  RegisterLayoutConcat(r);
  RegisterLayoutResize(r);
}

}  // namespace kiln::kernels::cpu::ref
