// Sequences and optionals (ONNX seq(tensor), optional(...)): SequenceEmpty, SequenceConstruct,
// SequenceInsert, SequenceErase, SequenceAt, SequenceLength, SplitToSequence,
// ConcatFromSequence, SequenceMap, Optional, OptionalHasElement, OptionalGetElement.
//
// A sequence is an immutable ir::Tensor of kind kSequence (ir/tensor.h): inserting or erasing
// makes a new one sharing the untouched elements. A tensor entering a sequence is copied (its
// buffer may be an arena slot that later nodes reuse); a tensor leaving one (SequenceAt,
// OptionalGetElement) is copied into the node's output, so nothing outside a sequence ever
// points into it.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/subgraphs.h"

namespace kiln::kernels::cpu::ref {
namespace {

// The element type of output 0 as the graph types it (the sequence's elements).
DataType OutputDtype(const ir::Node& n) {
  return n.num_outputs() > 0 && n.outputs[0] != nullptr ? n.outputs[0]->dtype
                                                        : DataType::kUndefined;
}

absl::StatusOr<const ir::Tensor*> RequireSequence(const ir::Node& n, KernelContext& ctx, int i) {
  ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(n, ctx, i));
  if (!t->is_sequence()) return InvalidNode(n, "input ", i, " must be a sequence");
  return t;
}

absl::StatusOr<const ir::Tensor*> RequireDense(const ir::Node& n, KernelContext& ctx, int i) {
  ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(n, ctx, i));
  if (t->kind() != ir::TensorKind::kDense) return InvalidNode(n, "input ", i, " must be a tensor");
  return t;
}

// Copies dense `t` into output `k`.
absl::Status CopyOut(KernelContext& ctx, int k, const ir::Tensor& t) {
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(k, t.dtype(), t.dims()));
  if (t.byte_size() > 0) std::memcpy(out->raw_data(), t.raw_data(), t.byte_size());
  return absl::OkStatus();
}

// The position input `i` (a scalar int32/int64) made non-negative against `size`: within
// [-size, size] when `insert` (size: append), else [-size, size - 1]; `dflt` when absent.
absl::StatusOr<int64_t> Position(const ir::Node& n, KernelContext& ctx, int i, int64_t size,
                                 bool insert, int64_t dflt) {
  const ir::Tensor* p = ctx.input(i);
  if (p == nullptr) return dflt;
  if ((p->dtype() != DataType::kI64 && p->dtype() != DataType::kI32) || p->num_elements() != 1) {
    return InvalidNode(n, "position (input ", i, ") must be one int32 or int64, got ",
                       DataTypeOnnxName(p->dtype()), " ", ir::DimsToString(p->dims()));
  }
  const int64_t pos = ir::ElementAsInt64(*p, 0);
  const int64_t hi = insert ? size : size - 1;
  if (pos < -size || pos > hi) {
    return InvalidNode(n, "position ", pos, " is outside [", -size, ", ", hi,
                       "] for a sequence of ", size, " tensors");
  }
  return pos < 0 ? pos + size : pos;
}

absl::Status CheckElement(const ir::Node& n, const ir::Tensor& t, DataType dtype, int input) {
  if (t.kind() != ir::TensorKind::kDense)
    return InvalidNode(n, "input ", input, " must be a tensor");
  if (t.dtype() != dtype) {
    return InvalidNode(n, "input ", input, " is ", DataTypeOnnxName(t.dtype()),
                       " but the sequence holds ", DataTypeOnnxName(dtype));
  }
  return absl::OkStatus();
}

absl::Status RunSequenceEmpty(const ir::Node& n, KernelContext& ctx) {
  return ctx.set_output(0, ir::Tensor::Sequence(OutputDtype(n), {}));
}

