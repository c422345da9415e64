// Reference kernels of the indexing family, part 1: Gather, GatherElements, GatherND,
// ScatterElements and ScatterND. The generators (Shape, Constant, Range, ...) live in
// indexing_generators.cc and QuantizeLinear/DequantizeLinear in indexing_quant.cc;
// RegisterIndexing here registers all three parts.
//
// Every gather and scatter is reduced to the same two steps: turn the index tensor into a list of
// element offsets into `data` (one per contiguous chunk of `chunk` elements), checking every index
// once, then move chunks. Data movement is by bytes (dtype-agnostic); only scatters with a
// reduction dispatch on the element type.
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

// Defined in indexing_generators.cc and indexing_quant.cc.
void RegisterIndexingGenerators(Registry& r);
void RegisterIndexingQuant(Registry& r);

namespace {

// Reads an int32/int64 index tensor of any rank into int64s.
absl::StatusOr<std::vector<int64_t>> ReadIndices(const ir::Node& node, const ir::Tensor& t) {
  if (t.dtype() != DataType::kI64 && t.dtype() != DataType::kI32) {
    return InvalidNode(node, "indices must be int32 or int64, got ", DataTypeOnnxName(t.dtype()));
  }
  std::vector<int64_t> v(t.num_elements());
  if (t.dtype() == DataType::kI64) {
    if (!v.empty()) std::memcpy(v.data(), t.raw_data(), v.size() * sizeof(int64_t));
  } else {
    const int32_t* p = t.data<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

// Maps an index in [-n, n) to [0, n); anything else is an error naming the node.
absl::StatusOr<int64_t> WrapIndex(const ir::Node& node, int64_t i, int64_t n) {
  int64_t w = i < 0 ? i + n : i;
  if (w < 0 || w >= n) {
    return InvalidNode(node, "index ", i, " is out of range for a dimension of size ", n);
  }
  return w;
}

// When the rank of input `i` is known at build time, checks attribute `axis` against it.
absl::Status CheckAxisAttr(const ir::Node& node, int input, int64_t dflt) {
  const ir::Value* v = node.input(input);
  if (v == nullptr || !v->shape.rank_known) return absl::OkStatus();
  return NormalizeAxis(node, node.GetInt("axis", dflt), v->shape.rank()).status();
}

// Copies chunk c (`chunk` elements) of `src` starting at element offsets[c] to position c of dst.
void GatherChunks(const ir::Tensor& src, const std::vector<int64_t>& offsets, int64_t chunk,
                  ir::Tensor& dst) {
  const size_t esz = DataTypeSize(src.dtype());
  const size_t bytes = static_cast<size_t>(chunk) * esz;
  if (bytes == 0) return;
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  for (int64_t off : offsets) {
    std::memcpy(d, s + off * esz, bytes);
    d += bytes;
  }
}

// Offsets into `data` for GatherElements/ScatterElements: element e of `indices` (same rank as
// data, each non-axis dim no larger than data's) addresses data at its own coordinates with the
// axis coordinate replaced by the index value.
absl::StatusOr<std::vector<int64_t>> ElementOffsets(const ir::Node& node, const ir::Tensor& data,
                                                    const ir::Tensor& indices, int axis) {
  const int r = data.rank();
  if (indices.rank() != r) {
    return InvalidNode(node, "indices rank ", indices.rank(), " must equal data rank ", r);
  }
  const std::vector<int64_t>& idims = indices.dims();
  for (int d = 0; d < r; ++d) {
    if (d != axis && idims[d] > data.dim(d)) {
      return InvalidNode(node, "indices shape ", ir::DimsToString(idims), " exceeds data shape ",
                         ir::DimsToString(data.dims()), " on axis ", d);
    }
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(node, indices));
  const std::vector<int64_t> ds = Strides(data.dims());
  const int64_t axis_dim = data.dim(axis);
  // Odometer over the index coordinates; `base` is the data offset of every coordinate but the
  // axis one, kept incrementally so the loop does no per-element multiplication chains.
  std::vector<int64_t> ctr(r, 0);
  int64_t base = 0;
  for (size_t e = 0; e < idx.size(); ++e) {
    ASSIGN_OR_RETURN(int64_t k, WrapIndex(node, idx[e], axis_dim));
    idx[e] = base + k * ds[axis];
    for (int d = r - 1; d >= 0; --d) {
      if (++ctr[d] < idims[d]) {
        if (d != axis) base += ds[d];
        break;
      }
      if (d != axis) base -= (idims[d] - 1) * ds[d];
      ctr[d] = 0;
    }
  }
  return idx;
}

// Offsets for GatherND/ScatterND: each length-k tuple of the last indices axis addresses a slice
// of data[b + k:] inside batch entry `batch` of the first `b` dims. `chunk` receives the slice
// size in elements.
absl::StatusOr<std::vector<int64_t>> SliceOffsets(const ir::Node& node, const ir::Tensor& data,
                                                  const ir::Tensor& indices, int b,
                                                  int64_t* chunk) {
  const int r = data.rank();
  const int q = indices.rank();
  if (r < 1 || q < 1) return InvalidNode(node, "data and indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r) {
    return InvalidNode(node, "batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))");
  }
  const std::vector<int64_t>& idims = indices.dims();
  for (int d = 0; d < b; ++d) {
    if (idims[d] != data.dim(d)) {
      return InvalidNode(node, "batch dims of indices ", ir::DimsToString(idims), " and data ",
                         ir::DimsToString(data.dims()), " differ");
    }
  }
  const int64_t k = idims[q - 1];
  if (k < 1 || k > r - b) {
    return InvalidNode(node, "last dim of indices is ", k, ", must be in [1, ", r - b, "]");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(node, indices));
  const std::vector<int64_t> ds = Strides(data.dims());
  const int64_t batches = Product(data.dims(), 0, b);
  const int64_t per_batch = Product(idims, b, q - 1);
  const int64_t batch_stride = b > 0 ? ds[b - 1] : 0;
  *chunk = Product(data.dims(), b + k, r);
  std::vector<int64_t> offsets(batches * per_batch);
  const int64_t* t = idx.data();
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t n = 0; n < per_batch; ++n, t += k) {
      int64_t off = bi * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        ASSIGN_OR_RETURN(int64_t v, WrapIndex(node, t[j], data.dim(b + j)));
        off += v * ds[b + j];
      }
      offsets[bi * per_batch + n] = off;
    }
  }
  return offsets;
}

