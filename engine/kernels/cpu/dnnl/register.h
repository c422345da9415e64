// The explicit list of oneDNN-backed kernel families. oneDNN picks its own code path (AVX2,
// AVX-512, AMX) at run time; Registry::Find picks these kernels over the reference ones when the
// running CPU has the features of Isa::kDnnl (and KernelDef::cpu_features) and their `supports`
// predicate accepts the node. oneDNN runs on the same OpenMP runtime as the engine (Debian's
// libdnnl is built with DNNL_CPU_RUNTIME=OMP), so the engine's thread count applies to it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::dnnl {

/// The attribute of a Conv / FusedConv node whose W the build also stored as its kernel lays it
/// out on the building machine (input kPrepackedWeightsInput, as bytes): the layout's record, as
/// 64-bit words (conv_dnnl.cc): oneDNN's version and the memory descriptor its primitive chose,
/// or, for the AVX-512 GEMM path (small images), 0 then C, M and the taps. A run whose kernel
/// lays W out the same reads those bytes where they lie (in the blob, mmapped) instead of
/// laying W out in memory of its own at its first run; any other run (another CPU, another
/// oneDNN) lays out the plain W as it would without them.
inline constexpr char kPrepackedWeightsAttr[] = "kiln_dnnl_weights";
inline constexpr int kPrepackedWeightsInput = 4;

/// kChannelsLastAttr's value (kernel.h) on a Conv / FusedConv node that reads X as the NCHW
/// tensor it is and writes Y (and reads a FusedConv's residual Z) channels-last (NHWC): the
/// layout pass (passes/layout.cc) gives it to a first convolution with few input channels and 16
/// outputs, which oneDNN runs from NCHW X straight into nChw16c Y, the same bytes as NHWC Y,
/// without the transpose of X that a channels-last convolution needs. Only the oneDNN
/// convolution (conv_dnnl.cc) takes it.
inline constexpr int64_t kChannelsLastYOnly = 2;

/// W as a node's kernel lays it out, and that layout's record.
struct PrepackedConvWeights {
  std::vector<int64_t> desc;  // the kPrepackedWeightsAttr words
  ir::Tensor bytes;           // uint8 [size]
};

/// For a Conv / FusedConv node that `def` (the oneDNN convolution) runs, with constant W and
/// static shapes: runs the kernel once on zero inputs and returns W as it laid it out (oneDNN's
/// primitive or the GEMM path); nullopt when the reference runs the node or a shape is not
/// static.
absl::StatusOr<std::optional<PrepackedConvWeights>> PrepackConvWeights(const ir::Node& node,
                                                                       const KernelDef& def);

/// conv_dnnl.cc: 2-D and 1-D Conv and FusedConv on float, float16 and bfloat16 storage.
void RegisterConv(Registry& r);

/// deconv_dnnl.cc: ConvTranspose (1-D, 2-D, 3-D) on float, float16 and bfloat16 storage.
void RegisterDeconv(Registry& r);

/// Registers every oneDNN kernel.
inline void RegisterDnnl(Registry& r) {
  RegisterConv(r);
  RegisterDeconv(r);
}

}  // namespace kiln::kernels::cpu::dnnl
