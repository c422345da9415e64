// Build-time checks of operands fixed at build time (constant Reshape targets, TopK k, Resize
// scales and sizes, Expand shapes, TensorScatter) and the 1 TiB limit of one tensor
// (shape_inference_internal.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/import/shape_inference_internal.h"

namespace kiln::import::shape_internal {

// The largest tensor a static shape may describe: 2^40 bytes (1 TiB). Tensor::Allocate refuses
// anything larger (ir/tensor.cc), so such a tensor could never run; refusing it here turns a
// run-time failure (or a plan sized in terabytes) into a build error that names the node.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

// Why a tensor of `elements` elements (a count held as a double, so it never overflows; a
// negative one is no count at all) of `dtype` is too large, or an empty string.
std::string TooLarge(double elements, DataType dtype) {
  const double es = std::max<size_t>(DataTypeSize(dtype), 1);
  if (elements >= 0 && elements * es <= static_cast<double>(kMaxTensorBytes)) return "";
  return absl::StrCat(elements < 0 ? std::string("an invalid number of elements")
                                   : absl::StrCat(elements, " elements"),
                      " of ", DataTypeOnnxName(dtype), ", over the ", kMaxTensorBytes,
                      "-byte (1 TiB) limit of one tensor");
}

// Element count of static dims as a double (exact enough to compare with kMaxTensorBytes, and
// never overflowing), or -1 when a dim is negative.
double CountOf(const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    n *= static_cast<double>(d);
  }
  return n;
}

namespace {

absl::Status Invalid(const Node& n, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(n.Label(), " ", why));
}

// Reshape with a constant shape: each dim >= -1, at most one -1, a 0 copies an existing input
// dim, and with a static input the element counts agree (what the kernel would refuse at run
// time, refused at build time instead).
absl::Status CheckReshape(const Node& n) {
  auto target = ConstInts(n, 1);
  if (!target) return absl::OkStatus();
  const Value* x = In(n, 0);
  const bool allowzero = n.GetInt("allowzero", 0) != 0;
  const std::string shape = absl::StrCat("[", absl::StrJoin(*target, ","), "]");
  int infer = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t d = (*target)[i];
    if (d < -1) return Invalid(n, absl::StrCat("shape ", shape, " has dim ", d, " (< -1)"));
    if (d == -1) {
      if (infer >= 0) return Invalid(n, absl::StrCat("shape ", shape, " has more than one -1"));
      infer = static_cast<int>(i);
    }
    if (d == 0 && !allowzero && x && x->shape.rank_known &&
        i >= static_cast<size_t>(x->shape.rank())) {
      return Invalid(n, absl::StrCat("shape ", shape, " copies dim ", i, " (0) of a rank-",
                                     x->shape.rank(), " input"));
    }
  }
  auto in = StaticDimsOf(x);
  if (!in) return absl::OkStatus();
  const int64_t total = ir::NumElementsOf(*in);
  int64_t known = 1;
  for (size_t i = 0; i < target->size(); ++i) {
    if (static_cast<int>(i) == infer) continue;
    const int64_t d = (*target)[i] == 0 && !allowzero ? (*in)[i] : (*target)[i];
    known = MulDims(known, d);
  }
  // known < 0: the product of the given dims overflowed, so it is no element count. With a -1,
  // a zero product leaves the -1 undetermined (an empty input): the kernel decides.
  bool fits;
  if (infer < 0) {
    fits = known == total;
  } else if (known > 0) {
    fits = total % known == 0;
  } else {
    fits = known == 0 || total == 0;
  }
  if (total >= 0 && !fits) {
    return Invalid(n, absl::StrCat("cannot reshape ", x->shape.ToString(), " (", total,
                                   " elements) to ", shape));
  }
  return absl::OkStatus();
}

