// Memory ops on OpenCL: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Slice, Gather,
// Expand, Split, Tile and Pad. They compute nothing, so they move bits: elements travel as 16- or
// 32-bit words (NaN payloads and signed zeros intact) and the results equal the reference
// kernels' (cpu/ref/layout*.cc, indexing.cc) bit for bit.
//
// The reference's own plan is reused: every output axis maps its index to an input offset (or a
// fill), and an output element reads the sum of its coordinates' entries. The host builds those
// maps exactly as the reference does, with its checks and error messages, and one OpenCL kernel
// walks them for Transpose, Slice, Gather, Expand, Tile and Pad. Concat and Split move rows
// ([outer, chunk] blocks), and the shape-only ops copy the buffer.
//
// Shape-like inputs (Reshape's shape, Slice's starts..., pads, repeats, split, axes) and Gather's
// indices decide what is read where, so they are needed on the host. A constant one is read from
// the graph; any other is read back from the device with a blocking read (a few bytes, and a
// wait for the queue: cheaper than running the op on the CPU, which moves the whole activation
// there and back). Gather's indices are validated on the host before any launch, so an
// out-of-range index is the reference's error, never a read out of bounds on the device.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/layout_internal.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"

namespace kiln::kernels::opencl {
namespace {

using cpu::ref::InvalidNode;
using cpu::ref::NormalizeAxis;
using cpu::ref::PadMode;
using cpu::ref::Product;
using cpu::ref::ReadInts;
using cpu::ref::RequireInput;
using cpu::ref::Strides;
using ir::OpType;

constexpr int64_t kFill = -1;

// `gather`: output element i reads input offset sum_a map_a[c_a] over its coordinates c_a (a
// fill where an entry is negative). plan = dims[rank], then where each axis's map starts in plan,
// then the maps. `rows`: [outer, chunk] blocks between row strides (Concat, Split).
std::string Source(DataType dt) {
  return absl::StrCat("typedef ", DataTypeSize(dt) == 2 ? "ushort" : "uint", " E;\n", R"(
__kernel void gather(__global const E* xs, ulong xo, __global E* ys, ulong yo, ulong n,
                     __global const long* plan, int rank, uint fill) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  ulong r = i;
  long off = 0;
  for (int a = rank - 1; a >= 0; --a) {
    const ulong d = (ulong)plan[a];
    const long m = plan[plan[rank + a] + (long)(r % d)];
    r /= d;
    off = (off < 0 || m < 0) ? -1 : off + m;
  }
  ys[yo + i] = off < 0 ? (E)fill : xs[xo + off];
}

__kernel void rows(__global const E* xs, ulong xo, __global E* ys, ulong yo, ulong n,
                   ulong chunk, ulong xrow, ulong yrow) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong o = i / chunk, j = i % chunk;
  ys[yo + o * yrow + j] = xs[xo + o * xrow + j];
}
)");
}

// A gather plan: iteration (output) dims, one map per axis, the fill's bits.
struct Plan {
  std::vector<int64_t> iter;
  std::vector<std::vector<int64_t>> maps;
  uint32_t fill = 0;

  // Axis of `n` outputs whose index o reads input coordinate coord(o) (a fill where negative),
  // as the reference's MakeMap.
  template <typename F>
  void Axis(int64_t n, int64_t stride, F coord) {
    std::vector<int64_t> m(n);
    for (int64_t o = 0; o < n; ++o) {
      const int64_t c = coord(o);
      m[o] = c < 0 ? kFill : c * stride;
    }
    iter.push_back(n);
    maps.push_back(std::move(m));
  }
};

int64_t Identity(int64_t o) { return o; }

// What the ops share at run time: the programs, built at the first run, and the plan buffer kept
// while the plan stays the same (the usual case: same shapes every run).
class Mover {
 public:
  explicit Mover(const ir::Node& node) : node_(node) {}

