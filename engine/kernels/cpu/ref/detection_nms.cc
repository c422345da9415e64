// Reference kernel of NonMaxSuppression (opsets 10 and 11, which compute the same).
//
// For each batch and class, boxes whose score is strictly above score_threshold (every box when
// it is omitted) are taken in decreasing score order (ties: the lower box index first), and a
// box is selected unless its IoU with a box already selected for that class is strictly above
// iou_threshold, until max_output_boxes_per_class are selected (0, the default, selects none).
// Boxes are [y1, x1, y2, x2] with any two opposite corners (center_point_box=0) or
// [x_center, y_center, width, height] (center_point_box=1); a box of zero area overlaps nothing.
// The IoU is computed in the boxes' type with the operations of ONNX Runtime and the ONNX
// reference, so a pair exactly at the threshold goes the same way. A NaN score cannot be ranked
// and never selects its box.
//
// ONNX defines the op for float (and Kiln adds double) only: in fp16 or bf16 the thresholds
// themselves would move (1/7 becomes 0.14282 in fp16) and flip decisions at the boundary, so
// there is no reduced-precision kernel; a reduced policy keeps the node fp32 (with --constraints
// prefer) and converts its inputs.
//
// Output: int64 [selected, 3] rows [batch, class, box], by batch, then class, then selection.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/scalar_inputs.h"

namespace kiln::kernels::cpu::ref {
namespace {

// A box as the extents of its two axes, and its area.
template <typename C>
struct Extent {
  C y_min, x_min, y_max, x_max, area;
};

template <typename C>
Extent<C> ToExtent(const C* b, bool center_point_box) {
  Extent<C> e;
  if (center_point_box) {
    const C half_w = b[2] / C(2), half_h = b[3] / C(2);
    e.x_min = b[0] - half_w;
    e.x_max = b[0] + half_w;
    e.y_min = b[1] - half_h;
    e.y_max = b[1] + half_h;
  } else {
    e.y_min = std::min(b[0], b[2]);
    e.y_max = std::max(b[0], b[2]);
    e.x_min = std::min(b[1], b[3]);
    e.x_max = std::max(b[1], b[3]);
  }
  e.area = (e.x_max - e.x_min) * (e.y_max - e.y_min);
  return e;
}

// Whether IoU(a, b) > threshold; boxes that do not overlap, or of no area, never suppress.
template <typename C>
bool Suppresses(const Extent<C>& a, const Extent<C>& b, C threshold) {
  const C x_min = std::max(a.x_min, b.x_min), x_max = std::min(a.x_max, b.x_max);
  if (!(x_max > x_min)) return false;
  const C y_min = std::max(a.y_min, b.y_min), y_max = std::min(a.y_max, b.y_max);
  if (!(y_max > y_min)) return false;
  const C inter = (x_max - x_min) * (y_max - y_min);
  const C uni = a.area + b.area - inter;
  if (!(inter > 0) || !(a.area > 0) || !(b.area > 0) || !(uni > 0)) return false;
  return inter / uni > threshold;
}

class NmsKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(bool center, ReadFlagAttr(node, "center_point_box", 0));
    return std::unique_ptr<Kernel>(new NmsKernel(node, center));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* boxes, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* scores, RequireInput(node_, ctx, 1));
    if (boxes->rank() != 3 || boxes->dim(2) != 4) {
      return InvalidNode(node_, "boxes must be [num_batches, spatial_dimension, 4], got ",
                         ir::DimsToString(boxes->dims()));
    }
    const int64_t batches = boxes->dim(0), count = boxes->dim(1);
    if (scores->rank() != 3 || scores->dim(0) != batches || scores->dim(2) != count) {
      return InvalidNode(node_, "scores must be [num_batches, num_classes, spatial_dimension] = [",
                         batches, ", C, ", count, "] for boxes ", ir::DimsToString(boxes->dims()),
                         ", got ", ir::DimsToString(scores->dims()));
    }
    if (scores->dtype() != boxes->dtype()) {
      return InvalidNode(node_, "scores are ", DataTypeOnnxName(scores->dtype()), " but boxes are ",
                         DataTypeOnnxName(boxes->dtype()));
    }
    // Optional scalars; an empty tensor counts as omitted (as ONNX Runtime reads it).
    auto given = [&](int i) { return ctx.input(i) != nullptr && ctx.input(i)->num_elements() > 0; };
    int64_t max_out = 0;
    if (given(2)) {
      ASSIGN_OR_RETURN(max_out, ReadScalarInt(node_, *ctx.input(2), "max_output_boxes_per_class"));
      max_out = std::max<int64_t>(max_out, 0);
    }
    double iou = 0;
    if (given(3)) {
      ASSIGN_OR_RETURN(iou, ReadScalarFloat(node_, *ctx.input(3), "iou_threshold"));
      if (!(iou >= 0 && iou <= 1)) {
        return InvalidNode(node_, "iou_threshold must be in [0, 1], got ", iou);
      }
    }
    const bool has_score_threshold = given(4);
    double score_threshold = 0;
    if (has_score_threshold) {
      ASSIGN_OR_RETURN(score_threshold, ReadScalarFloat(node_, *ctx.input(4), "score_threshold"));
    }
    const int64_t classes = scores->dim(1);
    std::vector<int64_t> rows;  // batch, class, box triples
    RETURN_IF_ERROR(DispatchFloat(boxes->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      const T* bp = boxes->data<T>();
      const T* sp = scores->data<T>();
      const C iou_c = static_cast<C>(iou), score_c = static_cast<C>(score_threshold);
      std::vector<Extent<C>> ext(count);
      std::vector<std::pair<C, int64_t>> cand;
      std::vector<int64_t> selected;
      for (int64_t b = 0; b < batches && max_out > 0; ++b) {
        for (int64_t i = 0; i < count; ++i) {
          const T* box = bp + (b * count + i) * 4;
          const C v[4] = {Load(box[0]), Load(box[1]), Load(box[2]), Load(box[3])};
          ext[i] = ToExtent(v, center_);
        }
        for (int64_t c = 0; c < classes; ++c) {
          const T* s = sp + (b * classes + c) * count;
          cand.clear();
          for (int64_t i = 0; i < count; ++i) {
            const C v = Load(s[i]);
            if (std::isnan(static_cast<double>(v))) continue;
            if (has_score_threshold && !(v > score_c)) continue;
            cand.emplace_back(v, i);
          }
          std::sort(cand.begin(), cand.end(), [](const auto& x, const auto& y) {
            return x.first != y.first ? x.first > y.first : x.second < y.second;
          });
          selected.clear();
          for (const auto& [score, i] : cand) {
            if (static_cast<int64_t>(selected.size()) >= max_out) break;
            bool keep = true;
            for (int64_t j : selected) {
              if (Suppresses(ext[i], ext[j], iou_c)) {
                keep = false;
                break;
              }
            }
            if (!keep) continue;
            selected.push_back(i);
            rows.insert(rows.end(), {b, c, i});
          }
        }
      }
      return absl::OkStatus();
    }));
    const int64_t n = static_cast<int64_t>(rows.size()) / 3;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kI64, {n, 3}));
    std::copy(rows.begin(), rows.end(), y->data<int64_t>());
    return absl::OkStatus();
  }

 private:
  NmsKernel(const ir::Node& node, bool center) : node_(node), center_(center) {}
  const ir::Node& node_;
  bool center_;
};

}  // namespace

void RegisterDetectionNms(Registry& r) {
  r.AddRef(ir::OpType::kNonMaxSuppression, {DataType::kF32, DataType::kF64}, &NmsKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