// TopK: k (attribute before opset 10, else a constant input of one element) in [0, size of the
// axis], the axis within the rank.
absl::Status CheckTopK(const Node& n) {
  std::optional<int64_t> k;
  if (n.since_version < 10) {
    if (n.has_attr("k")) k = n.GetInt("k", 0);
  } else if (auto kv = ConstInts(n, 1)) {
    if (kv->size() != 1) {
      return Invalid(n, absl::StrCat("k must hold one value, has ", kv->size()));
    }
    k = (*kv)[0];
  }
  if (k && *k < 0) return Invalid(n, absl::StrCat("k = ", *k, " is negative"));
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return absl::OkStatus();
  const int64_t axis_attr = n.GetInt("axis", -1);
  auto axis = NormAxis(axis_attr, x->shape.rank());
  if (!axis) {
    return Invalid(n,
                   absl::StrCat("axis ", axis_attr, " is out of range for rank ", x->shape.rank()));
  }
  const Dim& d = x->shape.dims[*axis];
  if (k && d.is_static() && *k > d.value) {
    return Invalid(n, absl::StrCat("k = ", *k, " is larger than axis ", *axis, " of size ", d.value,
                                   " (input ", x->shape.ToString(), ")"));
  }
  return absl::OkStatus();
}

// Resize / Upsample with constant scales or sizes: every scale positive and finite, every size
// >= 0, one per resized axis, and the output within the tensor size limit.
absl::Status CheckResize(const Node& n, DataType out_dtype) {
  const bool legacy = n.op == OpType::kUpsample || n.since_version < 11;
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
  if (n.op == OpType::kUpsample && n.since_version < 9) {
    if (n.has_attr("scales")) {
      std::vector<float> f = n.GetFloats("scales");
      scales = std::vector<double>(f.begin(), f.end());
    }
  } else if (legacy) {
    scales = ConstFloats(n, 1);
  } else {
    scales = ConstFloats(n, 2);
    sizes = ConstInts(n, 3);
  }
  if (scales && scales->empty()) scales.reset();  // an empty input means "not given"
  if (sizes && sizes->empty()) sizes.reset();
  if (!scales && !sizes) return absl::OkStatus();
  const Value* x = In(n, 0);
  const bool has_axes = !legacy && n.has_attr("axes");
  const std::vector<int64_t> axes_attr = n.GetInts("axes");
  const int rank = x && x->shape.rank_known ? x->shape.rank() : -1;
  const size_t count = scales ? scales->size() : sizes->size();
  const char* what = scales ? "scales" : "sizes";
  if (has_axes ? count != axes_attr.size() : rank >= 0 && count != static_cast<size_t>(rank)) {
    return Invalid(n,
                   absl::StrCat(what, " has ", count, " values for ",
                                has_axes ? axes_attr.size() : static_cast<size_t>(rank), " axes"));
  }
  for (size_t i = 0; i < count; ++i) {
    if (scales && !((*scales)[i] > 0 && std::isfinite((*scales)[i]))) {
      return Invalid(n, absl::StrCat("scales must be positive and finite, got ", (*scales)[i],
                                     " at index ", i));
    }
    if (sizes && (*sizes)[i] < 0) {
      return Invalid(n, absl::StrCat("sizes must be >= 0, got ", (*sizes)[i], " at index ", i));
    }
  }
  // The output's element count, from the static input dims (the unresized ones stay).
  auto in = StaticDimsOf(x);
  if (!in) return absl::OkStatus();
  std::vector<double> out(in->begin(), in->end());
  for (size_t i = 0; i < count; ++i) {
    auto axis = has_axes ? NormAxis(axes_attr[i], rank) : std::optional<int>(static_cast<int>(i));
    if (!axis) return Invalid(n, absl::StrCat("axis ", axes_attr[i], " is out of range"));
    out[*axis] =
        scales ? std::floor((*in)[*axis] * (*scales)[i]) : static_cast<double>((*sizes)[i]);
  }
  double elements = 1;
  for (double d : out) elements *= d;
  const std::string too_large = TooLarge(elements, out_dtype);
  if (!too_large.empty()) return Invalid(n, absl::StrCat("output would hold ", too_large));
  return absl::OkStatus();
}

