// ONNX Slice's index arithmetic, one axis at a time: shared by the Slice kernel and shape
// inference, so the shape the build plans for is the one the kernel makes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::ir {

/// One sliced axis: the first index taken, the step and how many elements are taken.
struct SliceAxis {
  int64_t start = 0;
  int64_t step = 1;
  int64_t length = 0;
};

/// Slice of an axis of `dim` elements by `start`, `end` and `step` (step != 0) as ONNX defines
/// it: negative indices count from the end, then the bounds are clamped to the axis
/// ([0, dim] for a positive step, [-1, dim - 1] for a negative one). Any int64 values, extremes
/// included, without overflow: steps beyond the dim select at most one element and are clamped.
inline SliceAxis SliceRange(int64_t start, int64_t end, int64_t step, int64_t dim) {
  SliceAxis out;
  const int64_t big = std::max<int64_t>(dim, 1);
  out.step = std::clamp(step, -big, big);
  int64_t s = start, e = end;
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  if (dim == 0) {
    out.start = 0;
    return out;
  }
  if (out.step > 0) {
    s = std::clamp<int64_t>(s, 0, dim);
    e = std::clamp<int64_t>(e, 0, dim);
    out.length = e > s ? (e - s + out.step - 1) / out.step : 0;
  } else {
    s = std::clamp<int64_t>(s, 0, dim - 1);
    e = std::clamp<int64_t>(e, -1, dim - 1);
    out.length = s > e ? (s - e - out.step - 1) / -out.step : 0;
  }
  out.start = s;
  return out;
}

}  // namespace kiln::ir
