#include "engine/import/value_proto.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/tensor_proto.h"
#include "onnx/onnx-data_pb.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

absl::StatusOr<ir::Tensor> FromSequence(const onnx::SequenceProto& s, DataType elem_dtype,
                                        const std::string& context) {
  if (s.elem_type() != onnx::SequenceProto::TENSOR &&
      s.elem_type() != onnx::SequenceProto::UNDEFINED) {
    return absl::UnimplementedError(absl::StrCat(
        context, ": a sequence of elem_type ", s.elem_type(), " (Kiln runs sequences of tensors)"));
  }
  std::vector<ir::Tensor> elements;
  DataType dt = elem_dtype;
  for (int i = 0; i < s.tensor_values_size(); ++i) {
    const std::string what = absl::StrCat(context, " element ", i);
    ASSIGN_OR_RETURN(ir::Tensor t, TensorFromProto(s.tensor_values(i), {}, what));
    if (i == 0 && dt == DataType::kUndefined) dt = t.dtype();
    if (t.dtype() != dt) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is ", DataTypeOnnxName(t.dtype()),
                                                     "; the sequence holds ",
                                                     DataTypeOnnxName(dt)));
    }
    elements.push_back(std::move(t));
  }
  return ir::Tensor::Sequence(dt, std::move(elements));
}

template <typename Proto>
absl::Status ParseProto(absl::string_view bytes, Proto& p, const char* type,
                        const std::string& context) {
  if (bytes.size() > static_cast<size_t>(kMaxTensorProtoBytes) ||
      !p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(context, " is not a serialized ", type));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(size_t bytes, const std::string& name) {
  if (bytes >= static_cast<size_t>(kMaxTensorProtoBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("value '", name, "' needs ", bytes, " bytes, over protobuf's 2 GiB limit"));
  }
  return absl::OkStatus();
}

absl::Status ToSequence(const ir::Tensor& t, const std::string& name, onnx::SequenceProto* s) {
  s->set_name(name);
  s->set_elem_type(onnx::SequenceProto::TENSOR);
  size_t total = 0;
  for (const ir::Tensor& e : t.elements()) {
    total += e.byte_size();
    RETURN_IF_ERROR(CheckSize(total, name));
    TensorToProto(e, "", s->add_tensor_values());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ir::Tensor> ParseValueProto(absl::string_view bytes, ir::ValueKind kind,
                                           DataType elem_dtype, const std::string& context) {
  switch (kind) {
    case ir::ValueKind::kTensor:
      return ParseTensorProto(bytes, context);
    case ir::ValueKind::kSequence: {
      onnx::SequenceProto s;
      RETURN_IF_ERROR(ParseProto(bytes, s, "onnx.SequenceProto", context));
      return FromSequence(s, elem_dtype, context);
    }
    case ir::ValueKind::kOptionalTensor:
    case ir::ValueKind::kOptionalSequence: {
      onnx::OptionalProto o;
      RETURN_IF_ERROR(ParseProto(bytes, o, "onnx.OptionalProto", context));
      const bool seq = kind == ir::ValueKind::kOptionalSequence;
      if (o.elem_type() == onnx::OptionalProto::UNDEFINED) return ir::Tensor::None(elem_dtype);
      if (seq && o.elem_type() == onnx::OptionalProto::SEQUENCE) {
        return FromSequence(o.sequence_value(), elem_dtype, context);
      }
      if (!seq && o.elem_type() == onnx::OptionalProto::TENSOR) {
        return TensorFromProto(o.tensor_value(), {}, context);
      }
      return absl::InvalidArgumentError(absl::StrCat(context, " holds an optional of elem_type ",
                                                     o.elem_type(), " where the model takes ",
                                                     ir::ValueTypeName(kind, elem_dtype)));
    }
  }
  return absl::InternalError("unknown value kind");
}

absl::StatusOr<std::string> SerializeValueProto(const ir::Tensor& t, ir::ValueKind kind,
                                                const std::string& name) {
  std::string out;
  if (kind == ir::ValueKind::kTensor) {
    if (t.kind() != ir::TensorKind::kDense) {
      return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is not a tensor"));
    }
    RETURN_IF_ERROR(CheckSize(t.byte_size(), name));
    onnx::TensorProto p;
    TensorToProto(t, name, &p);
    p.SerializeToString(&out);
    return out;
  }
  if (kind == ir::ValueKind::kSequence) {
    if (!t.is_sequence()) {
      return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is not a sequence"));
    }
    onnx::SequenceProto s;
    RETURN_IF_ERROR(ToSequence(t, name, &s));
    s.SerializeToString(&out);
    return out;
  }
  onnx::OptionalProto o;
  o.set_name(name);
  if (t.is_none()) {
    o.set_elem_type(onnx::OptionalProto::UNDEFINED);
  } else if (t.is_sequence()) {
    o.set_elem_type(onnx::OptionalProto::SEQUENCE);
    RETURN_IF_ERROR(ToSequence(t, name, o.mutable_sequence_value()));
  } else {
    RETURN_IF_ERROR(CheckSize(t.byte_size(), name));
    o.set_elem_type(onnx::OptionalProto::TENSOR);
    TensorToProto(t, "", o.mutable_tensor_value());
  }
  o.SerializeToString(&out);
  return out;
}

}  // namespace kiln::import