  // y = x gathered through `plan` (y's dims hold plan.iter's elements).
  absl::Status Gather(const ir::Tensor& x, ir::Tensor& y, const Plan& plan) {
    const int rank = static_cast<int>(plan.iter.size());
    std::vector<int64_t> flat(plan.iter);
    flat.resize(2 * rank);
    for (int a = 0; a < rank; ++a) {
      flat[rank + a] = static_cast<int64_t>(flat.size());
      flat.insert(flat.end(), plan.maps[a].begin(), plan.maps[a].end());
    }
    if (flat.empty()) flat.push_back(0);  // a scalar: no buffer of 0 bytes
    const cl_ulong n = static_cast<cl_ulong>(y.num_elements());
    if (n == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(Launch l, Prepare(x, y, gather_, "gather"));
    if (plan_buf_ == nullptr || flat != plan_ || plan_buf_->shared_device() != l.dev) {
      ASSIGN_OR_RETURN(plan_buf_, NewBuffer(l.dev, flat.size() * sizeof(int64_t)));
      RETURN_IF_ERROR(ClStatus(l.dev->cl().clEnqueueWriteBuffer(
                                   l.dev->queue(), plan_buf_->mem(), CL_TRUE, 0,
                                   flat.size() * sizeof(int64_t), flat.data(), 0, nullptr, nullptr),
                               absl::StrCat("writing the plan of ", l.what)));
      plan_ = std::move(flat);
    }
    const cl_mem pm = plan_buf_->mem();
    RETURN_IF_ERROR(SetArgs(*l.dev, l.k, l.what, 0, l.x, l.y, n, pm, cl_int{rank}, plan.fill));
    return Launch1D(*l.dev, l.k, n, l.what);
  }

  // Rows of `chunk` elements: y[yoff + o * yrow + j] = x[xoff + o * xrow + j] for o < outer.
  absl::Status Rows(const ir::Tensor& x, ir::Tensor& y, int64_t outer, int64_t chunk, int64_t xrow,
                    int64_t xoff, int64_t yrow, int64_t yoff) {
    const cl_ulong n = static_cast<cl_ulong>(outer * chunk);
    if (n == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(Launch l, Prepare(x, y, rows_, "rows"));
    l.x.offset += xoff;
    l.y.offset += yoff;
    RETURN_IF_ERROR(SetArgs(*l.dev, l.k, l.what, 0, l.x, l.y, n, static_cast<cl_ulong>(chunk),
                            static_cast<cl_ulong>(xrow), static_cast<cl_ulong>(yrow)));
    return Launch1D(*l.dev, l.k, n, l.what);
  }

  // y = x's bytes (the shape-only ops).
  absl::Status Copy(const ir::Tensor& x, ir::Tensor& y) {
    const std::string what = Label(node_, x.dtype());
    ASSIGN_OR_RETURN(const ClStorage* xs, StorageOf(x, what));
    ASSIGN_OR_RETURN(const ClStorage* ys, StorageOf(y, what));
    // The planner may give the output the input's own bytes: nothing to move then.
    if (x.byte_size() == 0 || (xs->mem() == ys->mem() && x.device_offset() == y.device_offset())) {
      return absl::OkStatus();
    }
    Device& dev = ys->device();
    return ClStatus(
        dev.cl().clEnqueueCopyBuffer(dev.queue(), xs->mem(), ys->mem(), x.device_offset(),
                                     y.device_offset(), x.byte_size(), 0, nullptr, nullptr),
        absl::StrCat("queueing the copy of ", what));
  }

 private:
  struct Launch {
    std::shared_ptr<Device> dev;
    cl_kernel k;
    TensorArg x, y;
    std::string what;
  };

  // The function `entry` for x's element size, and both tensors' arguments.
  absl::StatusOr<Launch> Prepare(const ir::Tensor& x, const ir::Tensor& y,
                                 std::unique_ptr<ClFunction> (&fns)[2], const char* entry) {
    Launch l;
    l.what = Label(node_, x.dtype());
    const size_t size = DataTypeSize(x.dtype());
    if ((size != 2 && size != 4) || y.dtype() != x.dtype()) {
      return absl::InternalError(absl::StrCat(l.what, " moves 16- or 32-bit elements only"));
    }
    ASSIGN_OR_RETURN(const ClStorage* ys, StorageOf(y, l.what));
    l.dev = ys->shared_device();
    std::unique_ptr<ClFunction>& fn = fns[size == 2 ? 0 : 1];
    if (fn == nullptr) fn = std::make_unique<ClFunction>(l.what, Source(x.dtype()), entry);
    ASSIGN_OR_RETURN(l.k, fn->Get(l.dev));
    ASSIGN_OR_RETURN(l.x, ArgOf(x, l.what));
    ASSIGN_OR_RETURN(l.y, ArgOf(y, l.what));
    return l;
  }

  const ir::Node& node_;
  std::unique_ptr<ClFunction> gather_[2], rows_[2];
  std::vector<int64_t> plan_;
  std::shared_ptr<ClStorage> plan_buf_;
};

// ---------------------------------------------------------------------------------------------
// Shape-only ops (cpu/ref/layout_shape.cc): a copy with new dims.

absl::Status CopyWithDims(KernelContext& ctx, Mover& m, const ir::Tensor& x,
                          std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x.dtype(), std::move(dims)));
  return m.Copy(x, *y);
}

