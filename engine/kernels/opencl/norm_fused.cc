// The fused residual normalisation AddLayerNorm and RMSNormalization on OpenCL:
//   AddLayerNorm(A, B, scale, [bias]) -> (LayerNormalization(A + B), A + B)   (cpu/ref/fused.cc)
//   RMSNormalization(X, scale) -> X / sqrt(mean(X^2) + epsilon) * scale       (normalization_layer)
//
// Why here: a transformer's residual stream runs Add + LayerNormalization (fused into
// AddLayerNorm) or RMSNormalization once per block; left on the CPU, each would cost two
// transfers of the whole activation.
//
// Semantics are the reference kernels': their attribute, shape and dtype checks (cpu/ref helpers:
// BroadcastPlan, NormalizeAxis, MapParam, CheckFloatParam, OutputDtype), so both backends refuse
// a node alike, with the same messages. AddLayerNorm reads each operand from its own storage type
// (A, B, scale, bias and the two outputs may each be fp32, fp16 or bf16), adds A + B in fp32 and
// never rounds that sum before normalising; the optional sum output is that fp32 sum rounded once
// to its own dtype, so it is bit-for-bit the reference's. A and B broadcast (numpy rules, up to 4
// dims once neighbouring dims are merged). What the device does not do `supports` refuses, so
// placement leaves the node on the CPU: double operands or outputs, a scale or bias that varies
// across rows or broadcasts within one, RMSNormalization's stash types other than fp32, A and B
// broadcasting over more than 4 merged dims.
//
// Arithmetic (DESIGN.md §5): one work-group per row; each item folds a run of consecutive elements
// in fp32, then a tree in local memory folds neighbouring runs (norm_ops.cc's fold). Statistics in
// fp32 in the reference's formulas and order of operations; sums differ from the reference's
// sequential ones only by rounding (the tests bound it). Each output is rounded once.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"
#include "engine/kernels/cpu/ref/normalization_internal.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"
#include "engine/kernels/opencl/row_ops.h"

