#include "engine/ir/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/half.h"
#include "engine/common/lowbit.h"
#include "engine/common/status.h"

namespace kiln::ir {

int64_t NumElementsOf(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

std::string DimsToString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype, std::vector<int64_t> dims) {
  absl::StatusOr<Tensor> t = AllocateUninitialized(dtype, std::move(dims));
  // The whole 64-byte-rounded buffer, padding included, as before the split.
  if (t.ok()) std::memset(t->data_, 0, std::max<size_t>(64, (t->byte_size() + 63) / 64 * 64));
  return t;
}

absl::StatusOr<Tensor> Tensor::AllocateUninitialized(DataType dtype, std::vector<int64_t> dims) {
  size_t esize = DataTypeSize(dtype);
  if (esize == 0) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported dtype ", DataTypeOnnxName(dtype), " for a tensor"));
  }
  int64_t n = NumElementsOf(dims);
  if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / esize) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor dims ", DimsToString(dims), " are negative or too large"));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.num_elements_ = n;
  size_t bytes = (static_cast<size_t>(n) * esize + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::Borrow(DataType dtype, std::vector<int64_t> dims, void* data,
                      std::shared_ptr<void> keepalive) {
  Tensor t;
  t.dtype_ = dtype;
  t.num_elements_ = NumElementsOf(dims);
  t.dims_ = std::move(dims);
  t.data_ = data;
  t.storage_ = std::move(keepalive);
  return t;
}

Tensor Tensor::OnDevice(DataType dtype, std::vector<int64_t> dims,
                        std::shared_ptr<DeviceStorage> storage, uint64_t offset) {
  Tensor t;
  t.dtype_ = dtype;
  t.num_elements_ = NumElementsOf(dims);
  t.dims_ = std::move(dims);
  t.device_ = std::move(storage);
  t.device_offset_ = offset;
  return t;
}

Tensor Tensor::Sequence(DataType elem_dtype, std::vector<Tensor> elements) {
  Tensor t;
  t.dtype_ = elem_dtype;
  t.kind_ = TensorKind::kSequence;
  t.elements_ = std::make_shared<const std::vector<Tensor>>(std::move(elements));
  return t;
}

Tensor Tensor::None(DataType elem_dtype) {
  Tensor t;
  t.dtype_ = elem_dtype;
  t.kind_ = TensorKind::kNone;
  return t;
}

const std::vector<Tensor>& Tensor::elements() const {
  static const std::vector<Tensor>* const kEmpty = new std::vector<Tensor>();
  return elements_ ? *elements_ : *kEmpty;
}

Tensor Tensor::Clone() const {
  if (kind_ == TensorKind::kNone) return *this;
  if (kind_ == TensorKind::kSequence) {
    std::vector<Tensor> copies;
    copies.reserve(elements().size());
    for (const Tensor& e : elements()) copies.push_back(e.Clone());
    return Sequence(dtype_, std::move(copies));
  }
  if (!defined()) return Tensor();
  if (on_device()) return *this;
  Tensor t = *Allocate(dtype_, dims_);
  if (byte_size() > 0) std::memcpy(t.data_, data_, byte_size());
  return t;
}

Tensor Tensor::Reshaped(std::vector<int64_t> dims) const {
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

namespace {

// out[a][c][b] = in[a][b][c] for `a` outer blocks of a [b, c] matrix of `Elem`s.
template <typename Elem>
void SwapInner(const Elem* in, Elem* out, int64_t a, int64_t b, int64_t c) {
  for (int64_t i = 0; i < a; ++i) {
    const Elem* src = in + i * b * c;
    Elem* dst = out + i * b * c;
    for (int64_t y = 0; y < b; ++y) {
      for (int64_t x = 0; x < c; ++x) dst[x * b + y] = src[y * c + x];
    }
  }
}

}  // namespace

absl::StatusOr<Tensor> ChannelsLastCopy(const Tensor& t, bool to_channels_last) {
  if (t.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("a layout change needs a rank-4 tensor, got ", DimsToString(t.dims())));
  }
  const std::vector<int64_t>& d = t.dims();
  // NCHW -> NHWC swaps C with H*W inside each batch item; NHWC -> NCHW swaps H*W with C.
  const int64_t b = to_channels_last ? d[1] : d[1] * d[2];
  const int64_t c = to_channels_last ? d[2] * d[3] : d[3];
  std::vector<int64_t> dims = to_channels_last ? std::vector<int64_t>{d[0], d[2], d[3], d[1]}
                                               : std::vector<int64_t>{d[0], d[3], d[1], d[2]};
  ASSIGN_OR_RETURN(Tensor out, Tensor::AllocateUninitialized(t.dtype(), std::move(dims)));
  switch (DataTypeSize(t.dtype())) {
    case 1:
      SwapInner(t.data<uint8_t>(), out.data<uint8_t>(), d[0], b, c);
      break;
    case 2:
      SwapInner(t.data<uint16_t>(), out.data<uint16_t>(), d[0], b, c);
      break;
    case 4:
      SwapInner(t.data<uint32_t>(), out.data<uint32_t>(), d[0], b, c);
      break;
    case 8:
      SwapInner(t.data<uint64_t>(), out.data<uint64_t>(), d[0], b, c);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a layout change of ", DataTypeName(t.dtype()), " is not supported"));
  }
  return out;
}

double ElementAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kF32:
      return t.data<float>()[i];
    case DataType::kF64:
      return t.data<double>()[i];
    case DataType::kF16:
      return HalfBitsToFloat(t.data<uint16_t>()[i]);
    case DataType::kBF16:
      return BFloat16BitsToFloat(t.data<uint16_t>()[i]);
    case DataType::kU8:
      return t.data<uint8_t>()[i];
    case DataType::kI8:
      return t.data<int8_t>()[i];
    case DataType::kU16:
      return t.data<uint16_t>()[i];
    case DataType::kI16:
      return t.data<int16_t>()[i];
    case DataType::kI32:
      return t.data<int32_t>()[i];
    case DataType::kI64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kU32:
      return t.data<uint32_t>()[i];
    case DataType::kU64:
      return static_cast<double>(t.data<uint64_t>()[i]);
    case DataType::kBool:
      return t.data<uint8_t>()[i] ? 1.0 : 0.0;
    default:
      // float8, float4e2m1, int4, uint4, int2, uint2: one element per byte, decoded exactly.
      return IsLowBit(t.dtype()) ? LowBitToDouble(t.dtype(), t.data<uint8_t>()[i]) : 0.0;
  }
}

int64_t ElementAsInt64(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kI64:
      return t.data<int64_t>()[i];
    case DataType::kI32:
      return t.data<int32_t>()[i];
    case DataType::kU64:
      return static_cast<int64_t>(t.data<uint64_t>()[i]);
    case DataType::kU32:
      return t.data<uint32_t>()[i];
    case DataType::kI16:
      return t.data<int16_t>()[i];
    case DataType::kU16:
      return t.data<uint16_t>()[i];
    case DataType::kI8:
      return t.data<int8_t>()[i];
    case DataType::kU8:
    case DataType::kBool:
      return t.data<uint8_t>()[i];
    default:
      return static_cast<int64_t>(ElementAsDouble(t, i));
  }
}

}  // namespace kiln::ir
