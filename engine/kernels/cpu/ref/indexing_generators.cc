// Reference kernels of the indexing family, part 2: ops that generate tensors from shapes,
// attributes or scalars (Shape, Size, Constant, ConstantOfShape, EyeLike, Range, OneHot) and
// the structural selectors NonZero and Trilu. Registered by RegisterIndexing (indexing.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

void RegisterIndexingGenerators(Registry& r);

namespace {

// The dtype the importer recorded for output 0 (kUndefined when unknown).
DataType DeclaredOutputType(const ir::Node& node) {
  return node.outputs.empty() || node.outputs[0] == nullptr ? DataType::kUndefined
                                                            : node.outputs[0]->dtype;
}

// Errors when the declared output dtype is known and differs from the one the op produces.
absl::Status CheckDeclaredOutput(const ir::Node& node, DataType produced) {
  DataType declared = DeclaredOutputType(node);
  if (declared != DataType::kUndefined && declared != produced) {
    return InvalidNode(node, "produces ", DataTypeOnnxName(produced),
                       " but its output is declared ", DataTypeOnnxName(declared));
  }
  return absl::OkStatus();
}

// Fills `count` elements of `dst` with the element at `value` (any fixed-size dtype).
void FillBytes(void* dst, const void* value, size_t esz, int64_t count) {
  char* d = static_cast<char*>(dst);
  for (int64_t i = 0; i < count; ++i, d += esz) std::memcpy(d, value, esz);
}

// Reads a scalar (0-D or one-element) input as double; `what` names it in errors.
absl::StatusOr<double> ReadScalar(const ir::Node& node, const ir::Tensor& t, const char* what) {
  if (t.num_elements() != 1 || t.rank() > 1) {
    return InvalidNode(node, what, " must be a scalar, got shape ", ir::DimsToString(t.dims()));
  }
  return ir::ElementAsDouble(t, 0);
}

// ---- Shape / Size ---------------------------------------------------------------------------

absl::Status CheckShape(const ir::Node& node) {
  if (node.since_version < 15 && (node.has_attr("start") || node.has_attr("end"))) {
    return InvalidNode(node, "start/end are not defined before opset 15");
  }
  return absl::OkStatus();
}

absl::Status RunShape(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int64_t r = x->rank();
  // start/end clamp into [0, r] after adding r to negatives (opset 15).
  auto clamp = [r](int64_t v) { return std::min(std::max(v < 0 ? v + r : v, int64_t{0}), r); };
  const int64_t start = clamp(node.GetInt("start", 0));
  const int64_t end = node.has_attr("end") ? clamp(node.GetInt("end", r)) : r;
  const int64_t n = std::max(end - start, int64_t{0});
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kI64, {n}));
  for (int64_t i = 0; i < n; ++i) out->data<int64_t>()[i] = x->dim(start + i);
  return absl::OkStatus();
}

absl::Status NoCheck(const ir::Node&) { return absl::OkStatus(); }

absl::Status RunSize(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kI64, {}));
  out->data<int64_t>()[0] = x->num_elements();
  return absl::OkStatus();
}

// ---- Constant -------------------------------------------------------------------------------

// The value attributes of Constant; exactly one must be present.
constexpr const char* kConstantAttrs[] = {"value",         "value_float", "value_floats",
                                          "value_int",     "value_ints",  "value_string",
                                          "value_strings", "sparse_value"};