// Expand with a constant shape: every dim >= 0, broadcast-compatible with the input's static
// dims, and the output within the tensor size limit.
absl::Status CheckExpand(const Node& n, DataType out_dtype) {
  auto shape = ConstInts(n, 1);
  const Value* x = In(n, 0);
  if (!shape || !x || !x->shape.rank_known) return absl::OkStatus();
  const std::string target = absl::StrCat("[", absl::StrJoin(*shape, ","), "]");
  for (int64_t d : *shape) {
    if (d < 0) return Invalid(n, absl::StrCat("shape ", target, " has a negative dim ", d));
  }
  const size_t rank = std::max(shape->size(), static_cast<size_t>(x->shape.rank()));
  double elements = 1;
  bool exact = true;  // false when an output dim is a symbolic input dim (maybe 0)
  for (size_t i = 0; i < rank; ++i) {
    const size_t si = rank - shape->size(), xi = rank - x->shape.rank();
    const int64_t s = i >= si ? (*shape)[i - si] : 1;
    const Dim xd = i >= xi ? x->shape.dims[i - xi] : Dim::Static(1);
    if (xd.is_static() && s != 1 && xd.value != 1 && s != xd.value) {
      return Invalid(n, absl::StrCat("cannot expand ", x->shape.ToString(), " to ", target));
    }
    // A dim of 1 in the shape takes the input's; any other value is the output's dim (the
    // input's, symbolic or not, must then be 1 or the same).
    if (s == 1 && !xd.is_static()) exact = false;
    elements *= static_cast<double>(s == 1 && xd.is_static() ? xd.value : s);
  }
  if (!exact) return absl::OkStatus();
  const std::string too_large = TooLarge(elements, out_dtype);
  if (!too_large.empty()) return Invalid(n, absl::StrCat("output would hold ", too_large));
  return absl::OkStatus();
}

// TensorScatter: a known mode; an axis within the rank and not 0 (the batch); update of the
// cache's dtype and rank, its dims (where static) equal to the cache's but along the axis, where
// it is at most the cache's; write_indices 1-D of the batch size.
absl::Status CheckTensorScatter(const Node& n) {
  const std::string mode = n.GetString("mode", "linear");
  if (mode != "linear" && mode != "circular") {
    return Invalid(n, absl::StrCat("mode must be 'linear' or 'circular', got '", mode, "'"));
  }
  const Value* past = In(n, 0);
  const Value* update = In(n, 1);
  if (past && update && past->dtype != DataType::kUndefined &&
      update->dtype != DataType::kUndefined && past->dtype != update->dtype) {
    return Invalid(n, absl::StrCat("update is ", DataTypeOnnxName(update->dtype),
                                   " but past_cache is ", DataTypeOnnxName(past->dtype)));
  }
  if (!past || !past->shape.rank_known) return absl::OkStatus();
  const int rank = past->shape.rank();
  const int64_t axis_attr = n.GetInt("axis", -2);
  auto axis = NormAxis(axis_attr, rank);
  if (!axis || *axis == 0) {
    return Invalid(
        n, absl::StrCat("axis ", axis_attr, " is ", axis ? "the batch axis 0" : "out of range",
                        " for past_cache ", past->shape.ToString()));
  }
  if (update && update->shape.rank_known) {
    if (update->shape.rank() != rank) {
      return Invalid(n, absl::StrCat("update ", update->shape.ToString(), " and past_cache ",
                                     past->shape.ToString(), " differ in rank"));
    }
    for (int i = 0; i < rank; ++i) {
      const Dim& p = past->shape.dims[i];
      const Dim& u = update->shape.dims[i];
      if (!p.is_static() || !u.is_static()) continue;
      if (i == *axis ? u.value > p.value : u.value != p.value) {
        return Invalid(n, absl::StrCat("update ", update->shape.ToString(),
                                       " does not fit past_cache ", past->shape.ToString(),
                                       i == *axis ? " along the sequence axis " : " at dim ", i));
      }
    }
  }
  const Value* wi = In(n, 2);
  if (wi && wi->shape.rank_known) {
    const Dim& b = past->shape.dims[0];
    if (wi->shape.rank() != 1 ||
        (b.is_static() && wi->shape.dims[0].is_static() && wi->shape.dims[0].value != b.value)) {
      return Invalid(n, absl::StrCat("write_indices ", wi->shape.ToString(),
                                     " must be 1-D of the batch size (past_cache ",
                                     past->shape.ToString(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Operands fixed at build time that make the op fail whatever the inputs: the error the kernel
// would give at run time, given at build time. `out_dtype`: the dtype of output 0.
absl::Status CheckStaticOperands(const Node& n, DataType out_dtype) {
  switch (n.op) {
    case OpType::kReshape:
      return CheckReshape(n);
    case OpType::kTopK:
      return CheckTopK(n);
    case OpType::kResize:
    case OpType::kUpsample:
      return CheckResize(n, out_dtype);
    case OpType::kExpand:
      return CheckExpand(n, out_dtype);
    case OpType::kTensorScatter:
      return CheckTensorScatter(n);
    default:
      return absl::OkStatus();
  }
}

}  // namespace kiln::import::shape_internal
