// Weight layout passes of the build: GEMM weights stored packed as the AVX-512 GEMM reads them,
// convolution weights also stored as their oneDNN kernels lay them out (BuildOptions::
// pack_weights). Internal to the builder (engine/builder/compile.cc runs them).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "spdlog/logger.h"

namespace kiln::builder {

/// Stores each eligible constant GEMM B packed (see weights.cc for which); fp32 ones only with
/// `f32`, and then only as the blob is written (`encodings`, their nodes in `packed_at_write`).
/// Counts into `sum.packed_weights`. Returns the CPU features the packed engine requires.
absl::StatusOr<uint64_t> PackWeights(const std::vector<ir::Node*>& live,
                                     const std::vector<const kernels::KernelDef*>& defs, bool f32,
                                     std::map<int, plan::WeightEncoding>& encodings,
                                     std::vector<ir::Node*>& packed_at_write, BuildSummary& sum,
                                     spdlog::logger& logger);

/// Adds to each oneDNN convolution of `live` its W as its kernel lays it out on this machine, as
/// an extra constant input. Returns how many were stored.
absl::StatusOr<int> PrepackConvolutions(ir::Graph& g, const std::vector<ir::Node*>& live,
                                        const std::vector<const kernels::KernelDef*>& defs,
                                        spdlog::logger& logger);

}  // namespace kiln::builder