absl::Status RunReshape(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, cpu::ref::ReshapeDims(node, ctx, *x));
  return CopyWithDims(ctx, m, *x, std::move(dims));
}

absl::Status RunFlatten(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  int64_t axis = node.GetInt("axis", 1);
  if (axis < -rank || axis > rank) {
    return InvalidNode(node, "axis ", axis, " is out of range for rank ", rank);
  }
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  return CopyWithDims(ctx, m, *x, {Product(x->dims(), 0, a), Product(x->dims(), a, rank)});
}

absl::Status RunSqueeze(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, cpu::ref::SqueezeDims(node, ctx, *x));
  return CopyWithDims(ctx, m, *x, std::move(dims));
}

absl::Status RunUnsqueeze(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, cpu::ref::UnsqueezeDims(node, ctx, *x));
  return CopyWithDims(ctx, m, *x, std::move(dims));
}

// ---------------------------------------------------------------------------------------------
// Concat and Split (cpu/ref/layout_concat.cc): [outer, dim(axis) * inner] rows.

absl::Status RunConcat(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const cpu::ref::ConcatArgs args, cpu::ref::ReadConcat(node, ctx));
  const std::vector<const ir::Tensor*>& xs = args.xs;
  const int axis = args.axis;
  const std::vector<int64_t>& out_dims = args.out_dims;
  const int rank = static_cast<int>(out_dims.size());
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, xs[0]->dtype(), out_dims));
  const int64_t outer = Product(out_dims, 0, axis);
  const int64_t inner = Product(out_dims, axis + 1, rank);
  const int64_t row = out_dims[axis] * inner;
  int64_t off = 0;
  for (const ir::Tensor* x : xs) {
    const int64_t chunk = x->dim(axis) * inner;
    RETURN_IF_ERROR(m.Rows(*x, *y, outer, chunk, chunk, 0, row, off));
    off += chunk;
  }
  return absl::OkStatus();
}

absl::Status RunSplit(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  if (rank == 0) return InvalidNode(node, "cannot split a scalar");
  if (ctx.num_outputs() < 1) return InvalidNode(node, "needs at least one output");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), rank));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, cpu::ref::SplitSizes(node, ctx, x->dim(axis)));
  const int64_t outer = Product(x->dims(), 0, axis);
  const int64_t inner = Product(x->dims(), axis + 1, rank);
  const int64_t row = x->dim(axis) * inner;
  int64_t off = 0;  // this output's chunk within an input row
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    const int64_t chunk = sizes[i] * inner;
    if (ctx.output_requested(i)) {
      std::vector<int64_t> dims = x->dims();
      dims[axis] = sizes[i];
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(i, x->dtype(), dims));
      RETURN_IF_ERROR(m.Rows(*x, *y, outer, chunk, row, off, chunk, 0));
    }
    off += chunk;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Gathers through per-axis maps (cpu/ref/layout.cc, indexing.cc).

absl::Status RunTranspose(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int rank = x->rank();
  ASSIGN_OR_RETURN(const std::vector<int64_t> perm, cpu::ref::TransposePerm(node, rank));
  const std::vector<int64_t> strides = Strides(x->dims());
  Plan p;
  for (int i = 0; i < rank; ++i) p.Axis(x->dim(perm[i]), strides[perm[i]], Identity);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), p.iter));
  return m.Gather(*x, *y, p);
}

absl::Status RunSlice(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const cpu::ref::SliceWindow w, cpu::ref::ReadSlice(node, ctx, *x));
  const std::vector<int64_t> strides = Strides(x->dims());
  Plan p;
  for (int a = 0; a < x->rank(); ++a) {
    p.Axis(w.dims[a], strides[a], [&](int64_t o) { return w.start[a] + o * w.step[a]; });
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), w.dims));
  return m.Gather(*x, *y, p);
}

