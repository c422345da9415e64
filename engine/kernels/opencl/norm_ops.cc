// Normalisations, Softmax, reductions and pooling on OpenCL: Softmax, LogSoftmax,
// LayerNormalization, BatchNormalization (inference), ReduceSum / Mean / Max / Min / Prod / L2 /
// SumSquare, GlobalAveragePool, GlobalMaxPool, MaxPool and AveragePool (1-D and 2-D).
//
// Attributes, output shapes and errors come from the reference kernels' own helpers (cpu/ref:
// NormalizeAxis, ReadInts, MapParam, the pools' window geometry), so both backends accept and
// refuse a node alike, with the same messages. What the device cannot do (a stash type other than
// fp32, MaxPool's Indices, axes that are not constants, ...) `supports` refuses, so placement
// leaves the node on the CPU.
//
// Row statistics run one work-group per row: each item folds a run of consecutive elements in
// fp32, then a tree in local memory folds neighbouring runs, so an order-sensitive fold (the first
// of equal maxima wins; NaN handling) sees the elements in order. Sums differ from the reference's
// sequential ones only by rounding (the tests bound it). Short reductions run one item per output
// in the reference's order. Each output is rounded once to its storage type (DESIGN.md §5).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/normalization_internal.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"
#include "engine/kernels/opencl/row_ops.h"

namespace kiln::kernels::opencl {
namespace {

using ir::OpType;
namespace ref = cpu::ref;

// Reductions of at most this many elements per output run one item per output.
constexpr uint64_t kSerialMax = 64;

// ---- Softmax, LogSoftmax ----

std::string SoftmaxSource(DataType dt, bool log) {
  return absl::StrCat(StoragePrelude(dt), kGroupFold, log ? "#define LOG 1\n" : "", R"(
GROUP_FOLD(group_max, MAXP)
GROUP_FOLD(group_sum, SUM)
// One work-group per lane of n elements `inner` apart.
__kernel void run(__global const S_T* xs, ulong xo, __global S_T* ys, ulong yo, ulong n,
                  ulong inner) {
  __local float s[256];
  const ulong g = get_group_id(0);
  const ulong base = g / inner * n * inner + g % inner;
  __global const S_T* x = xs + xo + base;
  __global S_T* y = ys + yo + base;
  const ulong2 c = chunk(n);
  float m = -INFINITY;
  for (ulong k = c.x; k < c.y; ++k) m = MAXP(m, S_LD(x, k * inner));
  m = group_max(s, m);
  // Less the maximum, no exp overflows; it cancels in the ratio.
  float sum = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) sum += exp(S_LD(x, k * inner) - m);
  sum = group_sum(s, sum);
#ifdef LOG
  const float ls = log(sum);
  for (ulong k = c.x; k < c.y; ++k) S_ST(S_LD(x, k * inner) - m - ls, y, k * inner);
#else
  for (ulong k = c.x; k < c.y; ++k) S_ST(exp(S_LD(x, k * inner) - m) / sum, y, k * inner);
#endif
}
)");
}

template <bool kLog>
class SoftmaxKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    // Before opset 13 the input is coerced to 2-D at `axis` (default 1), as the reference does.
    const bool coerce = node.since_version < 13;
    return std::unique_ptr<Kernel>(
        new SoftmaxKernel(node, node.GetInt("axis", coerce ? 1 : -1), coerce));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    RETURN_IF_ERROR(CheckStored(node_, x->dtype(), "input"));
    ASSIGN_OR_RETURN(int axis, ref::NormalizeAxis(node_, axis_, x->rank()));
    uint64_t outer = 1, n = 1, inner = 1;
    for (int d = 0; d < x->rank(); ++d) {
      (d < axis ? outer : d == axis || coerce_ ? n : inner) *= x->dim(d);
    }
    const DataType dt = x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, x->dims()));
    if (x->num_elements() == 0) return absl::OkStatus();
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    ASSIGN_OR_RETURN(cl_kernel k, programs_.Get(dev, what, DataTypeOnnxName(dt), "run",
                                                [&] { return SoftmaxSource(dt, kLog); }));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*x, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, ya, cl_ulong{n}, cl_ulong{inner}));
    return LaunchGroups(*dev, k, outer * inner, GroupSize(*dev, k, n), what);
  }

 private:
  SoftmaxKernel(const ir::Node& node, int64_t axis, bool coerce)
      : NodeKernel(node), axis_(axis), coerce_(coerce) {}
  int64_t axis_;
  bool coerce_;
};

