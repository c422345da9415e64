// Reference kernels of three default-domain ops with no family of their own: Det (the
// determinant of each square matrix of the last two axes), Unique (the distinct elements, or
// slices along an axis, with first-occurrence indices, inverse indices and counts) and Scatter
// (the opset 9-10 op, deprecated at 11: ScatterElements without a reduction).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---- Det ----
// LU decomposition with partial pivoting in double; a singular matrix gives 0 (a zero pivot),
// a 0x0 matrix 1 (the empty product).

absl::Status RunDet(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const int r = x->rank();
  if (r < 2 || x->dim(r - 1) != x->dim(r - 2)) {
    return InvalidNode(node, "X must be [*, M, M] (square matrices in the last two axes), got ",
                       ir::DimsToString(x->dims()));
  }
  const int64_t m = x->dim(r - 1);
  std::vector<int64_t> out_dims(x->dims().begin(), x->dims().end() - 2);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
  const int64_t batch = Product(out_dims, 0, out_dims.size());
  return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    std::vector<double> a(m * m);
    for (int64_t b = 0; b < batch; ++b) {
      const T* src = x->data<T>() + b * m * m;
      for (int64_t i = 0; i < m * m; ++i) a[i] = static_cast<double>(src[i]);
      double det = 1;
      for (int64_t c = 0; c < m && det != 0; ++c) {
        int64_t p = c;
        for (int64_t i = c + 1; i < m; ++i) {
          if (std::fabs(a[i * m + c]) > std::fabs(a[p * m + c])) p = i;
        }
        if (a[p * m + c] == 0) {
          det = 0;
          break;
        }
        if (p != c) {
          for (int64_t j = 0; j < m; ++j) std::swap(a[p * m + j], a[c * m + j]);
          det = -det;
        }
        const double pivot = a[c * m + c];
        det *= pivot;
        for (int64_t i = c + 1; i < m; ++i) {
          const double f = a[i * m + c] / pivot;
          for (int64_t j = c + 1; j < m; ++j) a[i * m + j] -= f * a[c * m + j];
        }
      }
      y->data<T>()[b] = Store<T>(det);
    }
    return absl::OkStatus();
  });
}

// ---- Unique ----

// Three-way comparison of two elements: NaNs equal each other and sort after every number
// (numpy's np.unique, which the ONNX reference calls).
template <typename C>
int CompareElements(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

absl::Status CheckUnique(const ir::Node& node) {
  const ir::Attribute* s = node.attr("sorted");
  if (s != nullptr && (s->type != ir::Attribute::Type::kInt || (s->i != 0 && s->i != 1))) {
    return InvalidNode(node, "attribute 'sorted' must be 0 or 1");
  }
  return absl::OkStatus();
}

absl::Status RunUnique(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  const bool sorted = node.GetInt("sorted", 1) != 0;
  // The slices compared: without an axis every element; with one, [outer, slices, inner] views.
  const bool has_axis = node.has_attr("axis");
  int axis = 0;
  int64_t outer = 1, slices = x->num_elements(), inner = 1;
  if (has_axis) {
    if (x->rank() < 1) return InvalidNode(node, "axis is given but X is a scalar");
    ASSIGN_OR_RETURN(axis, NormalizeAxis(node, node.GetInt("axis", 0), x->rank()));
    outer = Product(x->dims(), 0, axis);
    slices = x->dim(axis);
    inner = Product(x->dims(), axis + 1, x->rank());
  }
  const int64_t stride = slices * inner;  // elements between the same slice of two outer rows
  return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    auto compare = [&](int64_t a, int64_t b) {
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const int c = CompareElements(Load(src[o * stride + a * inner + i]),
                                        Load(src[o * stride + b * inner + i]));
          if (c != 0) return c;
        }
      }
      return 0;
    };
    // Slices sorted, equal ones in input order: each run of equal slices is one unique value,
    // first occurring at the run's first slice.
    std::vector<int64_t> order(slices);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
    std::vector<int64_t> first, counts, group_of(slices);
    for (int64_t k = 0; k < slices; ++k) {
      if (k == 0 || compare(order[k - 1], order[k]) != 0) {
        first.push_back(order[k]);
        counts.push_back(0);
      }
      group_of[order[k]] = static_cast<int64_t>(first.size()) - 1;
      ++counts.back();
    }
    const int64_t u = static_cast<int64_t>(first.size());
    // The output position of each group: sorted order, or order of first occurrence.
    std::vector<int64_t> position(u);
    std::iota(position.begin(), position.end(), 0);
    std::vector<int64_t> groups(u);  // groups in output order
    std::iota(groups.begin(), groups.end(), 0);
    if (!sorted) {
      std::sort(groups.begin(), groups.end(),
                [&](int64_t a, int64_t b) { return first[a] < first[b]; });
      for (int64_t k = 0; k < u; ++k) position[groups[k]] = k;
    }
    std::vector<int64_t> y_dims = {u};
    if (has_axis) {
      y_dims = x->dims();
      y_dims[axis] = u;
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), y_dims));
    T* dst = y->data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < u; ++k) {
        const T* from = src + o * stride + first[groups[k]] * inner;
        std::copy(from, from + inner, dst + (o * u + k) * inner);
      }
    }
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(ir::Tensor * t, ctx.output(1, DataType::kI64, {u}));
      for (int64_t k = 0; k < u; ++k) t->data<int64_t>()[k] = first[groups[k]];
    }
    if (ctx.num_outputs() > 2 && ctx.output_requested(2)) {
      ASSIGN_OR_RETURN(ir::Tensor * t, ctx.output(2, DataType::kI64, {slices}));
      for (int64_t s = 0; s < slices; ++s) t->data<int64_t>()[s] = position[group_of[s]];
    }
    if (ctx.num_outputs() > 3 && ctx.output_requested(3)) {
      ASSIGN_OR_RETURN(ir::Tensor * t, ctx.output(3, DataType::kI64, {u}));
      for (int64_t k = 0; k < u; ++k) t->data<int64_t>()[k] = counts[groups[k]];
    }
    return absl::OkStatus();
  });
}