namespace kiln::kernels::opencl {
namespace {

using ir::OpType;
namespace ref = cpu::ref;

// A + B broadcast over at most this many dims (after merging neighbours).
constexpr int kMaxBroadcastDims = 4;

// norm_ops.cc's fold (row_ops.h), with its sum.
std::string GroupSum() { return absl::StrCat(kGroupFold, "GROUP_FOLD(group_sum, SUM)\n"); }

// ---- AddLayerNorm ----

// A + B over the output's dims: flat (both of the output's size), or through at most 4 merged
// dims (outermost first, leading 1s) with each operand's strides (0 where it broadcasts).
struct AddPlan {
  bool flat = true;
  cl_ulong4 d{}, sa{}, sb{};
};

std::optional<AddPlan> PlanAdd(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               const std::vector<int64_t>& out) {
  AddPlan p;
  const int64_t n = ir::NumElementsOf(out);
  if (ir::NumElementsOf(a) == n && ir::NumElementsOf(b) == n) return p;
  p.flat = false;
  const std::vector<int64_t> fa = ref::BroadcastStrides(a, out), fb = ref::BroadcastStrides(b, out);
  std::vector<int64_t> dims, sa, sb;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    // Merged into the previous dim when both operands walk the two as one range.
    if (!dims.empty() && sa.back() == fa[d] * out[d] && sb.back() == fb[d] * out[d]) {
      dims.back() *= out[d];
      sa.back() = fa[d];
      sb.back() = fb[d];
    } else {
      dims.push_back(out[d]);
      sa.push_back(fa[d]);
      sb.push_back(fb[d]);
    }
  }
  if (dims.size() > kMaxBroadcastDims) return std::nullopt;
  const size_t pad = kMaxBroadcastDims - dims.size();
  for (size_t i = 0; i < kMaxBroadcastDims; ++i) {
    p.d.s[i] = i < pad ? 1 : dims[i - pad];
    p.sa.s[i] = i < pad ? 0 : sa[i - pad];
    p.sb.s[i] = i < pad ? 0 : sb[i - pad];
  }
  return p;
}

// Storage prefixes: A, B the addends; P scale; Q bias; Y the normalised output; Z the sum output.
std::string AddLayerNormSource(const DataType (&dt)[6]) {
  return absl::StrCat(StoragePrelude(dt[0], "A"), StoragePrelude(dt[1], "B"),
                      StoragePrelude(dt[2], "P"), StoragePrelude(dt[3], "Q"),
                      StoragePrelude(dt[4], "Y"), StoragePrelude(dt[5], "Z"), GroupSum(), R"(
// Offset of element i of dims d (4, the first outermost) with strides s.
inline ulong offs(ulong i, ulong4 d, ulong4 s) {
  ulong off = i % d.s3 * s.s3;
  i /= d.s3;
  off += i % d.s2 * s.s2;
  i /= d.s2;
  off += i % d.s1 * s.s1;
  return off + i / d.s1 * s.s0;
}
// A + B at element e of the output, in fp32 from each operand's storage type.
#define SUM_AT(e)                                                         \
  ((flags & 4) ? A_LD(a, offs((e), d, sa)) + B_LD(b, offs((e), d, sb))  \
               : A_LD(a, (e)) + B_LD(b, (e)))
// One work-group per row of n; scale and bias repeat every pn and qn elements along it. flags:
// 1 bias, 2 sum output, 4 A and B broadcast (dims d, strides sa and sb). The reference's
// LayerNorm row (normalization_internal.h) with a fp32 stash.
__kernel void run(__global const A_T* as, ulong ao, __global const B_T* bs, ulong bo,
                  __global const P_T* ps, ulong po, ulong pn, __global const Q_T* qs, ulong qo,
                  ulong qn, __global Y_T* ys, ulong yo, __global Z_T* zs, ulong zo, ulong n,
                  float eps, int flags, ulong4 d, ulong4 sa, ulong4 sb) {
  __local float s[256];
  __global const A_T* a = as + ao;
  __global const B_T* b = bs + bo;
  const ulong base = get_group_id(0) * n;
  const ulong2 c = chunk(n);
  float acc = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) acc += SUM_AT(base + k);
  const float mean = group_sum(s, acc) / (float)n;
  acc = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) {
    const float dv = SUM_AT(base + k) - mean;
    acc += dv * dv;
  }
  const float inv = 1.0f / sqrt(group_sum(s, acc) / (float)n + eps);
  for (ulong k = c.x; k < c.y; ++k) {
    const float x = SUM_AT(base + k);
    float v = (x - mean) * inv * P_LD(ps + po, k % pn);
    if (flags & 1) v += Q_LD(qs + qo, k % qn);
    Y_ST(v, ys + yo, base + k);
    if (flags & 2) Z_ST(x, zs + zo, base + k);
  }
}
)");
}

class AddLayerNormKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    // The reference's factory checks: float outputs; the axis once the sum's rank is known.
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const ir::Value* v = node.outputs[k];
      if (v != nullptr && v->dtype != DataType::kUndefined && !IsFloating(v->dtype)) {
        return ref::InvalidNode(node, "output ", k, " must be a float type, got ",
                                DataTypeOnnxName(v->dtype));
      }
    }
    const int64_t axis = node.GetInt("axis", -1);
    const ir::Value* a = node.input(0);
    const ir::Value* b = node.input(1);
    if (a != nullptr && b != nullptr && a->shape.rank_known && b->shape.rank_known) {
      const int rank = std::max(a->shape.rank(), b->shape.rank());
      if (rank == 0) return ref::InvalidNode(node, "A + B must have rank >= 1");
      RETURN_IF_ERROR(ref::NormalizeAxis(node, axis, rank).status());
    }
    return std::unique_ptr<Kernel>(
        new AddLayerNormKernel(node, axis, node.GetFloat("epsilon", 1e-5f)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* a, ref::RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, ref::RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, ref::RequireInput(node_, ctx, 2));
    const ir::Tensor* bias = ctx.input(3);
    const std::pair<const ir::Tensor*, const char*> ins[] = {
        {a, "A"}, {b, "B"}, {scale, "scale"}, {bias, "bias"}};
    for (const auto& [t, name] : ins) {
      if (t != nullptr) RETURN_IF_ERROR(ref::CheckFloatParam(node_, *t, name));
    }
    ASSIGN_OR_RETURN(const ref::ew::BroadcastPlan plan,
                     ref::ew::BroadcastPlan::Make(node_, {a, b}));
    const std::vector<int64_t>& dims = plan.out_dims();
    if (dims.empty()) return ref::InvalidNode(node_, "A + B must have rank >= 1");
    ASSIGN_OR_RETURN(const int axis,
                     ref::NormalizeAxis(node_, axis_, static_cast<int>(dims.size())));
    RETURN_IF_ERROR(ref::MapParam(node_, *scale, dims, axis, "scale").status());
    if (bias != nullptr) RETURN_IF_ERROR(ref::MapParam(node_, *bias, dims, axis, "bias").status());
    ASSIGN_OR_RETURN(const cl_ulong speriod, ParamPeriod(node_, scale, dims, axis, "scale"));
    ASSIGN_OR_RETURN(const cl_ulong bperiod, ParamPeriod(node_, bias, dims, axis, "bias"));
    const DataType y_dt = ref::OutputDtype(node_, 0, a->dtype());
    const DataType z_dt = ref::OutputDtype(node_, 1, a->dtype());
    RETURN_IF_ERROR(CheckStored(node_, a->dtype(), "A"));
    RETURN_IF_ERROR(CheckStored(node_, b->dtype(), "B"));
    RETURN_IF_ERROR(CheckStored(node_, y_dt, "output 0"));
    const std::optional<AddPlan> add = PlanAdd(a->dims(), b->dims(), dims);
    if (!add) {
      return Unsupported(node_, absl::StrCat("broadcasts A + B over more than ", kMaxBroadcastDims,
                                             " merged dims"));
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, y_dt, dims));
    ir::Tensor* z = nullptr;
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      RETURN_IF_ERROR(CheckStored(node_, z_dt, "output 1"));
      ASSIGN_OR_RETURN(z, ctx.output(1, z_dt, dims));
    }
    const uint64_t n = ref::Product(dims, axis, dims.size());
    const uint64_t rows = n == 0 ? 0 : plan.num_elements() / n;
    if (rows == 0) return absl::OkStatus();  // nothing to normalise, no sum to store

    const DataType dts[6] = {a->dtype(),     b->dtype(),
                             scale->dtype(), bias ? bias->dtype() : scale->dtype(),
                             y_dt,           z ? z_dt : y_dt};
    std::string key;
    for (DataType t : dts) absl::StrAppend(&key, DataTypeOnnxName(t), "/");
    const std::string what = Label(node_, y_dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    ASSIGN_OR_RETURN(cl_kernel k,
                     programs_.Get(dev, what, key, "run", [&] { return AddLayerNormSource(dts); }));
    ASSIGN_OR_RETURN(TensorArg aa, ArgOf(*a, what));
    ASSIGN_OR_RETURN(TensorArg ba, ArgOf(*b, what));
    ASSIGN_OR_RETURN(TensorArg sa, ArgOf(*scale, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    // Absent operands take a buffer that is never read or written.
    ASSIGN_OR_RETURN(TensorArg qa, bias ? ArgOf(*bias, what) : sa);
    ASSIGN_OR_RETURN(TensorArg za, z ? ArgOf(*z, what) : ya);
    const cl_int flags = (bias ? 1 : 0) | (z ? 2 : 0) | (add->flat ? 0 : 4);
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, aa, ba, sa, speriod, qa, bperiod, ya, za, cl_ulong{n},
                            epsilon_, flags, add->d, add->sa, add->sb));
    return LaunchRows(*dev, k, rows, n, what);
  }

 private:
  AddLayerNormKernel(const ir::Node& node, int64_t axis, float epsilon)
      : NodeKernel(node), axis_(axis), epsilon_(epsilon) {}
  int64_t axis_;
  float epsilon_;
};

