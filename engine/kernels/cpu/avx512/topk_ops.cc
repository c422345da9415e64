// Fast TopK on float, float16 and bfloat16 (detectors' score selection, beam search): the
// reference kernel's outputs to the bit. The reference orders a lane by value (descending for
// largest, ascending otherwise; NaN above +Inf, -0 equal to +0) with ties to the lower index:
// a strict total order, so any exact selection gives its k entries in its order. Here each
// element becomes one 64-bit key, the value's order-preserving 32 bits above the index's (both
// flipped as the order needs), so the order is the integers' and the selection is on plain
// uint64 compares: a k-entry min-heap scan for k small against the lane, nth_element and a sort
// of the first k otherwise. Values are copied from the input (bits kept, NaN payloads included),
// indices written as int64. Lanes (every position of the axes around `axis`) run on the OpenMP
// threads when there is enough work. Anything else (other dtypes, more than 2^32 - 1 elements along
// the axis, arguments the reference reports as errors) runs the reference kernel.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/memory_kernel.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Up to this k, or while k is at most 1/kHeapRatio of the lane, the selection is a scan keeping
// the k largest keys in a min-heap (most elements fail the one compare against its top, and the
// keys are built as the scan goes, never stored); from it on nth_element (linear) over the keys
// and a sort of k. A detector's 100 of 8400 candidates, 16 lanes, one thread: 1.12 ms with
// nth_element, 0.82 with the heap, 0.40 with OrderBits free of branches (ONNX Runtime 0.43).
constexpr int64_t kHeapMaxK = 64;
constexpr int64_t kHeapRatio = 16;

bool HeapSelects(int64_t n, int64_t k) { return k < n && (k <= kHeapMaxK || k * kHeapRatio <= n); }

// 32 bits whose unsigned order is the reference's order of the fp32 value: -0 as +0, every NaN
// above +Inf (the reference's NaNs tie with each other and go by index).
// Branch-free (selects, no jumps): the signs of a detector's scores are random, and a branch on
// them was mispredicted every other element.
inline uint32_t OrderBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = b == 0x80000000u ? 0u : b;  // -0 as +0
  // Negative: all bits flipped; else the sign bit set.
  const uint32_t key = b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
  return (b & 0x7fffffffu) > 0x7f800000u ? 0xffffffffu : key;  // NaN above everything
}

inline float Widen(DataType t, const void* p, int64_t e) {
  switch (t) {
    case DataType::kF16:
      return HalfBitsToFloat(static_cast<const uint16_t*>(p)[e]);
    case DataType::kBF16:
      return BFloat16BitsToFloat(static_cast<const uint16_t*>(p)[e]);
    default:
      return static_cast<const float*>(p)[e];
  }
}

// The k greatest of the n keys key(j), greatest first, into keys[0, k): a min-heap scan
// (HeapSelects) or all keys then nth_element.
template <typename Key>
void SelectTop(const Key& key, int64_t n, int64_t k, std::vector<uint64_t>& keys,
               std::vector<uint64_t>& heap) {
  if (HeapSelects(n, k)) {
    heap.resize(k);
    for (int64_t j = 0; j < k; ++j) heap[j] = key(j);
    std::make_heap(heap.begin(), heap.end(), std::greater<uint64_t>());  // top: the least
    for (int64_t j = k; j < n; ++j) {
      const uint64_t kj = key(j);
      if (kj > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        heap.back() = kj;
        std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
      }
    }
    std::sort(heap.begin(), heap.end(), std::greater<uint64_t>());
    std::copy(heap.begin(), heap.end(), keys.begin());
    return;
  }
  for (int64_t j = 0; j < n; ++j) keys[j] = key(j);
  if (k < n) {
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.begin() + n,
                     std::greater<uint64_t>());
  }
  std::sort(keys.begin(), keys.begin() + k, std::greater<uint64_t>());
}

absl::StatusOr<bool> FastTopK(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* x = ctx.input(0);
  if (x == nullptr || x->rank() == 0) return false;
  const DataType t = x->dtype();
  if (t != DataType::kF32 && t != DataType::kF16 && t != DataType::kBF16) return false;
  int64_t k = node.GetInt("k", -1);
  if (node.since_version >= 10) {
    std::vector<int64_t> kv;
    if (!ReadOptionalInts(node, ctx, 1, &kv) || kv.size() != 1) return false;
    k = kv[0];
  }
  const int rank = x->rank();
  const int64_t axis_attr = node.GetInt("axis", -1);
  if (axis_attr < -rank || axis_attr >= rank) return false;
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  const int64_t outer = ref::Product(x->dims(), 0, axis);
  const int64_t n = x->dim(axis);
  const int64_t inner = ref::Product(x->dims(), axis + 1, rank);
  if (k < 0 || k > n || n > int64_t{0xffffffff}) return false;
  const bool largest = node.GetInt("largest", 1) != 0;
  std::vector<int64_t> out_dims = x->dims();
  out_dims[axis] = k;
  ir::Tensor* values = nullptr;
  ir::Tensor* indices = nullptr;
  if (ctx.output_requested(0)) {
    ASSIGN_OR_RETURN(values, ctx.output(0, t, out_dims));
  }
  if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
    ASSIGN_OR_RETURN(indices, ctx.output(1, DataType::kI64, out_dims));
  }
  const int64_t lanes = outer * inner;
  if (k == 0 || lanes == 0) return true;
  const void* xd = x->raw_data();
  const int64_t esz = DataTypeSize(t);
  char* vd = values ? static_cast<char*>(values->raw_data()) : nullptr;
  int64_t* id = indices ? indices->data<int64_t>() : nullptr;
  // A lane costs about n key builds and compares: threads from ~64K elements on.
  const bool parallel = lanes > 1 && lanes * n >= (int64_t{1} << 16);
  ParallelFor(lanes, parallel, [&](int64_t l_begin, int64_t l_end) {
    std::vector<uint64_t> keys(HeapSelects(n, k) ? k : n), heap;
    for (int64_t l = l_begin; l < l_end; ++l) {
      const int64_t o = l / inner, i = l % inner;
      const int64_t base = o * n * inner + i;  // element j of the lane at base + j * inner
      // largest: greater value first, then lower index (index flipped); smallest: the whole
      // key of (value, index) flipped, so the greatest key is the least value, lowest index.
      auto key = [&](int64_t j) {
        const uint64_t hi = OrderBits(Widen(t, xd, base + j * inner));
        return largest ? (hi << 32) | (0xffffffffu - static_cast<uint64_t>(j))
                       : ~((hi << 32) | static_cast<uint64_t>(j));
      };
      SelectTop(key, n, k, keys, heap);
      const int64_t dst = o * k * inner + i;
      for (int64_t j = 0; j < k; ++j) {
        const uint64_t low = (largest ? keys[j] : ~keys[j]) & 0xffffffffu;
        const int64_t src = static_cast<int64_t>(largest ? 0xffffffffu - low : low);
        if (vd) {
          std::memcpy(vd + (dst + j * inner) * esz,
                      static_cast<const char*>(xd) + (base + src * inner) * esz, esz);
        }
        if (id) id[dst + j * inner] = src;
      }
    }
  });
  return true;
}

}  // namespace

void RegisterTopK(Registry& r) {
  r.Add(KernelDef{ir::OpType::kTopK,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &MemoryKernel<FastTopK>::Create});
}

}  // namespace kiln::kernels::cpu::avx512