absl::Status CheckConstant(const ir::Node& node) {
  int present = 0;
  for (const char* a : kConstantAttrs) present += node.has_attr(a) ? 1 : 0;
  if (present != 1) {
    return InvalidNode(node, "needs exactly one value attribute, got ", present);
  }
  if (node.has_attr("sparse_value")) {
    return absl::UnimplementedError(
        node.Label() + " unsupported attribute sparse_value: sparse constants are not supported");
  }
  if (node.has_attr("value_string") || node.has_attr("value_strings")) {
    return absl::UnimplementedError(
        node.Label() + " unsupported attribute value_string(s): string tensors are not supported");
  }
  DataType produced = DataType::kUndefined;
  if (const ir::Attribute* a = node.attr("value")) {
    if (a->type != ir::Attribute::Type::kTensor || !a->t.defined()) {
      return InvalidNode(node, "attribute value must be a tensor");
    }
    produced = a->t.dtype();
  } else if (node.has_attr("value_float") || node.has_attr("value_floats")) {
    const ir::Attribute* a =
        node.has_attr("value_float") ? node.attr("value_float") : node.attr("value_floats");
    auto want =
        node.has_attr("value_float") ? ir::Attribute::Type::kFloat : ir::Attribute::Type::kFloats;
    if (a->type != want) return InvalidNode(node, "value_float(s) has the wrong attribute kind");
    produced = DataType::kF32;
  } else {
    const ir::Attribute* a =
        node.has_attr("value_int") ? node.attr("value_int") : node.attr("value_ints");
    auto want = node.has_attr("value_int") ? ir::Attribute::Type::kInt : ir::Attribute::Type::kInts;
    if (a->type != want) return InvalidNode(node, "value_int(s) has the wrong attribute kind");
    produced = DataType::kI64;
  }
  return CheckDeclaredOutput(node, produced);
}

absl::Status RunConstant(const ir::Node& node, KernelContext& ctx) {
  if (const ir::Attribute* a = node.attr("value")) {
    const ir::Tensor& t = a->t;
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, t.dtype(), t.dims()));
    if (t.byte_size() > 0) std::memcpy(out->raw_data(), t.raw_data(), t.byte_size());
    return absl::OkStatus();
  }
  if (node.has_attr("value_float") || node.has_attr("value_floats")) {
    const bool scalar = node.has_attr("value_float");
    std::vector<float> v = scalar ? std::vector<float>{node.GetFloat("value_float", 0)}
                                  : node.GetFloats("value_floats");
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kF32, std::move(dims)));
    if (!v.empty()) std::memcpy(out->raw_data(), v.data(), v.size() * sizeof(float));
    return absl::OkStatus();
  }
  if (node.has_attr("value_int") || node.has_attr("value_ints")) {
    const bool scalar = node.has_attr("value_int");
    std::vector<int64_t> v =
        scalar ? std::vector<int64_t>{node.GetInt("value_int", 0)} : node.GetInts("value_ints");
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kI64, std::move(dims)));
    if (!v.empty()) std::memcpy(out->raw_data(), v.data(), v.size() * sizeof(int64_t));
    return absl::OkStatus();
  }
  return InvalidNode(node, "has no value attribute");
}

// ---- ConstantOfShape ------------------------------------------------------------------------

absl::Status CheckConstantOfShape(const ir::Node& node) {
  DataType produced = DataType::kF32;
  if (const ir::Attribute* a = node.attr("value")) {
    if (a->type != ir::Attribute::Type::kTensor || !a->t.defined()) {
      return InvalidNode(node, "attribute value must be a tensor");
    }
    if (a->t.num_elements() != 1) {
      return InvalidNode(node, "attribute value must have one element, got ", a->t.num_elements());
    }
    produced = a->t.dtype();
  }
  return CheckDeclaredOutput(node, produced);
}

absl::Status RunConstantOfShape(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* shape, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReadInts(node, *shape, "shape"));
  for (int64_t d : dims) {
    if (d < 0) return InvalidNode(node, "shape ", ir::DimsToString(dims), " has a negative dim");
  }
  // Default value: a float 0.
  const float zero = 0.0f;
  const ir::Attribute* a = node.attr("value");
  const DataType dtype = a ? a->t.dtype() : DataType::kF32;
  const void* value = a ? a->t.raw_data() : &zero;
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, dtype, std::move(dims)));
  FillBytes(out->raw_data(), value, DataTypeSize(dtype), out->num_elements());
  return absl::OkStatus();
}

// ---- EyeLike --------------------------------------------------------------------------------

// EyeLike's output dtype: the `dtype` attribute, else the input's.
absl::StatusOr<DataType> EyeLikeType(const ir::Node& node, DataType input) {
  if (!node.has_attr("dtype")) return input;
  DataType t = DataTypeFromOnnx(static_cast<int32_t>(node.GetInt("dtype", 0)));
  if (t == DataType::kUndefined || t == DataType::kString) {
    return InvalidNode(node, "unsupported dtype attribute ", node.GetInt("dtype", 0));
  }
  return t;
}