// ---- LayerNormalization (stash_type fp32) ----

std::string LayerNormSource(DataType dt, DataType pdt, DataType bdt) {
  return absl::StrCat(StoragePrelude(dt), StoragePrelude(pdt, "P"), StoragePrelude(bdt, "Q"),
                      kGroupFold, R"(
GROUP_FOLD(group_sum, SUM)
// One work-group per row of n; scale and bias repeat every pn and bn elements along it. flags: 1
// bias, 2 Mean output, 4 InvStdDev output. Statistics in fp32 (stash_type 1), as the reference.
__kernel void run(__global const S_T* xs, ulong xo, __global const P_T* ps, ulong po, ulong pn,
                  __global const Q_T* bs, ulong bo, ulong bn, __global S_T* ys, ulong yo,
                  __global float* ms, ulong mo, __global float* is, ulong io, ulong n, float eps,
                  int flags) {
  __local float s[256];
  const ulong r = get_group_id(0);
  __global const S_T* x = xs + xo + r * n;
  __global S_T* y = ys + yo + r * n;
  const ulong2 c = chunk(n);
  float acc = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) acc += S_LD(x, k);
  const float mean = group_sum(s, acc) / (float)n;  // NaN for an empty row, as the reference
  acc = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) {
    const float d = S_LD(x, k) - mean;
    acc += d * d;
  }
  const float inv = 1.0f / sqrt(group_sum(s, acc) / (float)n + eps);
  for (ulong k = c.x; k < c.y; ++k) {
    float v = (S_LD(x, k) - mean) * inv * P_LD(ps + po, k % pn);
    if (flags & 1) v += Q_LD(bs + bo, k % bn);
    S_ST(v, y, k);
  }
  if (get_local_id(0) == 0 && (flags & 2)) ms[mo + r] = mean;
  if (get_local_id(0) == 0 && (flags & 4)) is[io + r] = inv;
}
)");
}

class LayerNormKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(CheckFp32Stash(node));
    return std::unique_ptr<Kernel>(
        new LayerNormKernel(node, node.GetInt("axis", -1), node.GetFloat("epsilon", 1e-5f)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, ref::RequireInput(node_, ctx, 1));
    const ir::Tensor* bias = ctx.input(2);
    if (x->rank() == 0) return ref::InvalidNode(node_, "input must have rank >= 1");
    RETURN_IF_ERROR(CheckStored(node_, x->dtype(), "input"));
    ASSIGN_OR_RETURN(int axis, ref::NormalizeAxis(node_, axis_, x->rank()));
    cl_ulong period[2] = {1, 1};
    for (int i = 0; i < 2; ++i) {
      const ir::Tensor* p = i == 0 ? scale : bias;
      const char* name = i == 0 ? "scale" : "bias";
      if (p == nullptr) continue;
      RETURN_IF_ERROR(ref::CheckFloatParam(node_, *p, name));
      RETURN_IF_ERROR(ref::MapParam(node_, *p, x->dims(), axis, name).status());
      ASSIGN_OR_RETURN(period[i], ParamPeriod(node_, p, x->dims(), axis, name));
    }
    uint64_t rows = 1, inner = 1;
    std::vector<int64_t> stat_dims;
    for (int d = 0; d < x->rank(); ++d) {
      (d < axis ? rows : inner) *= x->dim(d);
      stat_dims.push_back(d < axis ? x->dim(d) : 1);
    }
    const DataType dt = x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, x->dims()));
    ir::Tensor* stats[2] = {nullptr, nullptr};  // Mean, InvStdDev: the stash type, fp32
    for (int i = 0; i < 2; ++i) {
      if (ctx.num_outputs() > i + 1 && ctx.output_requested(i + 1)) {
        ASSIGN_OR_RETURN(stats[i], ctx.output(i + 1, DataType::kF32, stat_dims));
      }
    }
    if (rows == 0) return absl::OkStatus();
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    const DataType pdt = scale->dtype(), bdt = bias ? bias->dtype() : pdt;
    ASSIGN_OR_RETURN(cl_kernel k,
                     programs_.Get(dev, what,
                                   absl::StrCat(DataTypeOnnxName(dt), DataTypeOnnxName(pdt),
                                                DataTypeOnnxName(bdt)),
                                   "run", [&] { return LayerNormSource(dt, pdt, bdt); }));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*x, what));
    ASSIGN_OR_RETURN(TensorArg sa, ArgOf(*scale, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    // Absent operands take a buffer that is never read or written.
    auto arg_or = [&](const ir::Tensor* t, TensorArg absent) -> absl::StatusOr<TensorArg> {
      return t == nullptr ? absent : ArgOf(*t, what);
    };
    ASSIGN_OR_RETURN(TensorArg ba, arg_or(bias, sa));
    ASSIGN_OR_RETURN(TensorArg ma, arg_or(stats[0], ya));
    ASSIGN_OR_RETURN(TensorArg ia, arg_or(stats[1], ya));
    const cl_int flags = (bias ? 1 : 0) | (stats[0] ? 2 : 0) | (stats[1] ? 4 : 0);
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, sa, period[0], ba, period[1], ya, ma, ia,
                            cl_ulong{inner}, epsilon_, flags));
    return LaunchGroups(*dev, k, rows, GroupSize(*dev, k, inner), what);
  }

 private:
  LayerNormKernel(const ir::Node& node, int64_t axis, float epsilon)
      : NodeKernel(node), axis_(axis), epsilon_(epsilon) {}
  int64_t axis_;
  float epsilon_;
};

