#include "engine/kernels/cpu/ref/common.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::ref {

absl::StatusOr<int> NormalizeAxis(const ir::Node& node, int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max(rank, 1)) {
    return InvalidNode(node, "axis ", axis, " is out of range for rank ", rank);
  }
  return static_cast<int>(a);
}

absl::StatusOr<std::vector<int64_t>> ReadInts(const ir::Node& node, const ir::Tensor& t,
                                              const char* what) {
  if (t.dtype() != DataType::kI64 && t.dtype() != DataType::kI32) {
    return InvalidNode(node, what, " must be int64 or int32, got ", DataTypeOnnxName(t.dtype()));
  }
  if (t.rank() > 1) return InvalidNode(node, what, " must be 0-D or 1-D, got rank ", t.rank());
  std::vector<int64_t> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = ir::ElementAsInt64(t, i);
  return v;
}

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const ir::Node& node,
                                                     const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      return InvalidNode(node, "shapes ", ir::DimsToString(a), " and ", ir::DimsToString(b),
                         " cannot be broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

DataType OutputDtype(const ir::Node& node, int k, DataType fallback) {
  if (k < static_cast<int>(node.outputs.size()) && node.outputs[k] != nullptr &&
      node.outputs[k]->dtype != DataType::kUndefined) {
    return node.outputs[k]->dtype;
  }
  return fallback;
}

void ParallelCopy(void* dst, const void* src, int64_t bytes) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  ParallelFor(chunks, chunks >= 8, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t at = c * kChunk;
      std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at,
                  std::min(kChunk, bytes - at));
    }
  });
}

float* ThreadScratch(ThreadScratchSlot slot, int64_t floats) {
  struct Buffer {
    float* data = nullptr;
    int64_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffers[kThreadScratchSlots];
  Buffer& b = buffers[slot];
  if (floats > b.size || b.data == nullptr) {  // a buffer even for 0 floats
    std::free(b.data);
    floats = std::max<int64_t>(floats, 16);
    const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    b.data = static_cast<float*>(std::aligned_alloc(64, bytes));
    b.size = b.data != nullptr ? floats : 0;
  }
  return b.data;
}

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> is = Strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : is[i];
  return s;
}

absl::StatusOr<const ir::Tensor*> RequireInput(const ir::Node& node, KernelContext& ctx, int i) {
  const ir::Tensor* t = ctx.input(i);
  if (t == nullptr) return InvalidNode(node, "input ", i, " is required but missing");
  return t;
}

}  // namespace kiln::kernels::cpu::ref
