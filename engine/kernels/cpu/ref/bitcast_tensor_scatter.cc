// Reference kernels of two pure data-movement ops: BitCast (opset 26) and TensorScatter (opset
// 24). Neither computes on values, so one byte-level loop serves every fixed-size dtype.
//
// BitCast reinterprets each element's bits as dtype `to` of the same width (shape unchanged;
// little-endian, which is this CPU's order). One exception keeps Kiln's bool invariant: a bool
// tensor holds only bytes 0 and 1 (Cast and the comparisons write them; kernels read them as C++
// bool, for which any other byte is undefined behaviour), so a BitCast *to* bool maps each
// nonzero byte to 1 (the value numpy's view of that byte reads as True).
//
// TensorScatter writes `update` into a copy of `past_cache` along the sequence axis, at
// write_indices[batch] (0 when omitted) for every prefix (batch, D1, ...) of that batch; in
// "circular" mode the position wraps modulo the axis size, in "linear" mode it must fit.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/lowbit.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---- BitCast ----

// The target dtype of `node` given input dtype `from`: a type Kiln has, of the same width.
absl::StatusOr<DataType> BitCastTarget(const ir::Node& node, DataType from) {
  const ir::Attribute* to = node.attr("to");
  if (to == nullptr || to->type != ir::Attribute::Type::kInt) {
    return InvalidNode(node, "requires an int attribute 'to'");
  }
  const DataType dt = to->i < INT32_MIN || to->i > INT32_MAX
                          ? DataType::kUndefined
                          : DataTypeFromOnnx(static_cast<int32_t>(to->i));
  if (dt == DataType::kUndefined || DataTypeSize(dt) == 0) {
    return absl::UnimplementedError(absl::StrCat(
        node.Label(), " unsupported dtype ",
        to->i < INT32_MIN || to->i > INT32_MAX ? absl::StrCat("number ", to->i)
                                               : OnnxDataTypeName(static_cast<int32_t>(to->i)),
        ": attribute 'to' = ", to->i));
  }
  // ONNX widths (int4 is 4 bits although Kiln stores it in a byte).
  if (from != DataType::kUndefined && DataTypeBits(from) != DataTypeBits(dt)) {
    return InvalidNode(node, "cannot reinterpret ", DataTypeOnnxName(from), " (",
                       DataTypeBits(from), " bits) as ", DataTypeOnnxName(dt), " (",
                       DataTypeBits(dt), " bits): BitCast requires the same bit width");
  }
  return dt;
}

class BitCastKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const DataType from = node.input(0) ? node.input(0)->dtype : DataType::kUndefined;
    ASSIGN_OR_RETURN(DataType to, BitCastTarget(node, from));
    return std::unique_ptr<Kernel>(new BitCastKernel(node, to));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    // The input dtype is checked again here: the factory saw the graph's, the run sees the data.
    RETURN_IF_ERROR(BitCastTarget(node_, x->dtype()).status());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, to_, x->dims()));
    if (to_ == DataType::kBool) {
      const uint8_t* src = x->data<uint8_t>();
      uint8_t* dst = y->data<uint8_t>();
      for (int64_t i = 0; i < x->num_elements(); ++i) dst[i] = src[i] != 0 ? 1 : 0;
    } else if (PackedBits(to_) != 0) {
      // 4-bit and 2-bit elements: the element's own bits, re-extended as `to` stores them
      // (int4 -1 is byte 0xff, the same bits as uint4 15, byte 0x0f).
      const uint8_t* src = x->data<uint8_t>();
      uint8_t* dst = y->data<uint8_t>();
      for (int64_t i = 0; i < x->num_elements(); ++i) dst[i] = LowBitStorageByte(to_, src[i]);
    } else if (x->byte_size() > 0 && y->raw_data() != x->raw_data()) {
      ParallelCopy(y->raw_data(), x->raw_data(), x->byte_size());
    }
    return absl::OkStatus();
  }

 private:
  BitCastKernel(const ir::Node& node, DataType to) : node_(node), to_(to) {}
  const ir::Node& node_;
  DataType to_;
};

// ---- TensorScatter ----

class TensorScatterKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const std::string mode = node.GetString("mode", "linear");
    if (mode != "linear" && mode != "circular") {
      return InvalidNode(node, "mode must be 'linear' or 'circular', got '", mode, "'");
    }
    return std::unique_ptr<Kernel>(new TensorScatterKernel(node, mode == "circular"));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* past, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* update, RequireInput(node_, ctx, 1));
    const ir::Tensor* write_indices = ctx.input(2);
    if (update->dtype() != past->dtype()) {
      return InvalidNode(node_, "update is ", DataTypeOnnxName(update->dtype()),
                         " but past_cache is ", DataTypeOnnxName(past->dtype()));
    }
    const int rank = past->rank();
    const int64_t axis_attr = node_.GetInt("axis", -2);
    if (axis_attr < -rank || axis_attr >= rank) {
      return InvalidNode(node_, "axis ", axis_attr, " is out of range for past_cache rank ", rank);
    }
    const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
    if (axis == 0) return InvalidNode(node_, "axis must not be the batch axis 0");
    bool fits = update->rank() == rank;
    for (int i = 0; fits && i < rank; ++i) {
      fits = i == axis ? update->dim(i) <= past->dim(i) : update->dim(i) == past->dim(i);
    }
    if (!fits) {
      return InvalidNode(node_, "update ", ir::DimsToString(update->dims()),
                         " does not fit past_cache ", ir::DimsToString(past->dims()),
                         " (equal dims but along axis ", axis, ", where it may be shorter)");
    }
    const int64_t batch = past->dim(0);
    std::vector<int64_t> starts(batch, 0);
    if (write_indices != nullptr) {
      if (write_indices->rank() != 1 || write_indices->dim(0) != batch) {
        return InvalidNode(node_, "write_indices ", ir::DimsToString(write_indices->dims()),
                           " must be 1-D of the batch size ", batch);
      }
      ASSIGN_OR_RETURN(starts, ReadInts(node_, *write_indices, "write_indices"));
    }
    const int64_t max_seq = past->dim(axis), seq = update->dim(axis);
    for (int64_t b = 0; b < batch; ++b) {
      // Linear writes must lie inside the axis; circular ones wrap (floored modulo, as the
      // reference's Python %, so a negative index counts from the end).
      if (!circular_ && (starts[b] < 0 || starts[b] > max_seq - seq)) {
        return InvalidNode(node_, "write_indices[", b, "] = ", starts[b], " with ", seq,
                           " update positions does not fit the sequence axis of size ", max_seq,
                           " (mode 'linear')");
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * present, ctx.output(0, past->dtype(), past->dims()));
    if (past->byte_size() > 0 && present->raw_data() != past->raw_data()) {
      ParallelCopy(present->raw_data(), past->raw_data(), past->byte_size());
    }
    if (seq == 0 || max_seq == 0) return absl::OkStatus();
    // [outer, axis, inner] views; `per_batch` prefixes (D1 .. D_axis-1) share one batch's index.
    const int64_t esize = static_cast<int64_t>(DataTypeSize(past->dtype()));
    const int64_t outer = Product(past->dims(), 0, axis);
    const int64_t per_batch = Product(past->dims(), 1, axis);
    const int64_t row = Product(past->dims(), axis + 1, rank) * esize;  // bytes per position
    const char* src = static_cast<const char*>(update->raw_data());
    char* dst = static_cast<char*>(present->raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t start = starts[o / per_batch];
      // Circular: start reduced first, so start + s cannot overflow (linear starts are bounded).
      const int64_t first = circular_ ? ((start % max_seq) + max_seq) % max_seq : start;
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t at = circular_ ? (first + s) % max_seq : first + s;
        std::memcpy(dst + (o * max_seq + at) * row, src + (o * seq + s) * row, row);
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorScatterKernel(const ir::Node& node, bool circular) : node_(node), circular_(circular) {}
  const ir::Node& node_;
  bool circular_;
};

}  // namespace

void RegisterBitCastTensorScatter(Registry& r) {
  r.AddRef(ir::OpType::kBitCast, MovementTypes(), &BitCastKernel::Create);
  r.AddRef(ir::OpType::kTensorScatter, AllTypes(), &TensorScatterKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
