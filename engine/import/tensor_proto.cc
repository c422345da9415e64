#include "engine/import/tensor_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/common/half.h"
#include "engine/common/lowbit.h"
#include "engine/common/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

absl::Status Bad(const std::string& context, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(context, ": ", what));
}

// memcpy that accepts an empty source (an empty repeated field has a null data pointer).
void CopyBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// Number of values a TensorProto of `n` elements of `dt` holds in its typed fields: one per
// element, except the packed types, whose int32_data holds one packed byte per value (two 4-bit
// or four 2-bit elements each).
int64_t TypedValueCount(DataType dt, int64_t n) {
  return PackedBits(dt) != 0 ? OnnxPayloadBytes(dt, n) : n;
}

// "need N" of a size error, saying how the packed types count.
std::string Need(DataType dt, int64_t count, const char* unit) {
  const int bits = PackedBits(dt);
  if (bits == 0) return absl::StrCat(count, unit);
  return absl::StrCat(count, unit, " (", DataTypeOnnxName(dt), " packs ", 8 / bits,
                      " elements per byte)");
}

// Copies typed repeated fields into the tensor buffer. ONNX stores int8/16, uint8/16, bool, fp16,
// bf16 and the float8 types in int32_data (fp16/bf16/float8 as their bit patterns), int4, uint4,
// float4e2m1, int2 and uint2 there as packed bytes, uint32/uint64 in uint64_data.
absl::Status CopyTypedData(const onnx::TensorProto& p, ir::Tensor& t, const std::string& ctx) {
  int64_t n = t.num_elements();
  auto check = [&](int64_t have) -> absl::Status {
    const int64_t want = TypedValueCount(t.dtype(), n);
    if (have != want) {
      return Bad(ctx, absl::StrCat("holds ", have, " values but dims ", ir::DimsToString(t.dims()),
                                   " need ", Need(t.dtype(), want, "")));
    }
    return absl::OkStatus();
  };
  switch (t.dtype()) {
    case DataType::kF32:
      RETURN_IF_ERROR(check(p.float_data_size()));
      CopyBytes(t.raw_data(), p.float_data().data(), n * 4);
      return absl::OkStatus();
    case DataType::kF64:
      RETURN_IF_ERROR(check(p.double_data_size()));
      CopyBytes(t.raw_data(), p.double_data().data(), n * 8);
      return absl::OkStatus();
    case DataType::kI64:
      RETURN_IF_ERROR(check(p.int64_data_size()));
      CopyBytes(t.raw_data(), p.int64_data().data(), n * 8);
      return absl::OkStatus();
    case DataType::kU64:
      RETURN_IF_ERROR(check(p.uint64_data_size()));
      CopyBytes(t.raw_data(), p.uint64_data().data(), n * 8);
      return absl::OkStatus();
    case DataType::kU32:
      RETURN_IF_ERROR(check(p.uint64_data_size()));
      for (int64_t i = 0; i < n; ++i)
        t.data<uint32_t>()[i] = static_cast<uint32_t>(p.uint64_data(i));
      return absl::OkStatus();
    case DataType::kI32:
      RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyBytes(t.raw_data(), p.int32_data().data(), n * 4);
      return absl::OkStatus();
    case DataType::kI16:
    case DataType::kU16:
    case DataType::kF16:
    case DataType::kBF16:
      RETURN_IF_ERROR(check(p.int32_data_size()));
      for (int64_t i = 0; i < n; ++i)
        t.data<uint16_t>()[i] = static_cast<uint16_t>(p.int32_data(i));
      return absl::OkStatus();
    case DataType::kI8:
    case DataType::kU8:
    case DataType::kBool:
    case DataType::kF8E4M3FN:
    case DataType::kF8E4M3FNUZ:
    case DataType::kF8E5M2:
    case DataType::kF8E5M2FNUZ:
    case DataType::kF8E8M0:
      RETURN_IF_ERROR(check(p.int32_data_size()));
      for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(p.int32_data(i));
      return absl::OkStatus();
    case DataType::kI4:
    case DataType::kU4:
    case DataType::kF4E2M1:
    case DataType::kI2:
    case DataType::kU2: {
      RETURN_IF_ERROR(check(p.int32_data_size()));
      std::vector<uint8_t> packed(static_cast<size_t>(p.int32_data_size()));
      for (size_t i = 0; i < packed.size(); ++i) {
        packed[i] = static_cast<uint8_t>(p.int32_data(static_cast<int>(i)));
      }
      UnpackLowBit(t.dtype(), packed.data(), n, t.data<uint8_t>());
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat(ctx, ": unsupported dtype ", DataTypeOnnxName(t.dtype())));
  }
}