// ---- Gather ---------------------------------------------------------------------------------

absl::Status CheckGather(const ir::Node& node) { return CheckAxisAttr(node, 0, 0); }

absl::Status RunGather(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  if (data->rank() < 1) return InvalidNode(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, ReadIndices(node, *indices));
  const std::vector<int64_t>& dd = data->dims();
  std::vector<int64_t> out_dims(dd.begin(), dd.begin() + axis);
  out_dims.insert(out_dims.end(), indices->dims().begin(), indices->dims().end());
  out_dims.insert(out_dims.end(), dd.begin() + axis + 1, dd.end());
  const int64_t n = dd[axis];
  for (int64_t& i : idx) {
    ASSIGN_OR_RETURN(i, WrapIndex(node, i, n));
  }
  const int64_t outer = Product(dd, 0, axis);
  const int64_t inner = Product(dd, axis + 1, dd.size());
  std::vector<int64_t> offsets;
  offsets.reserve(outer * idx.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i : idx) offsets.push_back((o * n + i) * inner);
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, data->dtype(), std::move(out_dims)));
  GatherChunks(*data, offsets, inner, *out);
  return absl::OkStatus();
}

// ---- GatherElements -------------------------------------------------------------------------

absl::Status RunGatherElements(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  if (data->rank() < 1) return InvalidNode(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(node, *data, *indices, axis));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, data->dtype(), indices->dims()));
  GatherChunks(*data, offsets, 1, *out);
  return absl::OkStatus();
}

// ---- GatherND -------------------------------------------------------------------------------