// ---- BatchNormalization (inference) ----

constexpr const char* kBnNames[] = {"scale", "B", "mean", "var"};
constexpr const char* kBnPrefix[] = {"SC", "BI", "MU", "VA"};

std::string BatchNormSource(DataType dt, const DataType (&pdt)[4]) {
  std::string s = StoragePrelude(dt);
  for (int i = 0; i < 4; ++i) absl::StrAppend(&s, StoragePrelude(pdt[i], kBnPrefix[i]));
  return absl::StrCat(s, R"(
__kernel void run(__global const S_T* xs, ulong xo, __global const SC_T* sc, ulong sco,
                  __global const BI_T* bi, ulong bio, __global const MU_T* mu, ulong muo,
                  __global const VA_T* va, ulong vao, __global S_T* ys, ulong yo, ulong n,
                  ulong channels, ulong spatial, float eps) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong c = i / spatial % channels;
  const float sd = sqrt(VA_LD(va + vao, c) + eps);
  const float v = (S_LD(xs + xo, i) - MU_LD(mu + muo, c)) / sd * SC_LD(sc + sco, c) +
                  BI_LD(bi + bio, c);
  S_ST(v, ys + yo, i);
}
)");
}

bool ExtraOutputs(const ir::Node& node) {
  for (int i = 1; i < node.num_outputs(); ++i) {
    if (node.outputs[i] != nullptr) return true;
  }
  return false;
}

// Whether the node trains (batch statistics), by the reference's rule for its version.
bool BatchNormTrains(const ir::Node& node) {
  if (node.since_version >= 14) return node.GetInt("training_mode", 0) != 0;
  return node.since_version < 7 ? node.GetInt("is_test", 0) == 0 : ExtraOutputs(node);
}

class BatchNormKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(ref::nn::RefuseChannelsLast(node));
    if (node.since_version >= 14) {
      if (node.GetInt("training_mode", 0) == 0 && ExtraOutputs(node)) {
        return ref::InvalidNode(node, "has running mean/var outputs but training_mode is 0");
      }
      if (node.num_outputs() > 3) return ref::InvalidNode(node, "has more than 3 outputs");
    } else if (node.num_outputs() > 5) {
      return ref::InvalidNode(node, "has more than 5 outputs");
    }
    if (BatchNormTrains(node)) return Unsupported(node, "runs inference mode only");
    if (node.since_version < 9 && node.GetInt("spatial", 1) == 0) {
      return Unsupported(node, "runs spatial=1 only");
    }
    return std::unique_ptr<Kernel>(new BatchNormKernel(node, node.GetFloat("epsilon", 1e-5f)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    if (x->rank() < 2) {
      return ref::InvalidNode(node_, "input must have rank >= 2 (N x C x ...), got rank ",
                              x->rank());
    }
    RETURN_IF_ERROR(CheckStored(node_, x->dtype(), "input"));
    const int64_t channels = x->dim(1);
    int64_t spatial = 1;
    for (int d = 2; d < x->rank(); ++d) spatial *= x->dim(d);
    const ir::Tensor* params[4];
    DataType pdt[4];
    for (int i = 0; i < 4; ++i) {
      ASSIGN_OR_RETURN(params[i], ref::RequireInput(node_, ctx, i + 1));
      if (!IsFloating(params[i]->dtype())) {
        return ref::InvalidNode(node_, kBnNames[i], " must be a float tensor, got ",
                                DataTypeOnnxName(params[i]->dtype()));
      }
      if (params[i]->num_elements() != channels) {
        return ref::InvalidNode(node_, kBnNames[i], " must have ", channels,
                                " elements, got shape ", ir::DimsToString(params[i]->dims()));
      }
      RETURN_IF_ERROR(CheckStored(node_, params[i]->dtype(), kBnNames[i]));
      pdt[i] = params[i]->dtype();
    }
    const DataType dt = x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, x->dims()));
    if (x->num_elements() == 0) return absl::OkStatus();
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    std::string key = DataTypeOnnxName(dt);
    for (DataType p : pdt) absl::StrAppend(&key, ",", DataTypeOnnxName(p));
    ASSIGN_OR_RETURN(cl_kernel k, programs_.Get(dev, what, key, "run",
                                                [&] { return BatchNormSource(dt, pdt); }));
    const ir::Tensor* ts[6] = {x, params[0], params[1], params[2], params[3], y};
    TensorArg a[6];
    for (int i = 0; i < 6; ++i) {
      ASSIGN_OR_RETURN(a[i], ArgOf(*ts[i], what));
    }
    const cl_ulong n = x->num_elements();
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, a[0], a[1], a[2], a[3], a[4], a[5], n,
                            cl_ulong(channels), cl_ulong(spatial), epsilon_));
    return Launch1D(*dev, k, n, what);
  }

 private:
  BatchNormKernel(const ir::Node& node, float epsilon) : NodeKernel(node), epsilon_(epsilon) {}
  float epsilon_;
};

// ---- Reductions: Reduce*, GlobalAveragePool, GlobalMaxPool ----

// A fold: INIT (empty), ADD(a, v) (fold element v into a), COMB(a, b) (fold b, the fold of the
// elements after a's), FINAL(a, n, X0) (the output from the fold of n elements, X0 the first).
struct FoldDef {
  OpType op;
  const char *init, *add, *comb, *final;
};

// The reference's Max/Min: NaN wins, else the first of equal extrema.
#define KILN_MAX(a, b) "(" b " > " a " || (isnan(" b ") && !isnan(" a "))) ? " b " : " a
#define KILN_MIN(a, b) "(" b " < " a " || (isnan(" b ") && !isnan(" a "))) ? " b " : " a

const FoldDef kFolds[] = {
    {OpType::kReduceSum, "0.0f", "a + v", "a + b", "a"},
    {OpType::kReduceSumSquare, "0.0f", "a + v * v", "a + b", "a"},
    {OpType::kReduceMean, "0.0f", "a + v", "a + b", "n == 0 ? NAN : a / (float)n"},
    {OpType::kReduceL2, "0.0f", "a + v * v", "a + b", "sqrt(a)"},
    {OpType::kReduceProd, "1.0f", "a * v", "a * b", "a"},
    {OpType::kReduceMax, "-INFINITY", KILN_MAX("a", "v"), KILN_MAX("a", "b"), "a"},
    {OpType::kReduceMin, "INFINITY", KILN_MIN("a", "v"), KILN_MIN("a", "b"), "a"},
    // The mean of an empty plane is 0.
    {OpType::kGlobalAveragePool, "0.0f", "a + v", "a + b", "n > 0 ? a / (float)n : 0.0f"},
    // The reference starts from the first element and skips later NaNs (std::max): NaN is the
    // empty fold here, and a NaN first element the result.
    {OpType::kGlobalMaxPool, "NAN", "isnan(a) || a < v ? v : a", "isnan(a) || a < b ? b : a",
     "n == 0 ? 0.0f : isnan(X0) ? X0 : a"},
};
#undef KILN_MAX
#undef KILN_MIN

const FoldDef* FindFold(OpType op) {
  for (const FoldDef& f : kFolds) {
    if (f.op == op) return &f;
  }
  return nullptr;
}