// Reads external data under the rules of ResolveExternalLocation, with offset/length inside the
// file and length == dims x dtype size.
absl::Status ReadExternal(const onnx::TensorProto& p, const ExternalDataPolicy& policy, DataType dt,
                          const std::vector<int64_t>& dims, ir::Tensor& t, const std::string& ctx) {
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "offset") {
      if (!absl::SimpleAtoi(kv.value(), &offset) || offset < 0) {
        return Bad(ctx, absl::StrCat("external_data offset '", kv.value(), "' is not valid"));
      }
    } else if (kv.key() == "length") {
      if (!absl::SimpleAtoi(kv.value(), &length) || length < 0) {
        return Bad(ctx, absl::StrCat("external_data length '", kv.value(), "' is not valid"));
      }
    }
  }
  ASSIGN_OR_RETURN(std::string location, ExternalLocationOf(p, policy, ctx));
  ASSIGN_OR_RETURN(std::string path, ResolveExternalLocation(location, policy, ctx));
  // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise block until a writer
  // appears, hanging the import; it is then refused as not a regular file.
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Bad(ctx, absl::StrCat("cannot open external_data file '", location, "'"));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Bad(ctx, absl::StrCat("external_data '", location, "' is not a regular file"));
  }
  const int64_t n = ir::NumElementsOf(dims);
  const int64_t need = OnnxPayloadBytes(dt, n);
  auto outside = [&]() {
    close(fd);
    // offset + length may overflow int64 here: print the two numbers, not their sum.
    return Bad(ctx, absl::StrCat("external_data range (offset ", offset, ", length ",
                                 length < 0 ? std::string("to end of file") : absl::StrCat(length),
                                 ") is outside '", location, "' (", st.st_size, " bytes)"));
  };
  // An offset past the end is a range error, not a negative "rest of the file" length.
  if (offset > st.st_size) return outside();
  if (length < 0) length = st.st_size - offset;
  if (length != need) {
    close(fd);
    if (PackedBits(dt) != 0) {
      return Bad(ctx, absl::StrCat("external_data length ", length, " != dims ",
                                   ir::DimsToString(dims), " need ", Need(dt, need, " bytes")));
    }
    return Bad(ctx,
               absl::StrCat("external_data length ", length, " != dims ", ir::DimsToString(dims),
                            " x ", DataTypeSize(dt), " bytes = ", need));
  }
  if (length > st.st_size - offset) return outside();
  auto alloc = ir::Tensor::Allocate(dt, dims);
  if (!alloc.ok()) {
    close(fd);
    return Bad(ctx, std::string(alloc.status().message()));
  }
  t = std::move(alloc).value();
  // The packed types are read into a buffer of their ONNX size and unpacked after.
  std::vector<uint8_t> packed(PackedBits(dt) != 0 ? static_cast<size_t>(length) : 0);
  char* dst = PackedBits(dt) != 0 ? reinterpret_cast<char*>(packed.data())
                                  : static_cast<char*>(t.raw_data());
  int64_t done = 0;
  while (done < length) {
    ssize_t r = pread(fd, dst + done, length - done, offset + done);
    if (r <= 0) {
      close(fd);
      return Bad(ctx, absl::StrCat("read error on external_data '", location, "'"));
    }
    done += r;
  }
  close(fd);
  if (PackedBits(dt) != 0) UnpackLowBit(dt, packed.data(), n, t.data<uint8_t>());
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::Status NoModelFolder(const std::string& context) {
  return Bad(context,
             "uses external data but the model was not loaded from a file, so there is no model "
             "folder to read it from");
}

}  // namespace

absl::Status RefusedExternalLocation(const std::string& context, const std::string& location) {
  return Bad(context, absl::StrCat("external_data location '", absl::CHexEscape(location),
                                   "' is refused: a location must be a relative path to a file "
                                   "inside the model's folder, with no '..' component and no "
                                   "symlink on the way"));
}