// The fill's bits: the opset-2 float attribute rounded to the data's type, or the opset-11
// scalar input (the data's dtype; absent or empty means 0).
absl::Status PadValue(const ir::Node& node, KernelContext& ctx, DataType dt, uint32_t* bits) {
  *bits = 0;
  if (node.since_version < 11) {
    const float v = node.GetFloat("value", 0.0f);
    *bits = dt == DataType::kF16    ? FloatToHalfBits(v)
            : dt == DataType::kBF16 ? FloatToBFloat16Bits(v)
                                    : FloatBits(v);
    return absl::OkStatus();
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
  std::memcpy(bits, c->raw_data(), DataTypeSize(dt));  // little-endian: the low bits
  return absl::OkStatus();
}

absl::Status RunPad(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(PadMode mode, cpu::ref::ParsePadMode(node));
  const int rank = x->rank();
  std::vector<int64_t> pads, axes;
  if (node.since_version < 11) {
    pads = node.GetInts("pads");
  } else {
    ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(node, ctx, 1));
    ASSIGN_OR_RETURN(pads, ReadInts(node, *t, "pads"));
    if (const ir::Tensor* a = ctx.input(3)) {
      ASSIGN_OR_RETURN(axes, ReadInts(node, *a, "axes"));
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
  constexpr int64_t kMaxPad = int64_t{1} << 60;  // dim + begin + end cannot overflow
  for (int64_t v : pads) {
    if (v > kMaxPad || v < -kMaxPad) return InvalidNode(node, "pad ", v, " is too large");
  }
  for (size_t i = 0; i < na; ++i) {
    ASSIGN_OR_RETURN(int a, NormalizeAxis(node, axes[i], rank));
    if (seen[a]) return InvalidNode(node, "axis ", axes[i], " is repeated");
    seen[a] = true;
    begin[a] = pads[i];
    end[a] = pads[na + i];
  }
  Plan p;
  RETURN_IF_ERROR(PadValue(node, ctx, x->dtype(), &p.fill));
  std::vector<int64_t> out_dims(rank);
  for (int a = 0; a < rank; ++a) {
    out_dims[a] = x->dim(a) + begin[a] + end[a];
    if (out_dims[a] < 0) {
      return InvalidNode(node, "pads ", begin[a], ",", end[a], " on axis ", a, " of size ",
                         x->dim(a), " give a negative size");
    }
  }
  const std::vector<int64_t> strides = Strides(x->dims());
  for (int a = 0; a < rank; ++a) {
    // Negative pads crop first; the other modes then read from the kept window [lo, lo + n).
    const int64_t lo = std::max<int64_t>(0, -begin[a]);
    const int64_t n = x->dim(a) - lo - std::max<int64_t>(0, -end[a]);
    const int64_t pb = std::max<int64_t>(0, begin[a]);
    if (n <= 0 && mode != PadMode::kConstant && out_dims[a] > 0) {
      return InvalidNode(node, "cannot pad an empty axis ", a, " in mode ",
                         node.GetString("mode", "constant"));
    }
    p.Axis(out_dims[a], strides[a], [&](int64_t o) -> int64_t {
      const int64_t i = o - pb;
      if (i >= 0 && i < n) return lo + i;
      const int64_t c = cpu::ref::PadCoord(mode, i, n);
      return c < 0 ? kFill : lo + c;
    });
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  return m.Gather(*x, *y, p);
}

absl::Status RunTile(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const std::vector<int64_t> out_dims, cpu::ref::TileDims(node, ctx, *x));
  const int rank = x->rank();
  const std::vector<int64_t> strides = Strides(x->dims());
  Plan p;
  for (int a = 0; a < rank; ++a) {
    const int64_t n = x->dim(a);
    p.Axis(out_dims[a], strides[a], [n](int64_t o) { return o % n; });
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  return m.Gather(*x, *y, p);
}

absl::Status RunExpand(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const std::vector<int64_t> out_dims, cpu::ref::ExpandDims(node, ctx, *x));
  const std::vector<int64_t> strides = cpu::ref::BroadcastStrides(x->dims(), out_dims);
  Plan p;
  for (size_t a = 0; a < out_dims.size(); ++a) p.Axis(out_dims[a], strides[a], Identity);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  return m.Gather(*x, *y, p);
}

// Gather as the reference (indexing.cc): indices int32 or int64, each in [-n, n), wrapped;
// the data viewed as [outer, n, inner] and gathered as [outer, indices, inner].
absl::Status RunGather(const ir::Node& node, KernelContext& ctx, Mover& m) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  if (data->rank() < 1) return InvalidNode(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  if (indices->dtype() != DataType::kI64 && indices->dtype() != DataType::kI32) {
    return InvalidNode(node, "indices must be int32 or int64, got ",
                       DataTypeOnnxName(indices->dtype()));
  }
  const std::vector<int64_t>& dd = data->dims();
  std::vector<int64_t> out_dims(dd.begin(), dd.begin() + axis);
  out_dims.insert(out_dims.end(), indices->dims().begin(), indices->dims().end());
  out_dims.insert(out_dims.end(), dd.begin() + axis + 1, dd.end());
  const int64_t n = dd[axis];
  const int64_t outer = Product(dd, 0, axis), inner = Product(dd, axis + 1, dd.size());
  Plan p;
  p.Axis(outer, n * inner, Identity);
  std::vector<int64_t> idx(indices->num_elements());
  for (size_t e = 0; e < idx.size(); ++e) {
    const int64_t i = ir::ElementAsInt64(*indices, static_cast<int64_t>(e));
    const int64_t w = i < 0 ? i + n : i;
    if (w < 0 || w >= n) {
      return InvalidNode(node, "index ", i, " is out of range for a dimension of size ", n);
    }
    idx[e] = w;
  }
  p.Axis(static_cast<int64_t>(idx.size()), inner, [&](int64_t o) { return idx[o]; });
  p.Axis(inner, 1, Identity);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, data->dtype(), std::move(out_dims)));
  return m.Gather(*data, *y, p);
}