// ---- RMSNormalization (stash_type fp32) ----

std::string RmsNormSource(DataType dt, DataType pdt) {
  return absl::StrCat(StoragePrelude(dt), StoragePrelude(pdt, "P"), GroupSum(), R"(
// One work-group per row of n; the scale repeats every pn elements along it. The reference's
// formulas with a fp32 stash: rms = sqrt(sum(x^2) / n + eps), y = x / rms * scale.
__kernel void run(__global const S_T* xs, ulong xo, __global const P_T* ps, ulong po, ulong pn,
                  __global S_T* ys, ulong yo, ulong n, float eps) {
  __local float s[256];
  const ulong r = get_group_id(0);
  __global const S_T* x = xs + xo + r * n;
  __global S_T* y = ys + yo + r * n;
  const ulong2 c = chunk(n);
  float acc = 0.0f;
  for (ulong k = c.x; k < c.y; ++k) {
    const float v = S_LD(x, k);
    acc += v * v;
  }
  const float rms = sqrt(group_sum(s, acc) / (float)n + eps);
  for (ulong k = c.x; k < c.y; ++k) S_ST(S_LD(x, k) / rms * P_LD(ps + po, k % pn), y, k);
}
)");
}

class RmsNormKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(CheckFp32Stash(node));
    return std::unique_ptr<Kernel>(
        new RmsNormKernel(node, node.GetInt("axis", -1), node.GetFloat("epsilon", 1e-5f)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, ref::RequireInput(node_, ctx, 1));
    if (x->rank() == 0) return ref::InvalidNode(node_, "input must have rank >= 1");
    ASSIGN_OR_RETURN(const int axis, ref::NormalizeAxis(node_, axis_, x->rank()));
    RETURN_IF_ERROR(ref::CheckFloatParam(node_, *scale, "scale"));
    RETURN_IF_ERROR(ref::MapParam(node_, *scale, x->dims(), axis, "scale").status());
    ASSIGN_OR_RETURN(const cl_ulong period, ParamPeriod(node_, scale, x->dims(), axis, "scale"));
    const DataType dt = x->dtype();
    RETURN_IF_ERROR(CheckStored(node_, dt, "input"));
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, x->dims()));
    const uint64_t n = ref::Product(x->dims(), axis, x->dims().size());
    const uint64_t rows = ref::Product(x->dims(), 0, axis);
    if (rows == 0 || n == 0) return absl::OkStatus();
    const DataType pdt = scale->dtype();
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    ASSIGN_OR_RETURN(
        cl_kernel k,
        programs_.Get(dev, what, absl::StrCat(DataTypeOnnxName(dt), "/", DataTypeOnnxName(pdt)),
                      "run", [&] { return RmsNormSource(dt, pdt); }));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*x, what));
    ASSIGN_OR_RETURN(TensorArg sa, ArgOf(*scale, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, sa, period, ya, cl_ulong{n}, epsilon_));
    return LaunchRows(*dev, k, rows, n, what);
  }

 private:
  RmsNormKernel(const ir::Node& node, int64_t axis, float epsilon)
      : NodeKernel(node), axis_(axis), epsilon_(epsilon) {}
  int64_t axis_;
  float epsilon_;
};

// ---- What placement may put here ----

// A value the device can hold: absent, of unknown or non-float dtype (the kernel's error, as on
// the CPU), or a stored float type (not f64).
bool Storable(const ir::Value* v) {
  return v == nullptr || !IsFloating(v->dtype) || ClFloatType(v->dtype);
}

