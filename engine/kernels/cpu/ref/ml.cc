// Reference kernels of ai.onnx.ml ops on numeric tensors: ArrayFeatureExtractor, Binarizer and
// LabelEncoder (TreeEnsemble lives in ml_tree_ensemble.cc).
//
// Kiln has no string tensors: a LabelEncoder whose keys or values are strings (classes_strings,
// keys_strings, values_strings, a string keys_tensor) fails naming the node and the attribute.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---- ArrayFeatureExtractor ----
// Y[..., j] = X[..., indices[j]] over the last axis; a 1-D X gives a [1, n] Y (as onnxruntime and
// the ONNX reference do).

absl::Status RunArrayFeatureExtractor(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* y_in, RequireInput(node, ctx, 1));
  if (x->rank() < 1) return InvalidNode(node, "X must have rank >= 1, got a scalar");
  if (y_in->dtype() != DataType::kI64) {
    return InvalidNode(node, "Y (indices) must be int64, got ", DataTypeOnnxName(y_in->dtype()));
  }
  const int64_t features = x->dims().back();
  const int64_t n = y_in->num_elements();
  const int64_t* idx = y_in->data<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    if (idx[j] < 0 || idx[j] >= features) {
      return InvalidNode(node, "index Y[", j, "] = ", idx[j],
                         " is out of range for the last axis "
                         "of X ",
                         ir::DimsToString(x->dims()), " (0..", features - 1, ")");
    }
  }
  std::vector<int64_t> dims = x->rank() == 1 ? std::vector<int64_t>{1, n} : x->dims();
  dims.back() = n;
  ASSIGN_OR_RETURN(ir::Tensor * z, ctx.output(0, x->dtype(), dims));
  const int64_t rows = x->num_elements() / std::max<int64_t>(features, 1);
  if (features == 0) return absl::OkStatus();  // n == 0 too (every index is out of range)
  const size_t es = DataTypeSize(x->dtype());
  const char* src = static_cast<const char*>(x->raw_data());
  char* dst = static_cast<char*>(z->raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(dst + (r * n + j) * es, src + (r * features + idx[j]) * es, es);
    }
  }
  return absl::OkStatus();
}

// ---- Binarizer ----
// Y = X > threshold ? 1 : 0, in X's dtype (NaN gives 0).

absl::Status CheckBinarizer(const ir::Node& node) {
  const ir::Attribute* a = node.attr("threshold");
  if (a != nullptr && a->type != ir::Attribute::Type::kFloat) {
    return InvalidNode(node, "attribute 'threshold' must be a float");
  }
  return absl::OkStatus();
}

absl::Status RunBinarizer(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const double threshold = node.GetFloat("threshold", 0.0f);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
  return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    T* dst = y->data<T>();
    for (int64_t i = 0; i < x->num_elements(); ++i) {
      dst[i] = Store<T>(static_cast<double>(src[i]) > threshold ? 1.0 : 0.0);
    }
    return absl::OkStatus();
  });
}

// ---- LabelEncoder ----

// A key or value: integer keys compare exactly as int64, floating ones as double (all NaNs are
// one key, as onnxruntime matches them).
struct Number {
  bool integer = false;
  int64_t i = 0;
  double f = 0;
};

// The keys, values and default of one LabelEncoder node, read from its attributes once.
struct LabelMap {
  bool integer_keys = false;
  DataType out_dtype = DataType::kUndefined;
  absl::flat_hash_map<int64_t, Number> by_int;
  absl::flat_hash_map<uint64_t, Number> by_float;  // bits of the double (NaN canonical)
  Number dflt;
};

uint64_t FloatKey(double v) {
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  if (v == 0) v = 0;  // -0.0 and 0.0 are one key
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Elements of a keys_* / values_* attribute as Numbers, with the dtype they stand for.
absl::StatusOr<std::pair<std::vector<Number>, DataType>> ReadNumbers(const ir::Node& node,
                                                                     const char* prefix,
                                                                     int* found) {
  std::vector<Number> out;
  DataType dt = DataType::kUndefined;
  *found = 0;
  const std::string p(prefix);
  if (node.has_attr(p + "_strings") || (p == "keys" && node.has_attr("classes_strings"))) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " unsupported dtype string: attribute '",
                     node.has_attr(p + "_strings") ? p + "_strings" : "classes_strings",
                     "' maps strings, and Kiln has no string tensors"));
  }
  if (const ir::Attribute* a = node.attr(p + "_int64s")) {
    ++*found;
    dt = DataType::kI64;
    for (int64_t v : a->ints) out.push_back(Number{true, v, static_cast<double>(v)});
  }
  if (const ir::Attribute* a = node.attr(p + "_floats")) {
    ++*found;
    dt = DataType::kF32;
    for (float v : a->floats) out.push_back(Number{false, 0, v});
  }
  if (const ir::Attribute* a = node.attr(p + "_tensor")) {
    ++*found;
    if (a->type != ir::Attribute::Type::kTensor) {
      return InvalidNode(node, "attribute '", p, "_tensor' must be a tensor");
    }
    dt = a->t.dtype();
    if (!IsFloating(dt) && !IsInteger(dt)) {
      return absl::UnimplementedError(absl::StrCat(node.Label(), " unsupported dtype ",
                                                   DataTypeOnnxName(dt), ": attribute '", p,
                                                   "_tensor'"));
    }
    for (int64_t e = 0; e < a->t.num_elements(); ++e) {
      out.push_back(Number{IsInteger(dt), IsInteger(dt) ? ir::ElementAsInt64(a->t, e) : 0,
                           ir::ElementAsDouble(a->t, e)});
    }
  }
  return std::make_pair(std::move(out), dt);
}

