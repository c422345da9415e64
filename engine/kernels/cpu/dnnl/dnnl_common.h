// What the oneDNN-backed kernels (conv_dnnl.cc, deconv_dnnl.cc) share: the process's CPU
// engine, the primitive's data type for a storage type, the bf16 subnormal scan, W reordered into
// the primitive's layout, a primitive's run on the engine's plain tensors (PrimitiveRun: made
// once per run shape, pointed at each run's buffers) and the registration for fp32, bf16 and
// fp16 storage.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/registry.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::kernels::cpu::dnnl {

namespace dn = ::dnnl;

/// One engine for the process: a oneDNN CPU engine holds no state a kernel run changes.
absl::StatusOr<dn::engine*> CpuEngine();

/// The primitive's type for tensors stored as `t`: fp16 ones are converted to fp32 around it.
dn::memory::data_type DnnlType(DataType t);

/// bf16 dot-product instructions (vdpbf16ps, AMX) read subnormal inputs as zero, which the
/// precision contract does not allow: whether bf16 tensor `t` has none (a run with one goes to
/// the reference kernel).
bool Bf16Allowed(const ir::Tensor& t);

/// Bf16Allowed of a constant W, scanned once per weight buffer.
class Bf16WeightScan {
 public:
  bool Allowed(const ir::Tensor& w) {
    if (scanned_ != w.raw_data()) {
      allowed_ = Bf16Allowed(w);
      scanned_ = w.raw_data();
    }
    return allowed_;
  }

 private:
  const void* scanned_ = nullptr;
  bool allowed_ = false;
};

/// B as the primitive reads it: B's own floats when fp32, else widened (exact: the bias enters
/// the fp32 sum unrounded, as in the reference) into `scratch`; nullptr without B.
const float* BiasAsF32(const ir::Tensor* b, std::vector<float>& scratch);

/// W (laid out as `user` describes) reordered into new memory of layout `want`; fp16 W is
/// reordered from an fp32 copy (exact), dropped once the primitive has its own. Throws
/// dnnl::error.
dn::memory ReorderedWeights(const ir::Tensor& w, const dn::memory::desc& user,
                            const dn::memory::desc& want, dn::engine& engine);

/// A primitive made for one run shape and thread count (oneDNN fixes its work split when it
/// creates the primitive), with W in its layout, run on the engine's plain X and Y.
struct PrimitiveRun {
  std::vector<int64_t> x_dims;
  const void* w_data = nullptr;
  int threads = 0;
  dn::memory weights;
  dn::primitive primitive;  // empty: oneDNN has no implementation for the shape
  // When the primitive works on blocked X / Y, the reorders to and from the engine's layouts
  // and the blocked buffers; empty when it takes them as they are.
  dn::memory src_blocked, dst_blocked;
  dn::reorder to_blocked, from_blocked;
  // Made with the primitive and pointed at each run's X, Y (or the sums) and B: a stream and
  // memory objects made per run cost 10-15 us a convolution (~1% of ResNet-50).
  dn::stream stream;
  dn::memory src_mem, dst_mem, bias_mem;
  std::unordered_map<int, dn::memory> args, to_args, from_args;

  /// Whether the run was made for X's dims, W's buffer and `threads`.
  bool MadeFor(const ir::Tensor& x, const ir::Tensor& w, int threads_now) const {
    return x_dims == x.dims() && w_data == w.raw_data() && threads == threads_now;
  }

  /// After `primitive` and `weights` are set: the reorders between the engine's layouts `src`
  /// and `dst` and those of the primitive (`pd`), the stream, the memory objects and the
  /// arguments (B's of layout `*bias` when given). Throws dnnl::error.
  void Connect(const dn::primitive_desc_base& pd, const dn::memory::desc& src,
               const dn::memory::desc& dst, const dn::memory::desc* bias, dn::engine& engine);

  /// Runs the primitive on `src`, writing `dst`, with the bias `bias` (when Connect was given
  /// one); errors name the node and `what` ("convolution").
  absl::Status Execute(const ir::Node& node, const char* what, const void* src, void* dst,
                       const float* bias);
};

/// The run in `cache` when it was made for X, W and the thread count; else a new one, made by
/// `build(engine, run)` (which sets the primitive and W and calls Connect; throws dnnl::error).
/// nullptr when oneDNN has no implementation for the shape (the caller runs the reference): a
/// dnnl_unimplemented error, or any oneDNN error when `any_error_unimplemented`; other errors
/// name the node and `what`.
template <typename Run, typename Build>
absl::StatusOr<Run*> CachedRun(std::optional<Run>& cache, const ir::Tensor& x, const ir::Tensor& w,
                               int threads, const ir::Node& node, const char* what,
                               bool any_error_unimplemented, Build build) {
  if (cache && cache->MadeFor(x, w, threads)) return cache->primitive ? &*cache : nullptr;
  cache.reset();
  Run run;
  run.x_dims = x.dims();
  run.w_data = w.raw_data();
  run.threads = threads;
  ASSIGN_OR_RETURN(dn::engine * engine, CpuEngine());
  try {
    build(*engine, run);
  } catch (const dn::error& e) {
    if (!any_error_unimplemented && e.status != dnnl_unimplemented) {
      return absl::InternalError(
          absl::StrCat(node.Label(), " oneDNN ", what, " setup failed: ", e.what()));
    }
    run.primitive = dn::primitive();
  }
  cache = std::move(run);
  return cache->primitive ? &*cache : nullptr;
}

/// Registers `def` (its op, factory and supports; dtypes and cpu_features are set here) for fp32
/// storage; for bf16 on CPUs with the
/// dot-product instructions (native, not emulated, bf16 in oneDNN) and the AVX-512 subnormal
/// scan; and for fp16, the fp32 primitive between F16C conversions (AVX-512 ones).
void AddF32Bf16F16(Registry& r, KernelDef def);

}  // namespace kiln::kernels::cpu::dnnl