absl::StatusOr<std::string> ResolveExternalLocation(const std::string& location,
                                                    const ExternalDataPolicy& policy,
                                                    const std::string& context) {
  if (policy.model_dir.empty()) return NoModelFolder(context);
  if (location.empty()) return Bad(context, "external_data has an empty 'location'");
  // By the text alone first: nothing outside the folder is ever looked at, so the error cannot
  // tell whether such a path exists.
  if (location[0] == '/' || location.find('\\') != std::string::npos ||
      location.find('\0') != std::string::npos) {
    return RefusedExternalLocation(context, location);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(location, '/', absl::SkipEmpty())) {
    if (part == "..") return RefusedExternalLocation(context, location);
    if (part != ".") parts.push_back(part);
  }
  if (parts.empty()) return RefusedExternalLocation(context, location);
  // Then each component below the folder: every path looked at here is inside it, and none may
  // be a symlink (one could lead anywhere).
  std::string path = policy.model_dir;
  for (absl::string_view part : parts) {
    path = absl::StrCat(path, "/", part);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      return Bad(context, absl::StrCat("external_data file '", location,
                                       "' does not exist in the model's folder"));
    }
    if (S_ISLNK(st.st_mode)) return RefusedExternalLocation(context, location);
  }
  return path;
}

absl::StatusOr<std::string> ExternalLocationOf(const onnx::TensorProto& p,
                                               const ExternalDataPolicy& policy,
                                               const std::string& context) {
  if (policy.model_dir.empty()) return NoModelFolder(context);
  const std::string* location = nullptr;
  for (const auto& kv : p.external_data()) {
    if (kv.key() != "location") continue;
    if (location != nullptr) return Bad(context, "external_data has more than one 'location'");
    location = &kv.value();
  }
  if (location == nullptr) return Bad(context, "external_data has no 'location'");
  if (location->empty()) return Bad(context, "external_data has an empty 'location'");
  return *location;
}

absl::StatusOr<ir::Tensor> TensorFromProto(const onnx::TensorProto& p,
                                           const ExternalDataPolicy& external,
                                           const std::string& context) {
  DataType dt = DataTypeFromOnnx(p.data_type());
  if (dt == DataType::kUndefined || dt == DataType::kString) {
    return absl::UnimplementedError(
        absl::StrCat(context, ": unsupported dtype ", OnnxDataTypeName(p.data_type())));
  }
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return Bad(context, absl::StrCat("dim ", i, " is negative (", dims[i], ")"));
    }
  }
  int64_t n = ir::NumElementsOf(dims);
  int64_t esize = static_cast<int64_t>(DataTypeSize(dt));
  if (n < 0 || n > INT64_MAX / esize) {
    return Bad(context, absl::StrCat("dims ", ir::DimsToString(dims), " overflow int64"));
  }
  if (p.has_segment())
    return absl::UnimplementedError(absl::StrCat(context, ": segmented tensors"));
  // Sizes are checked against the payload before anything is allocated, so a tensor that
  // declares huge dims with a small payload fails fast instead of allocating.
  auto allocate = [&]() -> absl::StatusOr<ir::Tensor> {
    auto alloc = ir::Tensor::Allocate(dt, dims);
    if (!alloc.ok()) return Bad(context, std::string(alloc.status().message()));
    return alloc;
  };
  ir::Tensor t;
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    RETURN_IF_ERROR(ReadExternal(p, external, dt, dims, t, context));
  } else if (p.has_raw_data()) {
    const int64_t need = OnnxPayloadBytes(dt, n);
    if (static_cast<int64_t>(p.raw_data().size()) != need) {
      if (PackedBits(dt) != 0) {
        return Bad(context,
                   absl::StrCat("raw_data has ", p.raw_data().size(), " bytes but dims ",
                                ir::DimsToString(dims), " need ", Need(dt, need, " bytes")));
      }
      return Bad(context,
                 absl::StrCat("raw_data has ", p.raw_data().size(), " bytes but dims ",
                              ir::DimsToString(dims), " x ", esize, " bytes need ", n * esize));
    }
    ASSIGN_OR_RETURN(t, allocate());
    if (PackedBits(dt) != 0) {
      UnpackLowBit(dt, reinterpret_cast<const uint8_t*>(p.raw_data().data()), n, t.data<uint8_t>());
    } else {
      std::memcpy(t.raw_data(), p.raw_data().data(), t.byte_size());
    }
  } else {
    int64_t have = p.float_data_size() + p.double_data_size() + p.int64_data_size() +
                   p.uint64_data_size() + p.int32_data_size();
    const int64_t want = TypedValueCount(dt, n);
    if (have != want) {
      return Bad(context, absl::StrCat("holds ", have, " values but dims ", ir::DimsToString(dims),
                                       " need ", Need(dt, want, "")));
    }
    ASSIGN_OR_RETURN(t, allocate());
    RETURN_IF_ERROR(CopyTypedData(p, t, context));
  }
  if (dt == DataType::kBool) {  // normalise to 0/1 so kernels can rely on it
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  }
  return t;
}

