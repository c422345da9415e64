// Channels-last layout between convolutions (DESIGN.md §4).
//
// oneDNN's fast convolutions read and write NHWC (or blocked) tensors; ONNX tensors are NCHW. A
// convolution on NCHW tensors reorders its input and its output on every run, which costs as
// much as the convolution itself on ResNet- and MobileNet-style networks. This pass keeps the
// activations NHWC from one convolution to the next:
//
//   - every convolution with a kernel taking it channels-last (`channels_last_kernel`: the
//     oneDNN kernel) reads X (and a FusedConv's residual Z) and writes Y as NHWC tensors
//     ([N, H, W, C]; the node gets
//     kChannelsLastAttr), and so does a MaxPool, AveragePool, GlobalAveragePool,
//     BatchNormalization (inference) or LRN reading an NHWC value when a kernel takes it (the
//     AVX-512 ones);
//   - an elementwise node whose activation inputs are all rank-4 NHWC values (Add, Sum, Mul,
//     Sub, Div; Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh on input 0) runs on
//     them as they are: elementwise arithmetic does not depend on the layout, and permuting
//     every rank-4 operand alike permutes their broadcasting with them (an SE block's
//     [N, C, 1, 1] scale of [N, C, H, W], symbolic dims too); a scalar constant, or a per-channel
//     constant operand ([C, 1, 1] or [1, C, 1, 1], a decomposed BatchNormalization's scale or
//     shift) is read as the same values in a [C] row, which broadcasts over NHWC's last axis;
//   - a Concat of NHWC values only joins them as NHWC, its axis moved to its NHWC position
//     (channels: 1 -> 3), so Inception- and DenseNet-style blocks stay NHWC across their joins;
//   - a Resize of an NHWC value with constant scales or sizes and no roi resizes it as NHWC,
//     its scales or sizes permuted to NHWC order (feature-pyramid upsampling);
//   - a first convolution (3 input channels, 16 outputs, one group, a kernel larger than 1 x 1)
//     reads its NCHW X as it is and writes NHWC Y (kChannelsLastAttr = kChannelsLastYOnly,
//     cpu/dnnl/register.h): oneDNN's first-convolution kernel does, with no transpose of X;
//   - an NCHW value read in NHWC gets one inserted Transpose (perm 0,2,3,1), shared by every
//     such reader; an NHWC value read by anything else, or a graph output, gets one inserted
//     Transpose back (perm 0,3,1,2) producing the value under its ONNX name.
//
// An NHWC value is named `<ONNX name>::nhwc` (report::SourceTensorName strips the suffix, and
// the accuracy report transposes it back before comparing). Numbers do not change: a transpose
// moves values, and the convolution sums the same products (in an order oneDNN chooses, as
// before). Inserted transposes have no source node, like inserted conversions.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "spdlog/logger.h"

namespace kiln::passes {

/// What the layout pass did.
struct LayoutResult {
  int convolutions = 0;             // convolutions running NHWC
  int nchw_x_convolutions = 0;      // of those, reading NCHW X (cpu/dnnl's kChannelsLastYOnly)
  int pools = 0;                    // pools, BatchNormalization and LRN nodes running NHWC
  int elementwise = 0;              // elementwise nodes running on NHWC values
  int concats = 0;                  // Concat nodes joining NHWC values
  int resizes = 0;                  // Resize nodes resizing NHWC values
  int transposes = 0;               // transposes inserted (into and out of NHWC)
  int composed = 0;                 // model Transposes composed with a layout change instead
  std::vector<ir::Node*> inserted;  // the inserted Transpose nodes
};

/// Whether `dims` ([C, 1, 1] or [1, C, 1, 1], C = `channels` > 1) broadcast over an NCHW tensor
/// with C channels as one value per channel: a per-channel scale or shift.
bool IsPerChannelDims(const std::vector<int64_t>& dims, int64_t channels);

/// Rewrites `live` (the graph's live nodes in execution order; nodes outside it are ignored as
/// readers) and returns what changed; the caller re-orders the graph and chooses the kernels of
/// the nodes given kChannelsLastAttr again. `channels_last_kernel(n)` says whether a kernel
/// takes convolution or pool `n` channels-last. Values whose shape is not a known rank-4 shape
/// are left as they are.
absl::StatusOr<LayoutResult> KeepChannelsLast(
    ir::Graph& graph, const std::vector<ir::Node*>& live,
    const std::function<bool(const ir::Node&)>& channels_last_kernel, spdlog::logger* logger);

}  // namespace kiln::passes