std::string ReduceSource(const FoldDef& f, DataType dt) {
  return absl::StrCat(StoragePrelude(dt), kGroupFold, "#define INIT ", f.init,
                      "\n#define ADD(a, v) (", f.add, ")\n#define COMB(a, b) (", f.comb,
                      ")\n#define FINAL(a, n, X0) (", f.final, ")\n", R"(
GROUP_FOLD(group_comb, COMB)
// Offset of element i of dims d (4, the first outermost) with strides s.
inline ulong offs(ulong i, ulong4 d, ulong4 s) {
  ulong off = i % d.s3 * s.s3;
  i /= d.s3;
  off += i % d.s2 * s.s2;
  i /= d.s2;
  off += i % d.s1 * s.s1;
  return off + i / d.s1 * s.s0;
}
// Output o folds elements [lo, hi) of the n of reduced dims rd (strides rs) from its origin in
// kept dims kd.
#define FOLD(lo, hi)                                 \
  __global const S_T* x = xs + xo + offs(o, kd, ks); \
  float a = INIT;                                    \
  for (ulong r = (lo); r < (hi); ++r) {              \
    const float v = S_LD(x, offs(r, rd, rs));        \
    a = ADD(a, v);                                   \
  }
__kernel void serial(__global const S_T* xs, ulong xo, __global S_T* ys, ulong yo, ulong nout,
                     ulong n, ulong4 kd, ulong4 ks, ulong4 rd, ulong4 rs) {
  const size_t o = get_global_id(0);
  if (o >= nout) return;
  FOLD(0, n)
  S_ST(FINAL(a, n, S_LD(x, 0)), ys + yo, o);
}
__kernel void group(__global const S_T* xs, ulong xo, __global S_T* ys, ulong yo, ulong nout,
                    ulong n, ulong4 kd, ulong4 ks, ulong4 rd, ulong4 rs) {
  __local float s[256];
  const ulong o = get_group_id(0);
  const ulong2 c = chunk(n);
  FOLD(c.x, c.y)
  a = group_comb(s, a);
  if (get_local_id(0) == 0) S_ST(FINAL(a, n, S_LD(x, 0)), ys + yo, o);
}
)");
}

// The input as kept and reduced dims (size-1 dims dropped, neighbours of one kind merged), each
// at most 4, outermost first, with their strides.
struct ReducePlan {
  cl_ulong4 kd, ks, rd, rs;
  cl_ulong nout = 1, n = 1;
};

absl::StatusOr<ReducePlan> PlanReduce(const ir::Node& node, const std::vector<int64_t>& dims,
                                      const std::vector<bool>& reduced) {
  const std::vector<int64_t> strides = ref::Strides(dims);
  std::vector<int64_t> size[2], stride[2];  // [0] kept, [1] reduced
  int last = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    const int r = reduced[d] ? 1 : 0;
    if (last == r) {
      size[r].back() *= dims[d];
      stride[r].back() = strides[d];
    } else {
      size[r].push_back(dims[d]);
      stride[r].push_back(strides[d]);
    }
    last = r;
  }
  if (size[0].size() > 4 || size[1].size() > 4) {
    return Unsupported(node, "reduces at most 4 groups of dims and keeps at most 4");
  }
  ReducePlan p;
  cl_ulong4* d[2] = {&p.kd, &p.rd};
  cl_ulong4* s[2] = {&p.ks, &p.rs};
  for (int r = 0; r < 2; ++r) {
    const size_t m = size[r].size();
    for (size_t i = 0; i < 4; ++i) {
      d[r]->s[i] = i < 4 - m ? 1 : size[r][i - (4 - m)];
      s[r]->s[i] = i < 4 - m ? 0 : stride[r][i - (4 - m)];
    }
  }
  p.nout = ir::NumElementsOf(size[0]);
  p.n = ir::NumElementsOf(size[1]);
  return p;
}