absl::Status RunSequenceConstruct(const ir::Node& n, KernelContext& ctx) {
  std::vector<ir::Tensor> elements;
  for (int i = 0; i < n.num_inputs(); ++i) {
    ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(n, ctx, i));
    RETURN_IF_ERROR(CheckElement(n, *t, OutputDtype(n), i));
    elements.push_back(t->Clone());
  }
  return ctx.set_output(0, ir::Tensor::Sequence(OutputDtype(n), std::move(elements)));
}

absl::Status RunSequenceInsert(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* seq, RequireSequence(n, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(n, ctx, 1));
  RETURN_IF_ERROR(CheckElement(n, *t, seq->dtype(), 1));
  const int64_t size = static_cast<int64_t>(seq->elements().size());
  ASSIGN_OR_RETURN(int64_t pos, Position(n, ctx, 2, size, true, size));
  std::vector<ir::Tensor> elements = seq->elements();  // shares the elements' storage
  elements.insert(elements.begin() + pos, t->Clone());
  return ctx.set_output(0, ir::Tensor::Sequence(seq->dtype(), std::move(elements)));
}

absl::Status RunSequenceErase(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* seq, RequireSequence(n, ctx, 0));
  const int64_t size = static_cast<int64_t>(seq->elements().size());
  if (size == 0) return InvalidNode(n, "cannot erase from an empty sequence");
  ASSIGN_OR_RETURN(int64_t pos, Position(n, ctx, 1, size, false, size - 1));
  std::vector<ir::Tensor> elements = seq->elements();
  elements.erase(elements.begin() + pos);
  return ctx.set_output(0, ir::Tensor::Sequence(seq->dtype(), std::move(elements)));
}

absl::Status RunSequenceAt(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* seq, RequireSequence(n, ctx, 0));
  const int64_t size = static_cast<int64_t>(seq->elements().size());
  if (size == 0) return InvalidNode(n, "cannot read from an empty sequence");
  if (ctx.input(1) == nullptr) return InvalidNode(n, "position (input 1) is missing");
  ASSIGN_OR_RETURN(int64_t pos, Position(n, ctx, 1, size, false, 0));
  return CopyOut(ctx, 0, seq->elements()[pos]);
}

absl::Status RunSequenceLength(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* seq, RequireSequence(n, ctx, 0));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kI64, {}));
  out->data<int64_t>()[0] = static_cast<int64_t>(seq->elements().size());
  return absl::OkStatus();
}

// `t`'s elements [from, from + len) along `axis` (outer x len x inner), as a new tensor of
// `dims`.
absl::StatusOr<ir::Tensor> SliceAlong(const ir::Tensor& t, int axis, int64_t from, int64_t len,
                                      std::vector<int64_t> dims) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.dim(d);
  for (int d = axis + 1; d < t.rank(); ++d) inner *= t.dim(d);
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(t.dtype(), std::move(dims)));
  const size_t es = DataTypeSize(t.dtype());
  const size_t row = static_cast<size_t>(len * inner) * es;
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer && row > 0; ++o) {
    std::memcpy(dst + o * row, src + (o * t.dim(axis) + from) * inner * es, row);
  }
  return out;
}

absl::Status RunSplitToSequence(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireDense(n, ctx, 0));
  if (x->rank() == 0) return InvalidNode(n, "cannot split a scalar");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(n, n.GetInt("axis", 0), x->rank()));
  const int64_t dim = x->dim(axis);
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (const ir::Tensor* s = ctx.input(1)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> split, ReadInts(n, *s, "split (input 1)"));
    if (s->rank() == 0) {  // one chunk size; the last chunk takes what remains
      if (split[0] <= 0) return InvalidNode(n, "split (input 1) must be positive, got ", split[0]);
      for (int64_t at = 0; at < dim; at += split[0]) sizes.push_back(std::min(split[0], dim - at));
    } else {
      int64_t total = 0;
      for (int64_t v : split) {
        if (v < 0) return InvalidNode(n, "split (input 1) has a negative length ", v);
        total += v;
      }
      if (total != dim) {
        return InvalidNode(n, "split (input 1) lengths sum to ", total, " but axis ", axis, " has ",
                           dim);
      }
      sizes = std::move(split);
    }
  } else {
    sizes.assign(dim, 1);
    squeeze = n.GetInt("keepdims", 1) == 0;
  }
  std::vector<ir::Tensor> elements;
  int64_t from = 0;
  for (int64_t len : sizes) {
    std::vector<int64_t> dims = x->dims();
    dims[axis] = len;
    if (squeeze) dims.erase(dims.begin() + axis);
    ASSIGN_OR_RETURN(ir::Tensor part, SliceAlong(*x, axis, from, len, std::move(dims)));
    elements.push_back(std::move(part));
    from += len;
  }
  return ctx.set_output(0, ir::Tensor::Sequence(x->dtype(), std::move(elements)));
}

