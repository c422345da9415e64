// Cast and CastLike between every fixed-size dtype (float, double, float16, bfloat16, the
// integers, bool, and the low-bit types float8 x5, float4e2m1, int4, uint4, int2, uint2). One
// conversion function covers all pairs of the native types; the low-bit side goes through
// engine/common/lowbit.h.
//
// Conversion rules:
// - floating -> integer truncates toward zero; out-of-range values saturate and NaN gives 0
//   (C++ leaves these undefined; ONNX says nothing outside float8, whose `saturate` attribute is
//   therefore ignored here).
// - anything -> bool is `v != 0` (NaN is true); bool -> anything is 0 or 1.
// - integer -> integer wraps (two's complement truncation, as numpy's astype).
// - every -> fp16/bf16 rounds once to nearest even, also from double and from integers
//   (double rounding through fp32 would be wrong in rare ties; see RoundToOddFloat). Integers
//   beyond 2^53 are first rounded to double.
// - low-bit sources are decoded exactly (integers as int64, floats as double) and then follow
//   the rules above; low-bit targets follow lowbit.h: float8/float4 round to nearest even with
//   the `saturate` attribute (opset 19, default 1), float8e8m0 rounds by `round_mode` (opset 24,
//   default "up"), int4/uint4/int2/uint2 wrap like the other integer targets (a floating value
//   is first truncated toward zero as above).
// - string is not supported: Unimplemented with the type named.
#include <cmath>
#include <limits>

#include "engine/common/lowbit.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

using ew::AllList;
using ew::Comp;
using ew::DispatchList;

/// Rounds `d` to float with round-to-odd: truncate toward zero and set the lowest mantissa bit
/// when inexact. Rounding that float to fp16/bf16 (which keep at most 11 of float's 24 bits) then
/// gives the correctly rounded result of `d`, as a direct double -> fp16 rounding would.
inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(d)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != d) f = BitsToFloat(FloatBits(f) | 1u);
  return f;
}

/// One element of dtype `From` (compute value `v`) as dtype `To` (storage value).
template <typename From, typename To>
inline ew::Stor<To> Convert(Comp<From> v) {
  constexpr bool kHalfTo = std::is_same_v<To, Float16> || std::is_same_v<To, BFloat16>;
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<uint8_t>(v != 0 ? 1 : 0);
  } else if constexpr (std::is_same_v<From, bool>) {
    return ew::StoreV<To>(Comp<To>(v ? 1 : 0));
  } else if constexpr (kHalfTo) {
    if constexpr (std::is_same_v<Comp<From>, float>) {
      return To(v);  // float, fp16, bf16: exact in float, one rounding
    } else {
      return To(RoundToOddFloat(static_cast<double>(v)));  // double, integers
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<Comp<From>>) {
    return ew::SaturatingCast<To>(v);
  } else {
    return static_cast<To>(v);  // int->int wraps (C++20), int/float->float rounds to nearest
  }
}

// Cast's and CastLike's attributes for the low-bit targets.
struct CastOptions {
  bool saturate = true;                       // float8 targets (opset 19)
  E8M0Rounding rounding = E8M0Rounding::kUp;  // float8e8m0 target (opset 24)
};

absl::StatusOr<CastOptions> ReadCastOptions(const ir::Node& node) {
  CastOptions o;
  if (const ir::Attribute* s = node.attr("saturate")) {
    if (s->type != ir::Attribute::Type::kInt || (s->i != 0 && s->i != 1)) {
      return InvalidNode(node, "attribute saturate must be 0 or 1");
    }
    o.saturate = s->i != 0;
  }
  if (node.has_attr("round_mode")) {
    const ir::Attribute* m = node.attr("round_mode");
    const std::string mode = m->type == ir::Attribute::Type::kString ? m->s : std::string("?");
    if (mode == "up") {
      o.rounding = E8M0Rounding::kUp;
    } else if (mode == "down") {
      o.rounding = E8M0Rounding::kDown;
    } else if (mode == "nearest") {
      o.rounding = E8M0Rounding::kNearest;
    } else {
      return InvalidNode(node, "attribute round_mode must be \"up\", \"down\" or \"nearest\"",
                         m->type == ir::Attribute::Type::kString ? ", got \"" + mode + "\"" : "");
    }
  }
  return o;
}

/// One source value (an integer or bool as itself, a floating value as float/double) as an
/// element of low-bit type `to`.
template <typename V>
uint8_t EncodeLowBit(DataType to, V v, const CastOptions& o) {
  if (IsLowBitInteger(to)) {
    if constexpr (std::is_floating_point_v<V>) {
      return WrapLowBitInt(to, ew::SaturatingCast<int64_t>(v));
    } else {
      return WrapLowBitInt(to, static_cast<int64_t>(v));
    }
  }
  if (to == DataType::kF8E8M0) return EncodeE8M0(static_cast<float>(v), o.saturate, o.rounding);
  return EncodeMiniFloat(to, static_cast<double>(v), o.saturate);
}