absl::Status RunFold(const ir::Node& node, Programs& programs, const FoldDef& f,
                     const ir::Tensor& x, ir::Tensor& y, const ReducePlan& p) {
  if (p.nout == 0) return absl::OkStatus();
  const DataType dt = x.dtype();
  const std::string what = Label(node, dt);
  ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(y, what));
  const bool serial = p.n <= kSerialMax;
  ASSIGN_OR_RETURN(cl_kernel k,
                   programs.Get(dev, what, DataTypeOnnxName(dt), serial ? "serial" : "group",
                                [&] { return ReduceSource(f, dt); }));
  ASSIGN_OR_RETURN(TensorArg xa, ArgOf(x, what));
  ASSIGN_OR_RETURN(TensorArg ya, ArgOf(y, what));
  RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, ya, p.nout, p.n, p.kd, p.ks, p.rd, p.rs));
  if (serial) return Launch1D(*dev, k, p.nout, what);
  return LaunchGroups(*dev, k, p.nout, GroupSize(*dev, k, p.n), what);
}

class ReduceKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::unique_ptr<ReduceKernel>(new ReduceKernel(node));
    k->keepdims_ = node.GetInt("keepdims", 1) != 0;
    // ReduceSum moved axes to an input at 13, the other reductions at 18 (as the reference).
    const int since = node.op == OpType::kReduceSum ? 13 : 18;
    k->axes_from_input_ = node.since_version >= since;
    if (k->axes_from_input_) {
      k->noop_ = node.GetInt("noop_with_empty_axes", 0) != 0;
      if (node.has_attr("axes")) {
        return ref::InvalidNode(node, "takes axes as an input from opset ", since,
                                ", not as an attribute");
      }
    } else {
      k->axes_ = node.GetInts("axes");
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    RETURN_IF_ERROR(CheckStored(node_, x->dtype(), "input"));
    std::vector<int64_t> axes = axes_;
    const ir::Value* axes_in = node_.input(1);
    if (axes_from_input_ && axes_in != nullptr) {
      // Axes decide the output's shape on the host: `supports` asks for a constant.
      if (!axes_in->constant) return Unsupported(node_, "needs its axes as a constant");
      ASSIGN_OR_RETURN(axes, ref::ReadInts(node_, *axes_in->constant, "axes"));
    }
    const int rank = x->rank();
    std::vector<bool> reduced(rank, axes.empty() && !noop_);
    for (int64_t a : axes) {
      ASSIGN_OR_RETURN(int ax, ref::NormalizeAxis(node_, a, rank));
      if (ax >= rank) continue;  // axis 0 of a scalar: nothing to reduce
      if (reduced[ax]) return ref::InvalidNode(node_, "axis ", a, " is repeated in axes");
      reduced[ax] = true;
    }
    std::vector<int64_t> out_dims;
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d] || keepdims_) out_dims.push_back(reduced[d] ? 1 : x->dim(d));
    }
    ASSIGN_OR_RETURN(const ReducePlan plan, PlanReduce(node_, x->dims(), reduced));
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
    return RunFold(node_, programs_, *FindFold(node_.op), *x, *y, plan);
  }

 private:
  explicit ReduceKernel(const ir::Node& node) : NodeKernel(node) {}
  bool keepdims_ = true, noop_ = false, axes_from_input_ = false;
  std::vector<int64_t> axes_;
};

class GlobalPoolKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(new GlobalPoolKernel(node));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ref::nn::GlobalPoolIo io, ref::nn::StartGlobalPool(node_, ctx));
    RETURN_IF_ERROR(CheckStored(node_, io.x->dtype(), "input"));
    // Each (n, c) plane folds to one value.
    ASSIGN_OR_RETURN(const ReducePlan p,
                     PlanReduce(node_, {io.planes, io.plane_size}, {false, true}));
    return RunFold(node_, programs_, *FindFold(node_.op), *io.x, *io.y, p);
  }

 private:
  explicit GlobalPoolKernel(const ir::Node& node) : NodeKernel(node) {}
};

// ---- MaxPool, AveragePool (NCHW, 1 or 2 spatial dims) ----