// Whether parameter `p` surely repeats along rows of `x` normalised from `axis` (as
// SuffixPeriod), from the graph's shapes: each dim after its leading 1s is X's at the same place
// from the axis on, or a size the reference refuses anyway.
bool RepeatsAlongRows(const ir::Value* p, const ir::Shape& x, int64_t axis) {
  if (p == nullptr) return true;
  if (!p->shape.rank_known || !x.rank_known) return false;
  const int rank = x.rank(), prank = p->shape.rank();
  if (prank > rank) return true;  // the reference's error
  const int64_t ax = axis < 0 ? axis + rank : axis;
  if (ax < 0 || ax >= rank) return true;  // the reference's error
  int lead = 0;
  while (lead < prank && p->shape.dims[lead].value == 1) ++lead;
  for (int i = lead; i < prank; ++i) {
    const ir::Dim& pd = p->shape.dims[i];
    const ir::Dim& xd = x.dims[rank - prank + i];
    if (rank - prank + i < ax || !pd.is_static()) return false;
    if (pd.value == 1 && xd.value != 1) return false;  // broadcasts within the row
  }
  return true;
}

// The shape of A + B from the graph's (a dim known when either side surely gives it).
ir::Shape SumShape(const ir::Shape& a, const ir::Shape& b) {
  if (!a.rank_known || !b.rank_known) return ir::Shape::Unknown();
  const int r = std::max(a.rank(), b.rank());
  ir::Shape s;
  s.rank_known = true;
  for (int i = 0; i < r; ++i) {
    const ir::Dim one = ir::Dim::Static(1);
    const ir::Dim& da = i < r - a.rank() ? one : a.dims[i - (r - a.rank())];
    const ir::Dim& db = i < r - b.rank() ? one : b.dims[i - (r - b.rank())];
    s.dims.push_back(da.value == 1 ? db : db.value == 1 || db.value < 0 ? da : db);
  }
  return s;
}

bool AddLayerNormSupports(const ir::Node& node) {
  for (int i = 0; i < node.num_inputs(); ++i) {
    if (!Storable(node.input(i))) return false;
  }
  for (const ir::Value* v : node.outputs) {
    if (!Storable(v)) return false;
  }
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  if (a == nullptr || b == nullptr) return true;  // the kernel's error
  if (a->shape.is_static() && b->shape.is_static()) {
    const std::vector<int64_t> ad = a->shape.StaticDims(), bd = b->shape.StaticDims();
    const absl::StatusOr<std::vector<int64_t>> s = ref::BroadcastShapes(node, ad, bd);
    if (s.ok() && !PlanAdd(ad, bd, *s)) return false;
  } else if (!a->shape.rank_known || !b->shape.rank_known ||
             std::max(a->shape.rank(), b->shape.rank()) > kMaxBroadcastDims) {
    return false;  // could broadcast over more dims than the kernel takes
  }
  const ir::Shape sum = SumShape(a->shape, b->shape);
  const int64_t axis = node.GetInt("axis", -1);
  return RepeatsAlongRows(node.input(2), sum, axis) && RepeatsAlongRows(node.input(3), sum, axis);
}

// fp32 statistics (a stash type that is no float type is the kernel's error, as on the CPU), a
// stored X of Y's type, and a scale repeating along rows.
bool RmsNormSupports(const ir::Node& node) {
  const int64_t stash = node.GetInt("stash_type", 1);
  if (stash != 1 && IsFloating(DataTypeFromOnnx(static_cast<int32_t>(stash)))) return false;
  const ir::Value* x = node.input(0);
  if (x == nullptr || !ClFloatType(x->dtype)) return false;
  const ir::Value* y = node.num_outputs() > 0 ? node.outputs[0] : nullptr;
  if (y != nullptr && y->dtype != x->dtype && y->dtype != DataType::kUndefined) return false;
  return Storable(node.input(1)) &&
         RepeatsAlongRows(node.input(1), x->shape, node.GetInt("axis", -1));
}

}  // namespace

void RegisterNormFused(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  auto add = [&](OpType op, KernelFactory f, bool (*supports)(const ir::Node&)) {
    KernelDef def{op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, f};
    def.supports = supports;
    r.Add(def);
  };
  add(OpType::kAddLayerNorm, &AddLayerNormKernel::Create, AddLayerNormSupports);
  add(OpType::kRMSNormalization, &RmsNormKernel::Create, RmsNormSupports);
}

}  // namespace kiln::kernels::opencl
