// Bitwise ops on integers: BitwiseAnd/Or/Xor (numpy broadcasting), BitwiseNot and BitShift. Each
// is a functor run by the elementwise family's loops and kernels (elementwise_loops.h).
#include <climits>
#include <type_traits>

#include "engine/kernels/cpu/ref/elementwise_loops.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

using ew::IntList;
using ew::TypeList;

// Operands narrower than int promote to int; the result is cast back to C, which keeps exactly
// the low bits, so these are the bitwise ops of C itself.
struct AndOp {
  using Types = IntList;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a & b);
  }
};
struct OrOp {
  using Types = IntList;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a | b);
  }
};
struct XorOp {
  using Types = IntList;
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a ^ b);
  }
};
struct NotOp {
  using Types = IntList;
  template <typename C>
  C operator()(C a) const {
    return static_cast<C>(~a);
  }
};

/// BitShift on unsigned integers. A shift by the bit width or more is undefined in C++; it gives
/// 0 here, the value every bit having been shifted out (numpy, hence the ONNX reference, agrees).
struct BitShiftOp {
  using Types = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;
  bool left = true;
  static absl::StatusOr<BitShiftOp> Make(const ir::Node& node) {
    const std::string dir = node.GetString("direction", "");
    BitShiftOp op;
    if (dir == "LEFT") {
      op.left = true;
    } else if (dir == "RIGHT") {
      op.left = false;
    } else {
      return InvalidNode(node, "attribute direction must be LEFT or RIGHT, got '", dir, "'");
    }
    return op;
  }
  template <typename C>
  C operator()(C a, C b) const {
    static_assert(std::is_unsigned_v<C>);
    if (b >= sizeof(C) * CHAR_BIT) return 0;
    // Shift in a type at least as wide as unsigned so that uint8/uint16 promote unsigned.
    using W = ew::UWide<C>;
    return static_cast<C>(left ? static_cast<W>(a) << b : static_cast<W>(a) >> b);
  }
};

}  // namespace

void RegisterBitwise(Registry& r) {
  using ir::OpType;
  ew::AddBinary<AndOp>(r, OpType::kBitwiseAnd);
  ew::AddBinary<OrOp>(r, OpType::kBitwiseOr);
  ew::AddBinary<XorOp>(r, OpType::kBitwiseXor);
  ew::AddUnary<NotOp>(r, OpType::kBitwiseNot);
  ew::AddBinary<BitShiftOp>(r, OpType::kBitShift);
}

}  // namespace kiln::kernels::cpu::ref