absl::Status CheckEyeLike(const ir::Node& node) {
  const ir::Value* in = node.input(0);
  if (in == nullptr) return InvalidNode(node, "input 0 is required but missing");
  if (in->dtype == DataType::kUndefined) return absl::OkStatus();
  ASSIGN_OR_RETURN(DataType t, EyeLikeType(node, in->dtype));
  return CheckDeclaredOutput(node, t);
}

absl::Status RunEyeLike(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  if (x->rank() != 2) return InvalidNode(node, "input must be 2-D, got rank ", x->rank());
  ASSIGN_OR_RETURN(DataType dtype, EyeLikeType(node, x->dtype()));
  const int64_t rows = x->dim(0), cols = x->dim(1);
  // Beyond +-(rows + cols) the diagonal is off the matrix anyway; clamping keeps i + k in range.
  const int64_t k = std::min(std::max(node.GetInt("k", 0), -(rows + cols)), rows + cols);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, dtype, {rows, cols}));
  return DispatchAll(dtype, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    T* o = out->data<T>();
    const T zero = Store<T>(0), one = Store<T>(1);
    for (int64_t i = 0; i < rows * cols; ++i) o[i] = zero;
    for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i) {
      o[i * cols + i + k] = one;
    }
    return absl::OkStatus();
  });
}

// ---- Range ----------------------------------------------------------------------------------

// Range's element count and values. Floating types compute the count in double and each value
// as start + i * delta in Compute<T> (numpy's arange, which the ONNX test data follows) rounded
// once; integers use 128-bit arithmetic so no intermediate overflows.
template <typename T>
absl::Status RangeImpl(const ir::Node& node, const ir::Tensor& ts, const ir::Tensor& tl,
                       const ir::Tensor& td, KernelContext& ctx) {
  const T start = ts.data<T>()[0], limit = tl.data<T>()[0], delta = td.data<T>()[0];
  int64_t n = 0;
  if constexpr (std::is_floating_point_v<Compute<T>>) {
    const double s = Load<T>(start), l = Load<T>(limit), d = Load<T>(delta);
    if (d == 0 || std::isnan(d)) return InvalidNode(node, "delta must be non-zero");
    const double count = std::ceil((l - s) / d);
    if (std::isnan(count) || count > static_cast<double>(int64_t{1} << 53)) {
      return InvalidNode(node, "range [", s, ", ", l, ") step ", d, " has no finite length");
    }
    n = count > 0 ? static_cast<int64_t>(count) : 0;
  } else if constexpr (std::is_same_v<T, bool>) {
    return InvalidNode(node, "bool is not a Range type");
  } else {
    const __int128 s = start, l = limit, d = delta;
    if (d == 0) return InvalidNode(node, "delta must be non-zero");
    const __int128 diff = l - s;
    // ceil(diff / d) for same-sign operands; otherwise the range is empty.
    if ((diff > 0 && d > 0) || (diff < 0 && d < 0)) {
      const __int128 ad = d > 0 ? d : -d, adiff = diff > 0 ? diff : -diff;
      n = static_cast<int64_t>((adiff + ad - 1) / ad);
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, ts.dtype(), {n}));
  T* o = out->data<T>();
  if constexpr (std::is_floating_point_v<Compute<T>>) {
    const Compute<T> s = Load<T>(start), d = Load<T>(delta);
    for (int64_t i = 0; i < n; ++i) o[i] = Store<T>(s + static_cast<Compute<T>>(i) * d);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      o[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
    }
  }
  return absl::OkStatus();
}