absl::Status CheckGatherND(const ir::Node& node) {
  if (node.GetInt("batch_dims", 0) < 0) {
    return InvalidNode(node, "batch_dims must be >= 0, got ", node.GetInt("batch_dims", 0));
  }
  if (node.since_version < 12 && node.GetInt("batch_dims", 0) != 0) {
    return InvalidNode(node, "batch_dims is not defined before opset 12");
  }
  return absl::OkStatus();
}

absl::Status RunGatherND(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  const int b = static_cast<int>(node.GetInt("batch_dims", 0));
  int64_t chunk = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SliceOffsets(node, *data, *indices, b, &chunk));
  const int64_t k = indices->dims().back();
  std::vector<int64_t> out_dims(indices->dims().begin(), indices->dims().end() - 1);
  out_dims.insert(out_dims.end(), data->dims().begin() + b + k, data->dims().end());
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, data->dtype(), std::move(out_dims)));
  GatherChunks(*data, offsets, chunk, *out);
  return absl::OkStatus();
}

// ---- ScatterElements / ScatterND ------------------------------------------------------------

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

// The `reduction` attribute: none before opset 16, add/mul from 16, max/min from 18.
absl::StatusOr<Reduction> ParseReduction(const ir::Node& node) {
  const std::string s = node.GetString("reduction", "none");
  if (s == "none") return Reduction::kNone;
  if (node.since_version < 16) {
    return InvalidNode(node, "reduction '", s, "' is not defined before opset 16");
  }
  if (s == "add") return Reduction::kAdd;
  if (s == "mul") return Reduction::kMul;
  if (s == "max" || s == "min") {
    if (node.since_version < 18) {
      return InvalidNode(node, "reduction '", s, "' is not defined before opset 18");
    }
    return s == "max" ? Reduction::kMax : Reduction::kMin;
  }
  return InvalidNode(node, "unknown reduction '", s, "'");
}

// Integer arithmetic wraps like ONNX (two's complement) instead of overflowing signed types:
// computed in an unsigned type at least as wide as `unsigned int`, so no promotion to int.
template <typename A>
A AddOp(A a, A b) {
  if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
    using W = std::common_type_t<std::make_unsigned_t<A>, unsigned int>;
    return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
  } else if constexpr (std::is_same_v<A, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}
template <typename A>
A MulOp(A a, A b) {
  if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) {
    using W = std::common_type_t<std::make_unsigned_t<A>, unsigned int>;
    return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
  } else if constexpr (std::is_same_v<A, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}
// max/min propagate NaN (like numpy's maximum/minimum); `b != b` is false for integers.
template <typename A>
A MaxOp(A a, A b) {
  return (b > a || b != b) ? b : a;
}
template <typename A>
A MinOp(A a, A b) {
  return (b < a || b != b) ? b : a;
}

// out = data; then for each chunk c, out[offsets[c] + l] = op(out[...], updates[c * chunk + l])
// in index order. The accumulation runs in Compute<T> over the whole tensor and each output is
// stored once, so fp16/bf16 with repeated indices round once (DESIGN.md §5).
template <typename T, typename Op>
void ScatterReduce(const ir::Tensor& data, const ir::Tensor& updates,
                   const std::vector<int64_t>& offsets, int64_t chunk, Op op, ir::Tensor& out) {
  using C = Compute<T>;
  const int64_t n = data.num_elements();
  const T* d = data.data<T>();
  const T* u = updates.data<T>();
  std::unique_ptr<C[]> work(new C[n]);
  for (int64_t i = 0; i < n; ++i) work[i] = Load<T>(d[i]);
  for (size_t c = 0; c < offsets.size(); ++c) {
    C* w = work.get() + offsets[c];
    const T* uc = u + c * chunk;
    for (int64_t l = 0; l < chunk; ++l) w[l] = op(w[l], Load<T>(uc[l]));
  }
  T* o = out.data<T>();
  for (int64_t i = 0; i < n; ++i) o[i] = Store<T>(work[i]);
}