// ---- Scatter (opset 9-10) ----
// output = data; output[indices[e] along axis, the other coordinates of e] = updates[e], in
// element order (a repeated index keeps the last update).

absl::Status CheckScatter(const ir::Node& node) {
  const ir::Attribute* a = node.attr("axis");
  if (a != nullptr && a->type != ir::Attribute::Type::kInt) {
    return InvalidNode(node, "attribute 'axis' must be an int");
  }
  return absl::OkStatus();
}

absl::Status RunScatter(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* updates, RequireInput(node, ctx, 2));
  const int r = data->rank();
  if (r < 1) return InvalidNode(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), r));
  if (indices->dtype() != DataType::kI64 && indices->dtype() != DataType::kI32) {
    return InvalidNode(node, "indices must be int32 or int64, got ",
                       DataTypeOnnxName(indices->dtype()));
  }
  if (updates->dtype() != data->dtype()) {
    return InvalidNode(node, "updates are ", DataTypeOnnxName(updates->dtype()), " but data is ",
                       DataTypeOnnxName(data->dtype()));
  }
  if (indices->rank() != r || updates->dims() != indices->dims()) {
    return InvalidNode(node, "indices ", ir::DimsToString(indices->dims()), " and updates ",
                       ir::DimsToString(updates->dims()), " must have one shape of data's rank ",
                       r);
  }
  for (int d = 0; d < r; ++d) {
    if (d != axis && indices->dim(d) > data->dim(d)) {
      return InvalidNode(node, "indices ", ir::DimsToString(indices->dims()), " exceed data ",
                         ir::DimsToString(data->dims()), " on axis ", d);
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, data->dtype(), data->dims()));
  if (data->byte_size() > 0 && out->raw_data() != data->raw_data()) {
    ParallelCopy(out->raw_data(), data->raw_data(), data->byte_size());
  }
  const std::vector<int64_t> ds = Strides(data->dims());
  const std::vector<int64_t>& idims = indices->dims();
  const size_t es = DataTypeSize(data->dtype());
  const char* upd = static_cast<const char*>(updates->raw_data());
  char* dst = static_cast<char*>(out->raw_data());
  const int64_t axis_dim = data->dim(axis);
  std::vector<int64_t> ctr(r, 0);
  for (int64_t e = 0; e < indices->num_elements(); ++e) {
    int64_t k = ir::ElementAsInt64(*indices, e);
    if (k < -axis_dim || k >= axis_dim) {
      return InvalidNode(node, "index ", k, " (element ", e,
                         " of indices) is out of range for "
                         "axis ",
                         axis, " of size ", axis_dim);
    }
    if (k < 0) k += axis_dim;
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += (d == axis ? k : ctr[d]) * ds[d];
    std::memcpy(dst + off * es, upd + e * es, es);
    for (int d = r - 1; d >= 0; --d) {
      if (++ctr[d] < idims[d]) break;
      ctr[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgUnique(Registry& r) {
  r.AddRef(ir::OpType::kDet, FloatTypes(), FunctionKernel<RunDet>::Create);
  r.AddRef(ir::OpType::kUnique, AllTypes(), CheckedFactory<CheckUnique, RunUnique>);
  r.AddRef(ir::OpType::kScatter, AllTypes(), CheckedFactory<CheckScatter, RunScatter>);
}

}  // namespace kiln::kernels::cpu::ref