// ---------------------------------------------------------------------------------------------
// Registration.

using RunFn = absl::Status (*)(const ir::Node&, KernelContext&, Mover&);

class MemoryKernel final : public Kernel {
 public:
  MemoryKernel(const ir::Node& node, RunFn run, std::vector<int> params)
      : node_(node), run_(run), params_(std::move(params)), mover_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    HostParams host(ctx);
    RETURN_IF_ERROR(host.Fetch(node_, params_));
    return run_(node_, host, mover_);
  }

 private:
  const ir::Node& node_;
  RunFn run_;
  std::vector<int> params_;
  Mover mover_;
};

struct OpDef {
  OpType op;
  RunFn run;
  std::vector<int> params;  // inputs read on the host
  bool all_data = false;    // every input is data (Concat); else input 0 (and Pad's value)
};

const OpDef kOps[] = {
    {OpType::kTranspose, RunTranspose, {}},
    {OpType::kReshape, RunReshape, {1}},
    {OpType::kFlatten, RunFlatten, {}},
    {OpType::kSqueeze, RunSqueeze, {1}},
    {OpType::kUnsqueeze, RunUnsqueeze, {1}},
    {OpType::kConcat, RunConcat, {}, true},
    {OpType::kSlice, RunSlice, {1, 2, 3, 4}},
    {OpType::kGather, RunGather, {1}},
    {OpType::kExpand, RunExpand, {1}},
    {OpType::kSplit, RunSplit, {1}},
    {OpType::kTile, RunTile, {1}},
    {OpType::kPad, RunPad, {1, 2, 3}},
};

const OpDef* FindOp(OpType op) {
  for (const OpDef& d : kOps) {
    if (d.op == op) return &d;
  }
  return nullptr;
}

// The checks the reference kernels make when they are created, so a node fails the same way
// (and placement keeps a node the reference would refuse on the CPU, where it fails as always).
absl::StatusOr<std::unique_ptr<Kernel>> MakeMemory(const ir::Node& node) {
  const OpDef* def = FindOp(node.op);
  if (def == nullptr) return absl::InternalError(absl::StrCat(node.Label(), " is no memory op"));
  if (node.op == OpType::kPad) RETURN_IF_ERROR(cpu::ref::ParsePadMode(node).status());
  if (node.op == OpType::kSplit && node.since_version >= 18 && node.has_attr("num_outputs") &&
      node.GetInt("num_outputs", 0) < 1) {
    return InvalidNode(node, "num_outputs must be >= 1, got ", node.GetInt("num_outputs", 0));
  }
  if (node.op == OpType::kGather) {
    const ir::Value* v = node.input(0);
    if (v != nullptr && v->shape.rank_known) {
      RETURN_IF_ERROR(NormalizeAxis(node, node.GetInt("axis", 0), v->shape.rank()).status());
    }
  }
  return std::unique_ptr<Kernel>(new MemoryKernel(node, def->run, def->params));
}

// Placement asks before it puts a node here: data of one float storage type (input 0; every
// input of Concat), outputs of that type or not yet inferred. Shape-like inputs need not be
// constants (see the top of the file); their dtypes and values are checked at run time with the
// reference's errors.
bool MemorySupports(const ir::Node& node) {
  const OpDef* def = FindOp(node.op);
  const ir::Value* x = node.input(0);
  if (def == nullptr || x == nullptr || !ClFloatType(x->dtype)) return false;
  for (int i = 1; def->all_data && i < node.num_inputs(); ++i) {
    if (node.input(i) == nullptr || node.input(i)->dtype != x->dtype) return false;
  }
  for (const ir::Value* v : node.outputs) {
    if (v != nullptr && v->dtype != x->dtype && v->dtype != DataType::kUndefined) return false;
  }
  return true;
}

}  // namespace

void RegisterMemory(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (const OpDef& d : kOps) {
    KernelDef def{d.op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeMemory};
    def.supports = MemorySupports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::opencl