std::string PoolSource(DataType dt, bool max) {
  return absl::StrCat(StoragePrelude(dt), max ? "#define MAX 1\n" : "", R"(
// g: kernel h, w; strides h, w; dilations h, w; pads top, left. pe: pads bottom, right. Cells in
// the reference's order (rows, then columns); the padded count takes cells inside the input and
// its pads (count_include_pad), never those that ceil_mode adds.
__kernel void run(__global const S_T* xs, ulong xo, __global S_T* ys, ulong yo, ulong n, long ih,
                  long iw, long oh, long ow, long8 g, long2 pe, int cip) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const long ox = i % ow, oy = i / ow % oh, plane = i / ow / oh;
  __global const S_T* x = xs + xo + plane * ih * iw;
  const long y0 = oy * g.s2 - g.s6, x0 = ox * g.s3 - g.s7;
#ifdef MAX
  float acc = -FLT_MAX;  // NaN cells are skipped; an empty window gives the lowest value
#else
  float acc = 0.0f;
#endif
  long vh = 0, ph = 0, vw = 0, pw = 0;
  for (long kx = 0; kx < g.s1; ++kx) {
    const long ix = x0 + kx * g.s5;
    pw += ix >= -g.s7 && ix < iw + pe.s1;
    vw += ix >= 0 && ix < iw;
  }
  for (long ky = 0; ky < g.s0; ++ky) {
    const long iy = y0 + ky * g.s4;
    ph += iy >= -g.s6 && iy < ih + pe.s0;
    if (iy < 0 || iy >= ih) continue;
    ++vh;
    for (long kx = 0; kx < g.s1; ++kx) {
      const long ix = x0 + kx * g.s5;
      if (ix < 0 || ix >= iw) continue;
      const float v = S_LD(x, iy * iw + ix);
#ifdef MAX
      if (v > acc) acc = v;
#else
      acc += v;
#endif
    }
  }
#ifndef MAX
  const long count = cip ? ph * pw : vh * vw;
  acc = count > 0 ? acc / (float)count : 0.0f;  // a window only in the pads: 0
#endif
  S_ST(acc, ys + yo, i);
}
)");
}

template <bool kMax>
class PoolKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(ref::nn::RefuseChannelsLast(node));
    auto k = std::unique_ptr<PoolKernel>(new PoolKernel(node));
    ASSIGN_OR_RETURN(k->attrs_, ref::nn::ReadPoolAttrs(node));
    k->count_include_pad_ = node.GetInt("count_include_pad", 0) != 0;
    const int64_t order = node.GetInt("storage_order", 0);
    if (order != 0 && order != 1) return ref::InvalidNode(node, "storage_order must be 0 or 1");
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    if (kMax && ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      return Unsupported(node_, "cannot output Indices");
    }
    ASSIGN_OR_RETURN(const ref::nn::PoolIo io, ref::nn::StartPool(node_, attrs_, ctx));
    const ref::nn::Window& w = io.win;
    if (w.rank() > 2) return Unsupported(node_, "pools over 1 or 2 spatial dims only");
    RETURN_IF_ERROR(CheckStored(node_, io.x->dtype(), "input"));
    // 1-D as 2-D with one row.
    const int h = w.rank() == 2 ? 0 : -1, x = w.rank() - 1;
    auto at = [h](const std::vector<int64_t>& v, int64_t one) { return h < 0 ? one : v[h]; };
    cl_long8 g;
    const int64_t gv[8] = {at(w.kernel, 1),    w.kernel[x],    at(w.strides, 1),   w.strides[x],
                           at(w.dilations, 1), w.dilations[x], at(w.pad_begin, 0), w.pad_begin[x]};
    for (int i = 0; i < 8; ++i) g.s[i] = gv[i];
    cl_long2 pe;
    pe.s[0] = at(w.pad_end, 0);
    pe.s[1] = w.pad_end[x];
    const cl_ulong n = io.y->num_elements();
    if (n == 0) return absl::OkStatus();
    const DataType dt = io.x->dtype();
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*io.y, what));
    ASSIGN_OR_RETURN(cl_kernel k, programs_.Get(dev, what, DataTypeOnnxName(dt), "run",
                                                [&] { return PoolSource(dt, kMax); }));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*io.x, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*io.y, what));
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, ya, n, cl_long(at(w.in, 1)), cl_long(w.in[x]),
                            cl_long(at(w.out, 1)), cl_long(w.out[x]), g, pe,
                            cl_int(count_include_pad_ ? 1 : 0)));
    return Launch1D(*dev, k, n, what);
  }

 private:
  explicit PoolKernel(const ir::Node& node) : NodeKernel(node) {}
  ref::nn::WindowAttrs attrs_;
  bool count_include_pad_ = false;
};

// ---- What placement may put here ----