absl::string_view TensorProtoPayload(const ir::Tensor& t, std::string* storage) {
  if (PackedBits(t.dtype()) == 0) {
    return absl::string_view(static_cast<const char*>(t.raw_data()), t.byte_size());
  }
  storage->resize(static_cast<size_t>(OnnxPayloadBytes(t.dtype(), t.num_elements())));
  PackLowBit(t.dtype(), t.data<uint8_t>(), t.num_elements(),
             reinterpret_cast<uint8_t*>(storage->data()));
  return *storage;
}

void TensorToProto(const ir::Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p->add_dims(d);
  std::string packed;
  const absl::string_view payload = TensorProtoPayload(t, &packed);
  p->set_raw_data(payload.data(), payload.size());
}

absl::StatusOr<std::pair<std::string, ir::Tensor>> ParseNamedTensorProto(
    absl::string_view bytes, const std::string& context) {
  onnx::TensorProto p;
  if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Bad(context, "is not a valid serialized onnx.TensorProto");
  }
  ASSIGN_OR_RETURN(ir::Tensor t, TensorFromProto(p, ExternalDataPolicy{}, context));
  return std::make_pair(p.name(), std::move(t));
}

absl::StatusOr<ir::Tensor> ParseTensorProto(absl::string_view bytes, const std::string& context) {
  ASSIGN_OR_RETURN(auto named, ParseNamedTensorProto(bytes, context));
  return std::move(named.second);
}

namespace {

// The TensorProto of `t` without its payload: dims, data_type and name.
onnx::TensorProto HeaderProto(const ir::Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  if (!name.empty()) p.set_name(name);
  p.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p.add_dims(d);
  return p;
}

// raw_data is field 9, length-delimited: its tag is one byte, 9 << 3 | 2.
constexpr char kRawDataTag = (9 << 3) | 2;

}  // namespace

int64_t SerializedTensorProtoSize(const ir::Tensor& t, const std::string& name) {
  const auto payload = static_cast<uint64_t>(OnnxPayloadBytes(t.dtype(), t.num_elements()));
  return static_cast<int64_t>(HeaderProto(t, name).ByteSizeLong() + 1 +
                              google::protobuf::io::CodedOutputStream::VarintSize64(payload) +
                              payload);
}

absl::StatusOr<std::string> TensorProtoHead(const ir::Tensor& t, const std::string& name) {
  const int64_t size = SerializedTensorProtoSize(t, name);
  if (size > kMaxTensorProtoBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor '", name, "' (", DataTypeOnnxName(t.dtype()), " ",
                     ir::DimsToString(t.dims()), ", ", t.byte_size(),
                     " bytes) is too large for an onnx.TensorProto: protobuf cannot "
                     "serialize a message of 2 GiB or more (",
                     size, " > ", kMaxTensorProtoBytes, " bytes)"));
  }
  // Fields in number order, as protobuf writes them: dims, data_type, name, then raw_data's tag
  // and length; the payload follows.
  std::string head = HeaderProto(t, name).SerializeAsString();
  head.push_back(kRawDataTag);
  uint64_t n = static_cast<uint64_t>(OnnxPayloadBytes(t.dtype(), t.num_elements()));
  while (n >= 0x80) {
    head.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  head.push_back(static_cast<char>(n));
  return head;
}

absl::StatusOr<std::string> SerializeTensorProto(const ir::Tensor& t, const std::string& name) {
  ASSIGN_OR_RETURN(std::string out, TensorProtoHead(t, name));
  // The payload is copied once, not into the message and again into its serialization.
  try {
    std::string packed;
    const absl::string_view payload = TensorProtoPayload(t, &packed);
    out.reserve(out.size() + payload.size());
    out.append(payload.data(), payload.size());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory serializing tensor '", name,
                                                     "' (", out.size() + t.byte_size(), " bytes)"));
  }
  return out;
}

}  // namespace kiln::import
