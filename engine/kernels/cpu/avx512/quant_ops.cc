// QuantizeLinear (float, float16, bfloat16 -> uint8, int8, uint16, int16), DequantizeLinear
// (uint8, int8, uint16, int16, int32 -> float, float16, bfloat16) and DynamicQuantizeLinear
// (float -> uint8) on AVX-512: per-tensor and per-axis scales and zero points. The QDQ
// activations of int8 models (Smart Turn: a QuantizeLinear / DequantizeLinear pair after nearly
// every op). The reference's numbers to the bit (quant.h); what these kernels do not take goes
// to the reference kernel at run time: blocked quantization, the low-bit and float8 types,
// QuantizeLinear's output_dtype and precision attributes, int32 or float8e8m0 scales, and any
// shape the reference reports as an error. DequantizeLinear's output_dtype (opset 23; the fp16 /
// bf16 output precision lowering gives a dequantization read at that dtype) is taken: the
// product in fp32 rounded once to it. QuantizeLinear reads fp16 / bf16 x with an fp32 scale.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/quant.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/dynamic_quantize.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

bool IsFloatType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}
bool IsQuantStorage(DataType t) {
  return t == DataType::kU8 || t == DataType::kI8 || t == DataType::kU16 || t == DataType::kI16;
}

// x viewed as [outer, axis_dim, inner]; the scale index of element (o, a, i) is a (per-axis),
// or 0 for every element (per-tensor: outer = axis_dim = 1).
struct QuantPlan {
  int64_t outer = 1, axis_dim = 1, inner = 0;
};

// The reference's per-tensor and per-axis layouts (indexing_quant.cc MakeLayout); nullopt for
// blocked quantization and for every shape the reference rejects.
std::optional<QuantPlan> PlanQuant(const ir::Node& node, const ir::Tensor& x,
                                   const ir::Tensor& scale, const ir::Tensor* zp) {
  if (zp != nullptr) {
    const bool both_single = zp->num_elements() == 1 && scale.num_elements() == 1 &&
                             zp->rank() <= 1 && scale.rank() <= 1;
    if (zp->dims() != scale.dims() && !both_single) return std::nullopt;
  }
  QuantPlan p;
  if (scale.num_elements() == 1) {
    p.inner = x.num_elements();
    return p;
  }
  if (node.GetInt("block_size", 0) != 0) return std::nullopt;
  const int64_t r = x.rank();
  int64_t axis = node.GetInt("axis", 1);
  if (axis < -r || axis >= r) return std::nullopt;
  if (axis < 0) axis += r;
  if (scale.rank() != 1 || scale.dim(0) != x.dim(axis)) return std::nullopt;
  p.outer = 1;
  for (int64_t d = 0; d < axis; ++d) p.outer *= x.dim(d);
  p.axis_dim = x.dim(axis);
  p.inner = 1;
  for (int64_t d = axis + 1; d < r; ++d) p.inner *= x.dim(d);
  return p;
}

// Scale as fp32 and zero point as int32, as the reference reads them (ElementAsDouble, then
// float / int64; every zero point here fits int32).
void ReadParams(const ir::Tensor& scale, const ir::Tensor* zp, std::vector<float>& s,
                std::vector<int32_t>& z) {
  const int64_t n = scale.num_elements();
  s.resize(n);
  z.assign(n, 0);
  if (scale.dtype() == DataType::kF32) {
    std::copy(scale.data<float>(), scale.data<float>() + n, s.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(ir::ElementAsDouble(scale, i));
  }
  if (zp != nullptr) {
    for (int64_t i = 0; i < n && i < zp->num_elements(); ++i) {
      z[i] = static_cast<int32_t>(ir::ElementAsDouble(*zp, i));
    }
  }
}

using ElementFn = void (*)(DataType, const void*, int64_t, const float*, const int32_t*, bool,
                           DataType, void*);

// Elements of a per-axis layout above which its runs are shared among the OpenMP threads, in
// blocks of about kRunBlock elements (each run's own loop then stays on its thread).
constexpr int64_t kRunBlock = 16384;
constexpr int64_t kParallelRuns = 4 * kRunBlock;

// Runs `fn` over the layout: the whole tensor, one call per (outer, axis) run of `inner`
// elements, or per outer row with a scale per element when inner is 1.
void RunPlan(ElementFn fn, const QuantPlan& p, DataType xt, const void* x, const float* s,
             const int32_t* z, DataType yt, void* y) {
  const size_t xs = DataTypeSize(xt), ys = DataTypeSize(yt);
  const auto* xb = static_cast<const uint8_t*>(x);
  auto* yb = static_cast<uint8_t*>(y);
  if (p.outer == 1 && p.axis_dim == 1) {
    fn(xt, x, p.inner, s, z, false, yt, y);
    return;
  }
  // Run r: row r of [outer, axis_dim] when inner is 1, else the inner elements of (o, a).
  const bool rows = p.inner == 1;
  const int64_t runs = rows ? p.outer : p.outer * p.axis_dim;
  const int64_t len = rows ? p.axis_dim : p.inner;
  const int64_t per_block = std::max<int64_t>(1, kRunBlock / std::max<int64_t>(len, 1));
  const int64_t blocks = (runs + per_block - 1) / per_block;
  ParallelFor(blocks, runs * len >= kParallelRuns && blocks > 1,
              [&](int64_t b_begin, int64_t b_end) {
                for (int64_t b = b_begin; b < b_end; ++b) {
                  for (int64_t r = b * per_block; r < std::min(runs, (b + 1) * per_block); ++r) {
                    const int64_t e = r * len;
                    if (rows) {
                      fn(xt, xb + e * xs, len, s, z, true, yt, yb + e * ys);
                    } else {
                      const int64_t a = r % p.axis_dim;
                      fn(xt, xb + e * xs, len, s + a, z + a, false, yt, yb + e * ys);
                    }
                  }
                }
              });
}

bool AttrUnset(const ir::Node& node, const char* name) {
  return !node.has_attr(name) || node.GetInt(name, 0) == 0;
}

class QuantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new QuantizeKernel(node, std::move(reference)));
  }

  // No output_dtype or precision attribute (opsets 21 and 23), and a zero point, when given,
  // of a type these loops write.
  static bool Supports(const ir::Node& node) {
    if (!AttrUnset(node, "output_dtype") || !AttrUnset(node, "precision")) return false;
    const ir::Value* zp = node.input(2);
    return zp == nullptr || IsQuantStorage(zp->dtype);
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* scale = ctx.input(1);
    const ir::Tensor* zp = ctx.input(2);
    const DataType qt = zp ? zp->dtype() : DataType::kU8;
    if (x == nullptr || scale == nullptr || !IsFloatType(x->dtype()) ||
        !IsFloatType(scale->dtype()) || !IsQuantStorage(qt)) {
      return reference_->Run(ctx);
    }
    const std::optional<QuantPlan> p = PlanQuant(node_, *x, *scale, zp);
    if (!p) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, qt, x->dims()));
    ReadParams(*scale, zp, s_, z_);
    RunPlan(&QuantizeLinearRun, *p, x->dtype(), x->raw_data(), s_.data(), z_.data(), qt,
            y->raw_data());
    return absl::OkStatus();
  }

 private:
  QuantizeKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  std::vector<float> s_;
  std::vector<int32_t> z_;
};

class DequantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new DequantizeKernel(node, std::move(reference)));
  }

  // Y of the output_dtype attribute (opset 23; precision lowering sets it to round an fp32
  // dequantization once to fp16 / bf16), else of the scale's type, which must be a float.
  static bool Supports(const ir::Node& node) {
    const ir::Value* scale = node.input(1);
    const DataType y = OutputType(node, DataType::kF32);
    return (IsFloatType(y) || y == DataType::kUndefined) && scale != nullptr &&
           (IsFloatType(scale->dtype) || scale->dtype == DataType::kUndefined);
  }

  // output_dtype when set, else `scale` (kUndefined for an output_dtype that is no type).
  static DataType OutputType(const ir::Node& node, DataType scale) {
    if (AttrUnset(node, "output_dtype")) return scale;
    const int64_t v = node.GetInt("output_dtype", 0);
    return v < 0 || v > INT32_MAX ? DataType::kUndefined
                                  : DataTypeFromOnnx(static_cast<int32_t>(v));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* scale = ctx.input(1);
    const ir::Tensor* zp = ctx.input(2);
    if (x == nullptr || scale == nullptr || !IsFloatType(scale->dtype()) ||
        (!IsQuantStorage(x->dtype()) && x->dtype() != DataType::kI32) ||
        (zp != nullptr && zp->dtype() != x->dtype())) {
      return reference_->Run(ctx);
    }
    const DataType yt = OutputType(node_, scale->dtype());
    const std::optional<QuantPlan> p = PlanQuant(node_, *x, *scale, zp);
    // output_dtype before opset 23 is the reference's error to report.
    if (!p || !IsFloatType(yt) || (yt != scale->dtype() && node_.since_version < 23)) {
      return reference_->Run(ctx);
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, yt, x->dims()));
    ReadParams(*scale, zp, s_, z_);
    RunPlan(&DequantizeLinearRun, *p, x->dtype(), x->raw_data(), s_.data(), z_.data(), yt,
            y->raw_data());
    return absl::OkStatus();
  }

 private:
  DequantizeKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  std::vector<float> s_;
  std::vector<int32_t> z_;
};

// DynamicQuantizeLinear: the range scan and the quantization vectorised; scale and zero point
// with the reference's scalar helpers (ref/dynamic_quantize.h), so every output is its bits.
class DynamicQuantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new DynamicQuantizeKernel(std::move(reference)));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr || x->dtype() != DataType::kF32) return reference_->Run(ctx);
    const int64_t n = x->num_elements();
    float lo = 0.0f, hi = 0.0f;
    MinMaxWithZero(x->data<float>(), n, &lo, &hi);
    const ref::DynamicQuantParams p = ref::DynamicQuantizeParams(lo, hi);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kU8, x->dims()));
    DynamicQuantizeU8(x->data<float>(), n, p.scale, p.zero_point, y->data<uint8_t>());
    return ref::WriteDynamicQuantizeParams(ctx, p);
  }

 private:
  explicit DynamicQuantizeKernel(std::unique_ptr<Kernel> reference)
      : reference_(std::move(reference)) {}

  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterQuantOps(Registry& r) {
  KernelDef q{ir::OpType::kQuantizeLinear,
              {DataType::kF32, DataType::kF16, DataType::kBF16},
              0,
              Backend::kCpu,
              Isa::kAvx512,
              &QuantizeKernel::Create};
  q.supports = &QuantizeKernel::Supports;
  r.Add(q);
  KernelDef dq{ir::OpType::kDequantizeLinear,
               {DataType::kU8, DataType::kI8, DataType::kU16, DataType::kI16, DataType::kI32},
               0,
               Backend::kCpu,
               Isa::kAvx512,
               &DequantizeKernel::Create};
  dq.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  dq.supports = &DequantizeKernel::Supports;
  r.Add(dq);
  r.Add(KernelDef{ir::OpType::kDynamicQuantizeLinear,
                  {DataType::kF32},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &DynamicQuantizeKernel::Create});
}

}  // namespace kiln::kernels::cpu::avx512