// Input 0 of a stored float type, output 0 of its type (or not inferred: a node made directly,
// as in tests), and not channels-last (the AVX-512 kernels' layout).
bool FloatIo(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (x == nullptr || !ClFloatType(x->dtype)) return false;
  const ir::Value* y = node.num_outputs() > 0 ? node.outputs[0] : nullptr;
  if (y != nullptr && y->dtype != x->dtype && y->dtype != DataType::kUndefined) return false;
  return node.GetInt(kChannelsLastAttr, 0) == 0;
}

bool RankAtMost(const ir::Value* v, int rank) {
  return v == nullptr || !v->shape.rank_known || v->shape.rank() <= rank;
}

// fp32 statistics, stored parameter types, and parameters repeating along rows (a broadcast
// that the reference refuses is left to the kernel's error).
bool LayerNormSupports(const ir::Node& node) {
  // A stash type that is no float type is the kernel's error, as on the CPU.
  const int64_t stash = node.GetInt("stash_type", 1);
  if (!FloatIo(node) || (stash != 1 && IsFloating(DataTypeFromOnnx(static_cast<int32_t>(stash))))) {
    return false;
  }
  const ir::Value* x = node.input(0);
  for (int i = 1; i <= 2; ++i) {
    const ir::Value* p = node.input(i);
    if (p == nullptr) continue;
    if (!ClFloatType(p->dtype)) return false;
    if (!x->shape.is_static() || !p->shape.is_static()) continue;
    const std::vector<int64_t> xd = x->shape.StaticDims(), pd = p->shape.StaticDims();
    const int64_t a = node.GetInt("axis", -1), rank = static_cast<int64_t>(xd.size());
    const int64_t axis = a < 0 ? a + rank : a;
    if (axis < 0 || axis >= rank || pd.size() > xd.size()) continue;
    bool broadcasts = true;
    for (size_t d = 0; d < pd.size(); ++d) {
      const int64_t xv = xd[xd.size() - pd.size() + d];
      broadcasts &= pd[d] == 1 || pd[d] == xv;
    }
    if (broadcasts && !SuffixPeriod(pd, xd, static_cast<int>(axis))) return false;
  }
  return true;
}

bool BatchNormSupports(const ir::Node& node) {
  if (!FloatIo(node) || BatchNormTrains(node)) return false;
  if (node.since_version < 9 && node.GetInt("spatial", 1) == 0) return false;
  for (int i = 1; i <= 4; ++i) {
    const ir::Value* p = node.input(i);
    if (p != nullptr && !ClFloatType(p->dtype)) return false;
  }
  return true;
}

// Axes given as an input must be a constant (they decide the output's shape); at most 8 dims
// (4 kept and 4 reduced groups).
bool ReduceSupports(const ir::Node& node) {
  if (!FloatIo(node) || !RankAtMost(node.input(0), 8)) return false;
  const ir::Value* axes = node.input(1);
  return axes == nullptr || axes->constant.has_value();
}

bool PoolSupports(const ir::Node& node) {
  if (!FloatIo(node) || !RankAtMost(node.input(0), 4)) return false;
  return node.op != OpType::kMaxPool || node.num_outputs() < 2 || node.outputs[1] == nullptr;
}

}  // namespace

void RegisterNorm(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  auto add = [&](OpType op, KernelFactory f, bool (*supports)(const ir::Node&)) {
    KernelDef def{op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, f};
    def.supports = supports;
    r.Add(def);
  };
  add(OpType::kSoftmax, &SoftmaxKernel<false>::Create, FloatIo);
  add(OpType::kLogSoftmax, &SoftmaxKernel<true>::Create, FloatIo);
  add(OpType::kLayerNormalization, &LayerNormKernel::Create, LayerNormSupports);
  add(OpType::kBatchNormalization, &BatchNormKernel::Create, BatchNormSupports);
  for (OpType op :
       {OpType::kReduceSum, OpType::kReduceSumSquare, OpType::kReduceMean, OpType::kReduceL2,
        OpType::kReduceProd, OpType::kReduceMax, OpType::kReduceMin}) {
    add(op, &ReduceKernel::Create, ReduceSupports);
  }
  add(OpType::kGlobalAveragePool, &GlobalPoolKernel::Create, FloatIo);
  add(OpType::kGlobalMaxPool, &GlobalPoolKernel::Create, FloatIo);
  add(OpType::kMaxPool, &PoolKernel<true>::Create, PoolSupports);
  add(OpType::kAveragePool, &PoolKernel<false>::Create, PoolSupports);
}

}  // namespace kiln::kernels::opencl
