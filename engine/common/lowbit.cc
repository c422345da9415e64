// Low-bit element conversions and ONNX's 4-bit/2-bit packing (rules in lowbit.h).
#include "engine/common/lowbit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/common/half.h"

namespace kiln {
namespace {

// How a small float type spends its bits. All have one sign bit on top.
enum class NanKind {
  kFn,    // e4m3fn: no inf; S.1111.111 is NaN; overflow without saturate gives NaN
  kFnuz,  // no inf, no -0; 0x80 is the only NaN; overflow without saturate gives NaN
  kIeee,  // e5m2: IEEE-like, exponent all ones is inf (mantissa 0) or NaN
  kNone,  // float4e2m1: neither; always saturates
};

struct MiniFloat {
  int bits;  // total width (8 or 4)
  int man;   // mantissa bits
  int bias;
  double max;  // largest finite magnitude
  NanKind nan;
  uint8_t sign_bit() const { return static_cast<uint8_t>(1u << (bits - 1)); }
  uint8_t max_code() const;  // code of +max
};

constexpr MiniFloat kE4M3FN{8, 3, 7, 448.0, NanKind::kFn};
constexpr MiniFloat kE4M3FNUZ{8, 3, 8, 240.0, NanKind::kFnuz};
constexpr MiniFloat kE5M2{8, 2, 15, 57344.0, NanKind::kIeee};
constexpr MiniFloat kE5M2FNUZ{8, 2, 16, 57344.0, NanKind::kFnuz};
constexpr MiniFloat kE2M1{4, 1, 1, 6.0, NanKind::kNone};

uint8_t MiniFloat::max_code() const {
  switch (nan) {
    case NanKind::kFn:
      return 0x7e;  // 0x7f is NaN
    case NanKind::kIeee:
      return 0x7b;  // exponent all ones is inf/NaN
    default:
      return static_cast<uint8_t>(sign_bit() - 1);  // every positive code is finite
  }
}

const MiniFloat* FormatOf(DataType t) {
  switch (t) {
    case DataType::kF8E4M3FN:
      return &kE4M3FN;
    case DataType::kF8E4M3FNUZ:
      return &kE4M3FNUZ;
    case DataType::kF8E5M2:
      return &kE5M2;
    case DataType::kF8E5M2FNUZ:
      return &kE5M2FNUZ;
    case DataType::kF4E2M1:
      return &kE2M1;
    default:
      return nullptr;
  }
}

double Decode(const MiniFloat& f, uint8_t byte) {
  const uint8_t code = f.bits == 8 ? byte : static_cast<uint8_t>(byte & 0x0f);
  const uint8_t sign = code & f.sign_bit();
  const uint8_t mag = code & static_cast<uint8_t>(f.sign_bit() - 1);
  const int exp_field = mag >> f.man;
  const int mant = mag & ((1 << f.man) - 1);
  const int exp_ones = (1 << (f.bits - 1 - f.man)) - 1;
  switch (f.nan) {
    case NanKind::kFn:
      if (mag == 0x7f) return std::numeric_limits<double>::quiet_NaN();
      break;
    case NanKind::kFnuz:
      if (code == 0x80) return std::numeric_limits<double>::quiet_NaN();
      break;
    case NanKind::kIeee:
      if (exp_field == exp_ones) {
        if (mant != 0) return std::numeric_limits<double>::quiet_NaN();
        return sign ? -HUGE_VAL : HUGE_VAL;
      }
      break;
    case NanKind::kNone:
      break;
  }
  const int emin = 1 - f.bias;
  const double v = exp_field == 0 ? std::ldexp(mant, emin - f.man)
                                  : std::ldexp(mant + (1 << f.man), exp_field - f.bias - f.man);
  return sign ? -v : v;
}

uint8_t Encode(const MiniFloat& f, double v, bool saturate) {
  const uint8_t sign = std::signbit(v) ? f.sign_bit() : 0;
  if (std::isnan(v)) {
    switch (f.nan) {
      case NanKind::kFn:
        return sign | 0x7f;
      case NanKind::kFnuz:
        return 0x80;
      case NanKind::kIeee:
        return sign | 0x7e;
      case NanKind::kNone:
        return f.sign_bit();  // no NaN: -0, as the ONNX reference writes
    }
  }
  auto overflow = [&]() -> uint8_t {
    if (saturate || f.nan == NanKind::kNone) return sign | f.max_code();
    switch (f.nan) {
      case NanKind::kFn:
        return sign | 0x7f;
      case NanKind::kIeee:
        return sign | 0x7c;  // inf
      default:
        return 0x80;
    }
  };
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow();
  // Round to a whole number of quanta, the quantum being the spacing of the format at a's
  // binade (the subnormal spacing below the smallest normal): exact scaling by powers of two,
  // then one round-to-nearest-even (nearbyint in the default rounding mode).
  const int emin = 1 - f.bias;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exp = a == 0 ? emin : std::max(e - 1, emin);
  const double r = std::nearbyint(std::ldexp(a, f.man - exp));
  if (std::ldexp(r, exp - f.man) > f.max) return overflow();
  if (r == 0) return f.nan == NanKind::kFnuz ? 0 : sign;
  // r is in [2^man, 2^(man+1)] for a normal binade (2^(man+1) carries into the next exponent)
  // and in [0, 2^man] below; both cases give the code (exp - emin) << man + r.
  const int code = ((exp - emin) << f.man) + static_cast<int>(r);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace

double LowBitToDouble(DataType t, uint8_t byte) {
  switch (t) {
    case DataType::kI4:
    case DataType::kI2:
      return static_cast<int8_t>(LowBitStorageByte(t, byte));
    case DataType::kU4:
    case DataType::kU2:
      return LowBitStorageByte(t, byte);
    case DataType::kF8E8M0:
      return byte == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, byte - 127);
    default: {
      const MiniFloat* f = FormatOf(t);
      return f == nullptr ? 0.0 : Decode(*f, byte);
    }
  }
}

uint8_t EncodeMiniFloat(DataType t, double v, bool saturate) {
  const MiniFloat* f = FormatOf(t);
  return f == nullptr ? 0 : Encode(*f, v, saturate);
}

uint8_t EncodeE8M0(float v, bool saturate, E8M0Rounding rounding) {
  const uint32_t bits = FloatBits(v);
  uint32_t exp = (bits >> 23) & 0xff;
  if (exp == 0xff) return 0xff;  // NaN and inf
  bool up = false;
  switch (rounding) {
    case E8M0Rounding::kUp:
      up = (bits & 0x7fffff) != 0;
      break;
    case E8M0Rounding::kDown:
      break;
    case E8M0Rounding::kNearest: {
      // The first dropped fraction bit decides; on an exact tie (1.5 x 2^e) a normal value
      // rounds up, as the ONNX reference does.
      const bool guard = bits & 0x400000u, round = bits & 0x200000u, sticky = bits & 0x1fffffu;
      up = guard && (round || sticky || exp > 0);
      break;
    }
  }
  if (up && !(saturate && exp == 0xfe)) ++exp;
  return static_cast<uint8_t>(exp);
}

std::pair<int64_t, int64_t> LowBitIntRange(DataType t) {
  switch (t) {
    case DataType::kI4:
      return {-8, 7};
    case DataType::kU4:
      return {0, 15};
    case DataType::kI2:
      return {-2, 1};
    case DataType::kU2:
      return {0, 3};
    default:
      return {0, 0};
  }
}

uint8_t WrapLowBitInt(DataType t, int64_t v) {
  if (!IsLowBitInteger(t)) return 0;
  return LowBitStorageByte(t, static_cast<uint8_t>(static_cast<uint64_t>(v) & 0xff));
}

uint8_t SaturateLowBitInt(DataType t, int64_t v) {
  const auto [lo, hi] = LowBitIntRange(t);
  return static_cast<uint8_t>(std::clamp(v, lo, hi));
}

int PackedBits(DataType t) {
  switch (t) {
    case DataType::kI4:
    case DataType::kU4:
    case DataType::kF4E2M1:
      return 4;
    case DataType::kI2:
    case DataType::kU2:
      return 2;
    default:
      return 0;
  }
}

int64_t OnnxPayloadBytes(DataType t, int64_t n) {
  const int bits = PackedBits(t);
  if (bits == 0) return n * static_cast<int64_t>(DataTypeSize(t));
  const int64_t per_byte = 8 / bits;
  return n / per_byte + (n % per_byte != 0 ? 1 : 0);
}

uint8_t LowBitStorageByte(DataType t, uint8_t code) {
  switch (t) {
    case DataType::kI4:
      return static_cast<uint8_t>(static_cast<int8_t>(static_cast<uint8_t>(code << 4)) >> 4);
    case DataType::kI2:
      return static_cast<uint8_t>(static_cast<int8_t>(static_cast<uint8_t>(code << 6)) >> 6);
    case DataType::kU4:
    case DataType::kF4E2M1:
      return code & 0x0f;
    case DataType::kU2:
      return code & 0x03;
    default:
      return code;
  }
}

void PackLowBit(DataType t, const uint8_t* elements, int64_t n, uint8_t* packed) {
  const int bits = PackedBits(t);
  if (bits == 0) return;
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1;
  std::fill(packed, packed + OnnxPayloadBytes(t, n), uint8_t{0});
  for (int64_t i = 0; i < n; ++i) {
    packed[i / per_byte] |= static_cast<uint8_t>((elements[i] & mask) << ((i % per_byte) * bits));
  }
}

void UnpackLowBit(DataType t, const uint8_t* packed, int64_t n, uint8_t* elements) {
  const int bits = PackedBits(t);
  if (bits == 0) return;
  const int per_byte = 8 / bits;
  for (int64_t i = 0; i < n; ++i) {
    elements[i] =
        LowBitStorageByte(t, static_cast<uint8_t>(packed[i / per_byte] >> ((i % per_byte) * bits)));
  }
}

}  // namespace kiln