absl::Status RunConcatFromSequence(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* seq, RequireSequence(n, ctx, 0));
  const std::vector<ir::Tensor>& parts = seq->elements();
  if (parts.empty()) return InvalidNode(n, "cannot concatenate an empty sequence");
  if (!n.has_attr("axis")) return InvalidNode(n, "needs the attribute 'axis'");
  const bool new_axis = n.GetInt("new_axis", 0) != 0;
  const int rank = parts[0].rank();
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(n, n.GetInt("axis", 0), rank + (new_axis ? 1 : 0)));
  // With new_axis the parts are stacked: each is a slice of length 1 along the new axis.
  std::vector<int64_t> dims = parts[0].dims();
  if (new_axis) dims.insert(dims.begin() + axis, 0);
  dims[axis] = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const ir::Tensor& t = parts[p];
    bool same = t.rank() == rank;
    for (int d = 0; same && d < rank; ++d) {
      same = (!new_axis && d == axis) || t.dim(d) == parts[0].dim(d);
    }
    if (!same) {
      return InvalidNode(n, "element ", p, " has shape ", ir::DimsToString(t.dims()),
                         ", which does not fit element 0's ", ir::DimsToString(parts[0].dims()),
                         new_axis ? " (stacked: all equal)" : absl::StrCat(" outside axis ", axis));
    }
    dims[axis] += new_axis ? 1 : t.dim(axis);
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, seq->dtype(), dims));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (int d = axis + 1; d < static_cast<int>(dims.size()); ++d) inner *= dims[d];
  const size_t es = DataTypeSize(seq->dtype());
  auto* dst = static_cast<char*>(out->raw_data());
  int64_t at = 0;
  for (const ir::Tensor& t : parts) {
    const int64_t len = new_axis ? 1 : t.dim(axis);
    const size_t row = static_cast<size_t>(len * inner) * es;
    const auto* src = static_cast<const char*>(t.raw_data());
    for (int64_t o = 0; o < outer && row > 0; ++o) {
      std::memcpy(dst + (o * dims[axis] + at) * inner * es, src + o * row, row);
    }
    at += len;
  }
  return absl::OkStatus();
}