absl::Status RunRange(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* t[3];
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(t[i], RequireInput(node, ctx, i));
    if (t[i]->num_elements() != 1 || t[i]->rank() > 1) {
      return InvalidNode(node, "input ", i, " must be a scalar, got shape ",
                         ir::DimsToString(t[i]->dims()));
    }
    if (t[i]->dtype() != t[0]->dtype()) {
      return InvalidNode(node, "start, limit and delta must have the same dtype");
    }
  }
  // stash_type (opset 27) names the precision of fp16/bf16 ranges; this kernel computes them in
  // fp32, which is stash_type = 1 (the default). Other stash types are refused, not ignored.
  if (node.has_attr("stash_type")) {
    if (node.since_version < 27) {
      return InvalidNode(node, "stash_type is not defined before opset 27");
    }
    const int64_t stash = node.GetInt("stash_type", 1);
    const bool half = t[0]->dtype() == DataType::kF16 || t[0]->dtype() == DataType::kBF16;
    if (stash != 1 && half) {
      return absl::UnimplementedError(
          absl::StrCat(node.Label(), " unsupported attribute value: stash_type ", stash,
                       " (only 1 = float is implemented for float16/bfloat16 ranges)"));
    }
  }
  return DispatchAll(t[0]->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    return RangeImpl<T>(node, *t[0], *t[1], *t[2], ctx);
  });
}

// ---- OneHot ---------------------------------------------------------------------------------

// Reads indices of any numeric dtype as int64; non-integral values truncate toward zero (as a
// cast to int64 would) and values that do not fit (NaN, huge) map to `invalid`.
std::vector<int64_t> ReadAnyIndices(const ir::Tensor& t, int64_t invalid) {
  std::vector<int64_t> v(t.num_elements());
  const bool floating = IsFloating(t.dtype());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!floating) {
      v[i] = ir::ElementAsInt64(t, i);
      continue;
    }
    const double d = ir::ElementAsDouble(t, i);
    v[i] = std::fabs(d) < 9.0e18 ? static_cast<int64_t>(d) : invalid;
  }
  return v;
}

absl::Status RunOneHot(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* depth_t, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* values, RequireInput(node, ctx, 2));
  ASSIGN_OR_RETURN(double depth_d, ReadScalar(node, *depth_t, "depth"));
  if (!(depth_d >= 1) || depth_d > 9.0e18) {
    return InvalidNode(node, "depth must be a positive number, got ", depth_d);
  }
  const int64_t depth = static_cast<int64_t>(depth_d);
  if (values->num_elements() != 2 || values->rank() != 1) {
    return InvalidNode(node, "values must be [off_value, on_value], got shape ",
                       ir::DimsToString(values->dims()));
  }
  const int r = indices->rank();
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", -1), r + 1));
  std::vector<int64_t> idx = ReadAnyIndices(*indices, depth);
  // Opset 11 wraps negative indices; opset 9 treats them, like any index outside [0, depth),
  // as all-off. Out-of-range indices never fail: the row is simply all off_value.
  const bool wrap = node.since_version >= 11;
  for (int64_t& i : idx) {
    if (wrap && i < 0 && i >= -depth) i += depth;
  }
  std::vector<int64_t> out_dims = indices->dims();
  out_dims.insert(out_dims.begin() + axis, depth);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, values->dtype(), out_dims));
  const size_t esz = DataTypeSize(values->dtype());
  const char* off = static_cast<const char*>(values->raw_data());
  const char* on = off + esz;
  char* o = static_cast<char*>(out->raw_data());
  const int64_t outer = Product(indices->dims(), 0, axis);
  const int64_t inner = Product(indices->dims(), axis, r);
  for (int64_t a = 0; a < outer; ++a) {
    const int64_t* ia = idx.data() + a * inner;
    for (int64_t d = 0; d < depth; ++d) {
      for (int64_t i = 0; i < inner; ++i, o += esz) std::memcpy(o, ia[i] == d ? on : off, esz);
    }
  }
  return absl::OkStatus();
}

// ---- NonZero --------------------------------------------------------------------------------