/// Calls `f(v)` with the value of low-bit element `byte` of type `from`: int64 for the integer
/// types, double for the floating ones (both exact).
template <typename F>
auto WithLowBitValue(DataType from, uint8_t byte, F&& f) {
  const double d = LowBitToDouble(from, byte);
  return IsLowBitInteger(from) ? f(static_cast<int64_t>(d)) : f(d);
}

absl::StatusOr<DataType> CastTarget(const ir::Node& node) {
  const ir::Attribute* to = node.attr("to");
  if (to == nullptr || to->type != ir::Attribute::Type::kInt) {
    return InvalidNode(node, "requires an int attribute 'to'");
  }
  DataType dt = DataTypeFromOnnx(static_cast<int32_t>(to->i));
  if (dt == DataType::kString) {
    return absl::UnimplementedError(node.Label() + " Cast to string is not supported");
  }
  if (dt == DataType::kUndefined || DataTypeSize(dt) == 0) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " Cast to ONNX data type ", to->i, " is not supported"));
  }
  return dt;
}

/// Converts `x` into a new output 0 of dtype `to`.
absl::Status CastTensor(const ir::Node& node, KernelContext& ctx, const ir::Tensor& x, DataType to,
                        const CastOptions& options) {
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, to, x.dims()));
  const int64_t n = x.num_elements();
  if (IsLowBit(x.dtype())) {
    const uint8_t* src = x.data<uint8_t>();
    if (IsLowBit(to)) {
      uint8_t* dst = y->data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = WithLowBitValue(x.dtype(), src[i],
                                 [&](auto v) { return EncodeLowBit(to, v, options); });
      }
      return absl::OkStatus();
    }
    return DispatchList(AllList{}, to, [&](auto to_tag) -> absl::Status {
      using To = typename decltype(to_tag)::type;
      ew::Stor<To>* dst = y->data<ew::Stor<To>>();
      for (int64_t i = 0; i < n; ++i) {
        dst[i] =
            WithLowBitValue(x.dtype(), src[i], [](auto v) { return Convert<decltype(v), To>(v); });
      }
      return absl::OkStatus();
    });
  }
  if (IsLowBit(to)) {
    return DispatchList(AllList{}, x.dtype(), [&](auto from_tag) -> absl::Status {
      using From = typename decltype(from_tag)::type;
      const ew::Stor<From>* src = x.data<ew::Stor<From>>();
      uint8_t* dst = y->data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = EncodeLowBit(to, ew::LoadV<From>(src[i]), options);
      return absl::OkStatus();
    });
  }
  return DispatchList(AllList{}, x.dtype(), [&](auto from_tag) -> absl::Status {
    using From = typename decltype(from_tag)::type;
    return DispatchList(AllList{}, to, [&](auto to_tag) -> absl::Status {
      using To = typename decltype(to_tag)::type;
      const ew::Stor<From>* src = x.data<ew::Stor<From>>();
      ew::Stor<To>* dst = y->data<ew::Stor<To>>();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        dst[i] = Convert<From, To>(ew::LoadV<From>(src[i]));
      }
      return absl::OkStatus();
    });
  });
}

absl::Status StringInputError(const ir::Node& node) {
  return absl::UnimplementedError(node.Label() + " " + ir::OpName(node.op) +
                                  " from string is not supported");
}

/// Cast: target dtype from the `to` attribute, checked when the kernel is built.
class CastKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    if (node.input(0) != nullptr && node.input(0)->dtype == DataType::kString) {
      return StringInputError(node);
    }
    ASSIGN_OR_RETURN(DataType to, CastTarget(node));
    ASSIGN_OR_RETURN(CastOptions options, ReadCastOptions(node));
    return std::unique_ptr<Kernel>(new CastKernel(node, to, options));
  }
  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    return CastTensor(node_, ctx, *x, to_, options_);
  }

 private:
  CastKernel(const ir::Node& node, DataType to, CastOptions options)
      : node_(node), to_(to), options_(options) {}
  const ir::Node& node_;
  DataType to_;
  CastOptions options_;
};

/// CastLike: target dtype is input 1's (only its dtype is read).
absl::Status RunCastLike(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* like, RequireInput(node, ctx, 1));
  if (x->dtype() == DataType::kString) return StringInputError(node);
  if (like->dtype() == DataType::kString) {
    return absl::UnimplementedError(node.Label() + " CastLike to string is not supported");
  }
  ASSIGN_OR_RETURN(CastOptions options, ReadCastOptions(node));
  return CastTensor(node, ctx, *x, like->dtype(), options);
}

absl::Status CheckCastLike(const ir::Node& node) { return ReadCastOptions(node).status(); }

}  // namespace

void RegisterCast(Registry& r) {
  // String is registered so that the factory can say precisely what is unsupported.
  std::vector<DataType> types = ew::DataTypesOf(AllList{});
  types.push_back(DataType::kString);
  for (DataType t : LowBitTypes()) types.push_back(t);
  r.AddRef(ir::OpType::kCast, types, &CastKernel::Create);
  r.AddRef(ir::OpType::kCastLike, types, CheckedFactory<CheckCastLike, RunCastLike>);
}

}  // namespace kiln::kernels::cpu::ref
