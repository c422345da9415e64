// Convolution chains (DESIGN.md §1, §5): the inverted-residual block of MobileNet-style networks
// as one kernel.
//
// A depthwise convolution with the 1x1 expansion before it and the 1x1 projection after it (with
// its residual, if any), or with one of the two, that run one after another on channels-last fp32
// (or fp16, or bf16) tensors become one FusedConvChain (kernels/cpu/avx512/conv_chain.h), which
// computes the block in bands of rows so that the expanded tensors (six times the block's input,
// several MB at 112 x 112 and 56 x 56) stay in cache instead of going to memory and back twice.
// Measured on MobileNetV2 (fp32, per block, chained against the separate kernels in the same
// engine): the 112 x 112 and 56 x 56 blocks and the first block (without an expansion) 1.05-1.2x on
// one thread, the 28 x 28 and smaller ones within +-5% there; every block chained, the network 10%
// faster on two threads (one parallel region per block instead of three). A depthwise
// convolution with neither neighbour is left alone: its kernel is the chain's depthwise step
// anyway.
//
// Members (kernels/cpu/avx512/conv_chain_nodes.h, the tests the depthwise kernel's `supports`
// shares): Conv or FusedConv nodes the layout pass runs channels-last (kChannelsLastAttr), fp32
// fp16 or bf16 in and out, W (and B) constants of that type, activation none, Relu, LeakyRelu,
// Clip or HardSwish, no dilation, explicit pads; the 1x1 convolutions with unit strides, no padding
// and one group, the depthwise one with group = channels = outputs; only the projection may carry a
// residual. Each interior value is read by the next member alone. Numbers: every member still
// computes its fp32 sum of products plus bias, then its activation, and hands on what it would
// store (fp32, or that value rounded to bf16 in a bf16 graph; in an fp16 graph the interior stays
// fp32, as in every fused kernel, and those members' effective precision is fp32: ChainResult::
// fp32_interior): only the order within each sum changes, as between any two fp32 convolution
// kernels. Nothing is lowered: the members all run at one precision already (after precision
// lowering; a Cast between two members ends a chain).
//
// A 2 x 2, stride-2 MaxPool (no padding, floor) alone reading the chain's output, or a lone
// depthwise convolution's, is taken in too (attribute `pool`): the chain's output, several MB at
// a detector's first stages (YuNet: 320 x 320 x 16 fp32, 6.5 MB), is then pooled band by band in
// cache instead of written out and read back; the maxima are the MaxPool kernel's, of the values
// as stored in the chain's type.
//
// Runs after the layout pass, with fusion on (`--fusion off` or `--no-fuse pattern:conv-chain`,
// `op:...`, `scope:...` keep the convolutions apart), and only where `chain_kernel` says a kernel
// takes the chain.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/passes/fusion.h"
#include "spdlog/logger.h"

namespace kiln::passes {

/// What chaining did.
struct ChainResult {
  std::vector<ir::Node*> added;    // the FusedConvChain nodes
  std::vector<ir::Node*> removed;  // their members, left without inputs or outputs
  std::vector<std::string> applied;
  /// Source node ids whose outputs an fp16 chain keeps in fp32 (every convolution but the last).
  std::vector<int> fp32_interior;
};

/// Rewrites `live` (the graph's live nodes in execution order). Edges are rebuilt; the caller
/// drops `removed` from its live list and chooses the kernels of `added`.
absl::StatusOr<ChainResult> ChainConvolutions(
    ir::Graph& graph, const std::vector<ir::Node*>& live,
    const std::function<bool(const ir::Node&)>& chain_kernel, const FusionOptions& options,
    spdlog::logger* logger);

}  // namespace kiln::passes