absl::Status RunNonZero(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  // A scalar is treated as a one-element vector (numpy's nonzero did the same).
  std::vector<int64_t> dims = x->rank() == 0 ? std::vector<int64_t>{1} : x->dims();
  const int r = static_cast<int>(dims.size());
  const int64_t total = x->num_elements();
  std::vector<uint8_t> nz(total);
  int64_t n = 0;
  RETURN_IF_ERROR(DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    const T* p = x->data<T>();
    for (int64_t i = 0; i < total; ++i) {
      nz[i] = Load<T>(p[i]) != Compute<T>(0);  // NaN counts as non-zero
      n += nz[i];
    }
    return absl::OkStatus();
  }));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataType::kI64, {r, n}));
  int64_t* o = out->data<int64_t>();
  std::vector<int64_t> ctr(r, 0);
  int64_t col = 0;
  for (int64_t i = 0; i < total; ++i) {
    if (nz[i]) {
      for (int d = 0; d < r; ++d) o[d * n + col] = ctr[d];
      ++col;
    }
    for (int d = r - 1; d >= 0; --d) {
      if (++ctr[d] < dims[d]) break;
      ctr[d] = 0;
    }
  }
  return absl::OkStatus();
}

// ---- Trilu ----------------------------------------------------------------------------------

absl::Status RunTrilu(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  if (x->rank() < 2) return InvalidNode(node, "input must have rank >= 2, got ", x->rank());
  int64_t k = 0;
  if (const ir::Tensor* kt = ctx.input(1)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> kv, ReadInts(node, *kt, "k"));
    if (kv.size() != 1) return InvalidNode(node, "k must be a scalar");
    k = kv[0];
  }
  const bool upper = node.GetInt("upper", 1) != 0;
  const int r = x->rank();
  const int64_t rows = x->dim(r - 2), cols = x->dim(r - 1);
  // Clamp k so row + k cannot overflow; beyond +-(rows + cols) the result no longer changes.
  k = std::min(std::max(k, -(rows + cols)), rows + cols);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), x->dims()));
  const size_t esz = DataTypeSize(x->dtype());
  const size_t row_bytes = static_cast<size_t>(cols) * esz;
  const int64_t mats = rows * cols == 0 ? 0 : x->num_elements() / (rows * cols);
  const char* s = static_cast<const char*>(x->raw_data());
  char* o = static_cast<char*>(out->raw_data());
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t i = 0; i < rows; ++i, s += row_bytes, o += row_bytes) {
      // Kept columns: j - i >= k (upper) or j - i <= k (lower); the rest are zero.
      const int64_t edge = std::min(std::max(i + k + (upper ? 0 : 1), int64_t{0}), cols);
      const int64_t keep_begin = upper ? edge : 0, keep_end = upper ? cols : edge;
      std::memset(o, 0, row_bytes);
      if (keep_end > keep_begin) {
        std::memcpy(o + keep_begin * esz, s + keep_begin * esz, (keep_end - keep_begin) * esz);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterIndexingGenerators(Registry& r) {
  r.AddRef(ir::OpType::kShape, MovementTypes(), CheckedFactory<CheckShape, RunShape>);
  r.AddRef(ir::OpType::kSize, MovementTypes(), CheckedFactory<NoCheck, RunSize>);
  // Constant and ConstantOfShape are keyed by their output dtype, which the importer derives
  // from the value attribute. String is listed so a string Constant reaches the factory and
  // gets its clear Unimplemented error instead of a generic "unsupported dtype".
  std::vector<DataType> constant_types = MovementTypes();
  constant_types.push_back(DataType::kString);
  r.AddRef(ir::OpType::kConstant, constant_types, CheckedFactory<CheckConstant, RunConstant>,
           kOutputType);
  r.AddRef(ir::OpType::kConstantOfShape, AllTypes(),
           CheckedFactory<CheckConstantOfShape, RunConstantOfShape>, kOutputType);
  r.AddRef(ir::OpType::kEyeLike, AllTypes(), CheckedFactory<CheckEyeLike, RunEyeLike>, kOutputType);
  r.AddRef(ir::OpType::kRange, NumericTypes(), CheckedFactory<NoCheck, RunRange>);
  // OneHot's output (and kernel key) is the dtype of `values` (input 2).
  r.AddRef(ir::OpType::kOneHot, AllTypes(), CheckedFactory<NoCheck, RunOneHot>, 2);
  r.AddRef(ir::OpType::kNonZero, AllTypes(), CheckedFactory<NoCheck, RunNonZero>);
  r.AddRef(ir::OpType::kTrilu, AllTypes(), CheckedFactory<NoCheck, RunTrilu>);
}

}  // namespace kiln::kernels::cpu::ref
