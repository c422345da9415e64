// The placement pass (DESIGN.md §12): for a build that targets a device, puts each kernel on the
// device or on the CPU, and says why for each node that stays on the CPU. A node runs on the
// device when the device has a kernel for its op at its assigned precision (Registry::FindOn,
// whose `supports` checks dtypes and attributes); integer and bool computations (shapes,
// indices) and control flow stay on the CPU, where they cost no transfer of activations.
// Transfers are the tensors that cross between the two per run; the session makes them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/device.h"
#include "engine/kernels/registry.h"
#include "kiln/v1/engine.pb.h"
#include "spdlog/logger.h"

namespace kiln::builder {

/// Where a build's kernels run.
struct Placement {
  kernels::DeviceDescription device;  // the target (opencl false: the CPU, nothing placed)
  std::vector<bool> on_device;        // by node id
  std::vector<std::string> fallback;  // by node id: why a node of a device build runs on the CPU
  int device_kernels = 0, cpu_kernels = 0, transfers = 0;
  /// Estimated floating-point operations per run (NodeFlops), in all and on the device.
  double flops = 0, device_flops = 0;
  /// Compiled subgraphs (If branches, Loop and Scan bodies) whose figures the counts include,
  /// each counted once (both branches of an If).
  int subgraphs = 0;
};

/// An estimate of the floating-point operations of one run of `n` from its shapes, each
/// symbolic dim counted as 1: 2 per multiply-add of a convolution, a matrix product, attention or
/// a recurrence (LSTM, GRU, RNN), one per output element otherwise (0 where a rank is unknown);
/// a node with subgraphs at least one pass of its costliest subgraph.
double NodeFlops(const ir::Node& n);

/// Places the `live` nodes of `g` for `device`: a node placed on it gets kernels::kBackendAttr
/// "opencl" and its device kernel in `defs` (by node id). With `no_fallback`, a node that cannot
/// run there is an error (Unimplemented) listing every such node and why, instead of a CPU kernel.
/// `subgraphs` holds the counts of the graph's compiled subgraphs (placed by their own builds),
/// added to the graph's own.
absl::StatusOr<Placement> PlaceKernels(ir::Graph& g, const std::vector<ir::Node*>& live,
                                       std::vector<const kernels::KernelDef*>& defs,
                                       const kernels::DeviceDescription& device, bool no_fallback,
                                       const Placement& subgraphs, spdlog::logger& log);

/// The engine metadata's record of the device (kind, identity, capabilities, counts).
void FillDevice(const Placement& p, v1::Device& out);

}  // namespace kiln::builder