absl::StatusOr<LabelMap> ReadLabelMap(const ir::Node& node) {
  if (node.since_version < 2) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(),
                     " unsupported dtype string: LabelEncoder-1 maps strings to int64 or back, "
                     "and Kiln has no string tensors"));
  }
  int nk = 0, nv = 0;
  ASSIGN_OR_RETURN(auto keys, ReadNumbers(node, "keys", &nk));
  ASSIGN_OR_RETURN(auto values, ReadNumbers(node, "values", &nv));
  if (nk != 1 || nv != 1) {
    return InvalidNode(node, "needs exactly one keys_* and one values_* attribute, got ", nk,
                       " and ", nv);
  }
  if (keys.first.size() != values.first.size()) {
    return InvalidNode(node, "has ", keys.first.size(), " keys but ", values.first.size(),
                       " values");
  }
  LabelMap m;
  m.integer_keys = IsInteger(keys.second);
  m.out_dtype = values.second;
  const bool int_values = IsInteger(values.second);
  // Duplicate keys: the first mapping wins (as a map filled in order with emplace).
  for (size_t i = 0; i < keys.first.size(); ++i) {
    const Number& k = keys.first[i];
    if (m.integer_keys) {
      m.by_int.emplace(k.i, values.first[i]);
    } else {
      m.by_float.emplace(FloatKey(k.f), values.first[i]);
    }
  }
  if (const ir::Attribute* d = node.attr("default_tensor")) {
    if (d->type != ir::Attribute::Type::kTensor || d->t.num_elements() != 1 ||
        d->t.dtype() != values.second) {
      return InvalidNode(node,
                         "attribute 'default_tensor' must be one element of the values' "
                         "dtype ",
                         DataTypeOnnxName(values.second));
    }
    m.dflt = Number{int_values, int_values ? ir::ElementAsInt64(d->t, 0) : 0,
                    ir::ElementAsDouble(d->t, 0)};
  } else if (int_values) {
    const int64_t v = node.GetInt("default_int64", -1);
    m.dflt = Number{true, v, static_cast<double>(v)};
  } else {
    m.dflt = Number{false, 0, node.GetFloat("default_float", -0.0f)};
  }
  return m;
}

class LabelEncoderKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(LabelMap m, ReadLabelMap(node));
    return std::unique_ptr<Kernel>(new LabelEncoderKernel(node, std::move(m)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    if (IsInteger(x->dtype()) != map_.integer_keys ||
        !(IsInteger(x->dtype()) || IsFloating(x->dtype()))) {
      return InvalidNode(node_, "input X is ", DataTypeOnnxName(x->dtype()), " but the keys are ",
                         map_.integer_keys ? "integers" : "floating-point numbers");
    }
    // The values' dtype, or the one a reduced-precision build gave the output (float values).
    const DataType out_dtype = OutputDtype(node_, 0, map_.out_dtype);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, out_dtype, x->dims()));
    return DispatchAll(out_dtype, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T* dst = y->data<T>();
      for (int64_t e = 0; e < x->num_elements(); ++e) {
        const Number* v = &map_.dflt;
        if (map_.integer_keys) {
          auto it = map_.by_int.find(ir::ElementAsInt64(*x, e));
          if (it != map_.by_int.end()) v = &it->second;
        } else {
          auto it = map_.by_float.find(FloatKey(ir::ElementAsDouble(*x, e)));
          if (it != map_.by_float.end()) v = &it->second;
        }
        if constexpr (std::is_integral_v<T>) {
          dst[e] = static_cast<T>(v->integer ? v->i : static_cast<int64_t>(v->f));
        } else {
          dst[e] = Store<T>(v->f);
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  LabelEncoderKernel(const ir::Node& node, LabelMap m) : node_(node), map_(std::move(m)) {}
  const ir::Node& node_;
  LabelMap map_;
};

std::vector<DataType> LabelKeyTypes() {
  return {DataType::kI64, DataType::kI32, DataType::kI16, DataType::kF32,
          DataType::kF64, DataType::kF16, DataType::kBF16};
}

}  // namespace

void RegisterMl(Registry& r) {
  r.AddRef(ir::OpType::kArrayFeatureExtractor, AllTypes(),
           FunctionKernel<RunArrayFeatureExtractor>::Create);
  r.AddRef(ir::OpType::kBinarizer, NumericTypes(), CheckedFactory<CheckBinarizer, RunBinarizer>);
  r.AddRef(ir::OpType::kLabelEncoder, LabelKeyTypes(), &LabelEncoderKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