absl::Status ApplyScatter(const ir::Node& node, const ir::Tensor& data, const ir::Tensor& updates,
                          const std::vector<int64_t>& offsets, int64_t chunk, KernelContext& ctx) {
  if (updates.dtype() != data.dtype()) {
    return InvalidNode(node, "updates dtype ", DataTypeOnnxName(updates.dtype()),
                       " differs from data dtype ", DataTypeOnnxName(data.dtype()));
  }
  ASSIGN_OR_RETURN(Reduction red, ParseReduction(node));
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, data.dtype(), data.dims()));
  if (red == Reduction::kNone) {
    // Plain assignment is data movement: bytes, exact for every dtype; later updates win.
    if (data.byte_size() > 0) std::memcpy(out->raw_data(), data.raw_data(), data.byte_size());
    const size_t esz = DataTypeSize(data.dtype());
    const size_t bytes = static_cast<size_t>(chunk) * esz;
    if (bytes == 0) return absl::OkStatus();
    char* o = static_cast<char*>(out->raw_data());
    const char* u = static_cast<const char*>(updates.raw_data());
    for (size_t c = 0; c < offsets.size(); ++c) {
      std::memcpy(o + offsets[c] * esz, u + c * bytes, bytes);
    }
    return absl::OkStatus();
  }
  return DispatchAll(data.dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    switch (red) {
      case Reduction::kAdd:
        ScatterReduce<T>(data, updates, offsets, chunk, AddOp<C>, *out);
        break;
      case Reduction::kMul:
        ScatterReduce<T>(data, updates, offsets, chunk, MulOp<C>, *out);
        break;
      case Reduction::kMax:
        ScatterReduce<T>(data, updates, offsets, chunk, MaxOp<C>, *out);
        break;
      case Reduction::kMin:
        ScatterReduce<T>(data, updates, offsets, chunk, MinOp<C>, *out);
        break;
      case Reduction::kNone:
        break;
    }
    return absl::OkStatus();
  });
}

absl::Status CheckScatterElements(const ir::Node& node) {
  RETURN_IF_ERROR(ParseReduction(node).status());
  return CheckAxisAttr(node, 0, 0);
}

absl::Status RunScatterElements(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* updates, RequireInput(node, ctx, 2));
  if (data->rank() < 1) return InvalidNode(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  if (updates->dims() != indices->dims()) {
    return InvalidNode(node, "updates shape ", ir::DimsToString(updates->dims()),
                       " must equal indices shape ", ir::DimsToString(indices->dims()));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(node, *data, *indices, axis));
  return ApplyScatter(node, *data, *updates, offsets, 1, ctx);
}

absl::Status CheckScatterND(const ir::Node& node) { return ParseReduction(node).status(); }

absl::Status RunScatterND(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* data, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* indices, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* updates, RequireInput(node, ctx, 2));
  int64_t chunk = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets,
                   SliceOffsets(node, *data, *indices, /*b=*/0, &chunk));
  // updates must have shape indices.shape[:-1] + data.shape[k:].
  const int64_t k = indices->dims().back();
  std::vector<int64_t> want(indices->dims().begin(), indices->dims().end() - 1);
  want.insert(want.end(), data->dims().begin() + k, data->dims().end());
  if (updates->dims() != want) {
    return InvalidNode(node, "updates shape ", ir::DimsToString(updates->dims()), " must be ",
                       ir::DimsToString(want));
  }
  return ApplyScatter(node, *data, *updates, offsets, chunk, ctx);
}

}  // namespace

void RegisterIndexing(Registry& r) {
  r.AddRef(ir::OpType::kGather, AllTypes(), CheckedFactory<CheckGather, RunGather>);
  r.AddRef(ir::OpType::kGatherElements, AllTypes(), CheckedFactory<CheckGather, RunGatherElements>);
  r.AddRef(ir::OpType::kGatherND, AllTypes(), CheckedFactory<CheckGatherND, RunGatherND>);
  r.AddRef(ir::OpType::kScatterElements, AllTypes(),
           CheckedFactory<CheckScatterElements, RunScatterElements>);
  r.AddRef(ir::OpType::kScatterND, AllTypes(), CheckedFactory<CheckScatterND, RunScatterND>);
  RegisterIndexingGenerators(r);
  RegisterIndexingQuant(r);
}

}  // namespace kiln::kernels::cpu::ref
