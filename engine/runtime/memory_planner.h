// Activation memory planning: every activation with a static size gets an offset in one arena;
// activations whose lifetimes (first definition to last use, in execution order) do not overlap
// share memory. Graph inputs, outputs and constants are not planned (they are owned elsewhere);
// activations with symbolic sizes are allocated at run time. The output of a shape-only op
// (Reshape, Flatten, Squeeze, Unsqueeze, Identity) takes over its input's slot when the input
// dies there: the bytes are already in place and the kernel copies nothing. So does a
// FusedConv's Y with its residual Z's slot: the kernel adds Z where it lies (an output that
// shares an input's bytes is why a run whose observer reads a node's inputs after the node,
// the accuracy report's, runs without the arena).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ir/graph.h"

namespace kiln::runtime {

/// The result of planning.
struct MemoryPlan {
  struct Slot {
    int value_id = -1;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  uint64_t arena_bytes = 0;             // size of the arena with reuse
  uint64_t total_activation_bytes = 0;  // what the planned activations would take without reuse
  int dynamic_values = 0;               // activations sized only at run time
  std::vector<Slot> slots;
};

/// Plans `order` (a topological order of `graph`). Runs in O(n log n) in the number of values.
MemoryPlan PlanMemory(const ir::Graph& graph, const std::vector<ir::Node*>& order);

}  // namespace kiln::runtime