absl::Status RunSequenceMap(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(SubgraphRunner * body, Runner(n, ctx, "body"));
  const int own = n.num_inputs() - Captured(n);
  ASSIGN_OR_RETURN(const ir::Tensor* first, RequireSequence(n, ctx, 0));
  const size_t len = first->elements().size();
  std::vector<const ir::Tensor*> ins(n.num_inputs());
  for (int i = 0; i < n.num_inputs(); ++i) {
    ASSIGN_OR_RETURN(ins[i], RequireInput(n, ctx, i));
    if (i < own && ins[i]->is_sequence() && ins[i]->elements().size() != len) {
      return InvalidNode(n, "input ", i, " holds ", ins[i]->elements().size(),
                         " tensors; input 0 holds ", len);
    }
  }
  std::vector<std::vector<ir::Tensor>> outs(n.num_outputs());
  std::vector<const ir::Tensor*> args(n.num_inputs());
  for (size_t e = 0; e < len; ++e) {
    for (int i = 0; i < n.num_inputs(); ++i) {
      args[i] = i < own && ins[i]->is_sequence() ? &ins[i]->elements()[e] : ins[i];
    }
    auto got = body->Run(args);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat(n.Label(), " element ", e, ": ", got.status().message()));
    }
    if (static_cast<int>(got->size()) != n.num_outputs()) {
      return absl::InternalError(
          absl::StrCat(n.Label(), " body gave ", got->size(), " outputs for ", n.num_outputs()));
    }
    for (int k = 0; k < n.num_outputs(); ++k) {
      if ((*got)[k].kind() != ir::TensorKind::kDense) {
        return InvalidNode(n, "body output ", k, " is not a tensor");
      }
      // The body's outputs own their buffers and stay valid across its runs (kernel.h).
      outs[k].push_back(std::move((*got)[k]));
    }
  }
  for (int k = 0; k < n.num_outputs(); ++k) {
    const DataType dt = n.outputs[k] != nullptr ? n.outputs[k]->dtype : DataType::kUndefined;
    RETURN_IF_ERROR(ctx.set_output(k, ir::Tensor::Sequence(dt, std::move(outs[k]))));
  }
  return absl::OkStatus();
}

absl::Status RunOptional(const ir::Node& n, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr) return ctx.set_output(0, ir::Tensor::None(OutputDtype(n)));
  // A dense input may lie in an arena slot: the optional keeps a copy of its own.
  return ctx.set_output(0, x->kind() == ir::TensorKind::kDense ? x->Clone() : *x);
}

absl::Status RunOptionalHasElement(const ir::Node& n, KernelContext& ctx) {
  (void)n;
  const ir::Tensor* x = ctx.input(0);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kBool, {}));
  out->data<bool>()[0] = x != nullptr && !x->is_none();
  return absl::OkStatus();
}

absl::Status RunOptionalGetElement(const ir::Node& n, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(n, ctx, 0));
  if (x->is_none()) return InvalidNode(n, "input 0 is an optional without a value");
  if (x->is_sequence()) return ctx.set_output(0, *x);
  return CopyOut(ctx, 0, *x);
}

absl::Status CheckSequenceMap(const ir::Node& n) { return CheckSubgraphs(n, {"body"}); }

}  // namespace

void RegisterSequences(Registry& r) {
  // Keyed on output 0: the element type (or the int64 / bool of SequenceLength and
  // OptionalHasElement); the kernels move elements by their byte size.
  auto add = [&r](ir::OpType op, KernelFactory f) { r.AddRef(op, AllTypes(), f, kOutputType); };
  add(ir::OpType::kSequenceEmpty, FunctionKernel<RunSequenceEmpty>::Create);
  add(ir::OpType::kSequenceConstruct, FunctionKernel<RunSequenceConstruct>::Create);
  add(ir::OpType::kSequenceInsert, FunctionKernel<RunSequenceInsert>::Create);
  add(ir::OpType::kSequenceErase, FunctionKernel<RunSequenceErase>::Create);
  add(ir::OpType::kSequenceAt, FunctionKernel<RunSequenceAt>::Create);
  add(ir::OpType::kSequenceLength, FunctionKernel<RunSequenceLength>::Create);
  add(ir::OpType::kSplitToSequence, FunctionKernel<RunSplitToSequence>::Create);
  add(ir::OpType::kConcatFromSequence, FunctionKernel<RunConcatFromSequence>::Create);
  add(ir::OpType::kSequenceMap, &CheckedFactory<CheckSequenceMap, RunSequenceMap>);
  add(ir::OpType::kOptional, FunctionKernel<RunOptional>::Create);
  add(ir::OpType::kOptionalHasElement, FunctionKernel<RunOptionalHasElement>::Create);
  add(ir::OpType::kOptionalGetElement, FunctionKernel<RunOptionalGetElement>::Create);
}

}  // namespace kiln::kernels::cpu::ref
