#include "engine/runtime/memory_planner.h"

#include <map>

#include "engine/plan/arena_rules.h"

namespace kiln::runtime {
namespace {

// Free blocks of the arena, merged when adjacent; allocation is best fit, else the arena grows.
class FreeList {
 public:
  uint64_t Allocate(uint64_t bytes) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->second >= bytes && (best == blocks_.end() || it->second < best->second)) best = it;
    }
    if (best != blocks_.end()) {
      uint64_t off = best->first, size = best->second;
      blocks_.erase(best);
      if (size > bytes) blocks_[off + bytes] = size - bytes;
      return off;
    }
    // Grow: reuse a free block at the end of the arena if there is one.
    if (!blocks_.empty()) {
      auto last = std::prev(blocks_.end());
      if (last->first + last->second == end_) {
        uint64_t off = last->first;
        blocks_.erase(last);
        end_ = off + bytes;
        return off;
      }
    }
    uint64_t off = end_;
    end_ += bytes;
    return off;
  }

  void Free(uint64_t off, uint64_t bytes) {
    auto it = blocks_.emplace(off, bytes).first;
    auto next = std::next(it);
    if (next != blocks_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        blocks_.erase(it);
      }
    }
  }

  uint64_t end() const { return end_; }

 private:
  std::map<uint64_t, uint64_t> blocks_;
  uint64_t end_ = 0;
};

}  // namespace

MemoryPlan PlanMemory(const ir::Graph& graph, const std::vector<ir::Node*>& order) {
  MemoryPlan plan;
  std::vector<int> last_use(graph.values().size(), -1);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    for (const ir::Value* v : order[i]->inputs) {
      if (v) last_use[v->id] = i;
    }
  }
  std::vector<std::vector<int>> dies_at(order.size());
  std::vector<int> slot_of(graph.values().size(), -1);
  std::vector<bool> handed_over(graph.values().size(), false);
  FreeList free_list;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    // An input that dies here may hand its slot to output 0 (plan::InPlaceInput): for a shape-only
    // op the output is the input's bytes, so its kernel finds them in place and copies nothing.
    // Not when the node reads the value through another input as well (FusedConv(X, W, B, X)
    // reads X while it writes Y).
    const ir::Node& node = *order[i];
    const ir::Value* view_of = nullptr;
    const int donor = plan::InPlaceInput(node.op);
    if (donor >= 0 && donor < node.num_inputs() && node.inputs[donor]) {
      const ir::Value* in = node.inputs[donor];
      int reads = 0;
      for (const ir::Value* v : node.inputs) reads += v == in;
      if (slot_of[in->id] >= 0 && last_use[in->id] == i && reads == 1) view_of = in;
    }
    for (const ir::Value* v : node.outputs) {
      // Sequences and optionals hold tensors of their own (ir/tensor.h), never an arena slot.
      if (!v || v->is_graph_output || v->constant || v->kind != ir::ValueKind::kTensor) continue;
      if (!v->shape.is_static() || DataTypeSize(v->dtype) == 0) {
        ++plan.dynamic_values;
        continue;
      }
      int64_t n = ir::NumElementsOf(v->shape.StaticDims());
      // Sizes that overflow (or are absurd) are left to run time, where allocation fails cleanly.
      if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 48) / DataTypeSize(v->dtype)) {
        ++plan.dynamic_values;
        continue;
      }
      const uint64_t bytes = plan::ArenaSlotBytes(n, DataTypeSize(v->dtype));
      slot_of[v->id] = static_cast<int>(plan.slots.size());
      if (view_of != nullptr && v == node.outputs[0] && v->dtype == view_of->dtype &&
          plan.slots[slot_of[view_of->id]].bytes == bytes) {
        plan.slots.push_back({v->id, plan.slots[slot_of[view_of->id]].offset, bytes});
        handed_over[view_of->id] = true;
      } else {
        plan.slots.push_back({v->id, free_list.Allocate(bytes), bytes});
      }
      plan.total_activation_bytes += bytes;
      dies_at[std::max(i, last_use[v->id])].push_back(v->id);
    }
    for (int id : dies_at[i]) {
      if (handed_over[id]) continue;  // its bytes live on as the view's
      const auto& s = plan.slots[slot_of[id]];
      free_list.Free(s.offset, s.bytes);
    }
  }
  plan.arena_bytes = free_list.end();
  return plan;
}

}  // namespace kiln::runtime
