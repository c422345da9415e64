// What every OpenCL kernel of kernels/opencl shares: the storage types' loads and stores in
// OpenCL C, a program function built at a kernel's first run on its device, and launches.
//
// Precision (DESIGN.md §5, the same on every device): a kernel reads its inputs from their
// storage type into float, computes in fp32, and rounds each output once to its storage type:
// fp16 with vstore_half (round to nearest even; no cl_khr_fp16 needed), bf16 as 16-bit words
// rounded to nearest even as engine/common/half.h rounds them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/common/status.h"
#include "engine/ir/graph.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/opencl/device.h"
#include "engine/kernels/opencl/runtime.h"

namespace kiln::kernels::opencl {

/// OpenCL C defining, for storage type `dt` (kF32, kF16, kBF16) under the name `prefix`
/// (`prefix`_T the storage type; `prefix`_LD(p, i) the float value of element i of p;
/// `prefix`_ST(v, p, i) stores float v rounded to the storage type), plus the NaN-propagating
/// MAXP / MINP of the reference kernels.
std::string StoragePrelude(DataType dt, const std::string& prefix = "S");

/// The OpenCL C expression the elementwise kernels compute for unary op `op` (of float x and
/// its parameters p0, p1; elementwise.cc), or nullptr: the fused kernels' activations use the
/// same formulas.
const char* UnaryExpression(ir::OpType op);

/// OpenCL C defining `float act(float x, float p0, float p1)`: the fused kernels' activation
/// `kind` (cpu/ref/fused_activation.h), with the formulas of the elementwise kernels.
std::string ActivationFunction(cpu::ref::ActKind kind);
/// The p0, p1 that `act` takes for `a` (LeakyRelu's alpha; Clip's bounds; GELU's form).
void ActivationParams(const cpu::ref::Activation& a, float& p0, float& p1);

/// How a tiled GEMM is cut: each of the 16 x 16 work items of a group computes TPT x TPT
/// outputs (per_item: 2, 4 or 8), a TILE x TILE tile (TILE = 16 TPT) per group; operands
/// contiguous along k are staged with neighbouring items reading along k.
/// k_split > 1: the k range is cut into k_split parts of SplitChunk values each, each part summed
/// by its own work-groups into fp32 partial sums, which a second kernel adds in part order.
struct GemmTiling {
  int per_item = 4;
  bool a_k_contiguous = false, b_k_contiguous = false;
  int k_split = 1;
};

/// The tiling for an M x N x K GEMM (times `batch`) on `device`: the largest tile that still
/// gives every compute unit a work-group; where even 64-wide tiles are too few, the k range split
/// (when `may_split_k`) so that they are enough; else 32-wide tiles. Or what
/// ForceGemmTileForTesting set.
GemmTiling ChooseGemmTiling(const Device& device, uint64_t m, uint64_t n, uint64_t k,
                            uint64_t batch, bool a_k_contiguous, bool b_k_contiguous,
                            bool may_split_k);

/// The parts a k range of `k` is cut into when asked for `parts` (fewer where parts of whole
/// 16-deep slices cover it), and the values of k in each part but the last.
int SplitK(uint64_t k, int parts);
uint64_t SplitChunk(uint64_t k, int parts);

/// Makes ChooseGemmTiling answer `per_item` (2, 4, 8; 0: choose again) and, where it may split
/// k, `k_split` parts, process-wide: the tests run every tiling on any device.
void ForceGemmTileForTesting(int per_item, int k_split = 1);

/// The #defines (TPT, TILE, A_KFAST, B_KFAST, KSPLIT) GemmTileLoop reads, for tiling `t`.
std::string GemmDefines(const GemmTiling& t);

/// OpenCL C declaring `ulong index` (the kernel's batch entry: grid dim 2) and, when KSPLIT > 1,
/// `uint kc` (the part of the k range this work-group sums: grid dim 2 holds batch x KSPLIT) and
/// K_BEGIN / K_END for GemmTileLoop; for a kernel body that has uint K and the part size KC.
std::string GemmPart(const std::string& index);

/// OpenCL C of the tiled GEMM main loop, to be placed after GemmDefines in a kernel body that
/// declares `reqd_work_group_size(16, 16, 1)`, uint M, N, K and uint row0, col0 (the TILE x TILE
/// tile's origin), and defines the macros A_AT(r, k) and B_AT(k, c) (uint arguments, each in
/// range) as the float values of A and B. It declares `float acc[TPT][TPT]`, the outputs
/// (row0 + ty + 16 i, col0 + tx + 16 j) of work item (tx, ty) = local ids (0, 1), and fills them
/// with acc = 0, then acc = fma(A(r, k), B(k, c), acc) for k = 0 .. K-1 in order: the fp32 order
/// of the AVX-512 GEMM (cpu/avx512/gemm.h), whatever the tiling (K_BEGIN .. K_END - 1 when the
/// kernel defines those macros: one part of a split k range). A and B are staged 16-deep in
/// local memory. Optional hooks for a B whose addresses cost arithmetic (the implicit im2col):
/// GEMM_PRELUDE runs once per item before the k loop (`lid` = 16 ty + tx is defined); GEMM_SLICE
/// at the start of each 16-deep slice from k0, by every item, followed by a barrier; and
/// B_AT_STAGED(l, kk), when defined, replaces B_AT for the item's l-th staged value of the slice,
/// at k = k0 + kk and column col0 + (lid + 256 l) % TILE (B not staged along k).
const char* GemmTileLoop();

/// Whether the OpenCL kernels store `dt` (fp32, fp16, bf16).
bool ClFloatType(DataType dt);

/// The build options every program gets: OpenCL C 1.2, and correctly rounded division and
/// square root where the device offers them (the CPU's arithmetic).
std::string ProgramOptions(const Device& device);

/// One function of an OpenCL program, built at its first use on a device (Device::Program
/// caches the program; the cl_kernel is this object's, as clSetKernelArg is not thread-safe
/// on a shared one).
class ClFunction {
 public:
  ClFunction(std::string what, std::string source, std::string entry)
      : what_(std::move(what)), source_(std::move(source)), entry_(std::move(entry)) {}
  ~ClFunction();
  ClFunction(const ClFunction&) = delete;
  ClFunction& operator=(const ClFunction&) = delete;

  /// The kernel on `device` (building the program the first time); the function keeps the
  /// device open while it holds a kernel of it.
  absl::StatusOr<cl_kernel> Get(const std::shared_ptr<Device>& device);
  const std::string& what() const { return what_; }

 private:
  std::string what_, source_, entry_;
  std::shared_ptr<Device> device_;
  cl_kernel kernel_ = nullptr;
};

/// "<node label> (OpenCL <dtype>)": the `what` of a kernel's errors.
std::string Label(const ir::Node& n, DataType dt);

/// The device that holds device tensor `y` (a kernel's output: where it runs).
absl::StatusOr<std::shared_ptr<Device>> DeviceOf(const ir::Tensor& y, const std::string& what);

/// Device tensor `t` copied to the host (blocking: it waits for the kernels queued before).
absl::StatusOr<ir::Tensor> ReadBack(const ir::Tensor& t, const std::string& what);

/// A kernel's context with the inputs listed in Fetch's `params` on the host (the graph's
/// constant, or a copy read back); the others, and the outputs, are the device context's. The
/// reference's argument reading (cpu/ref) then runs on it unchanged: shapes, axes, indices and
/// lengths that decide a launch.
class HostParams final : public ForwardingContext {
 public:
  explicit HostParams(KernelContext& ctx) : ForwardingContext(ctx) {}

  absl::Status Fetch(const ir::Node& node, const std::vector<int>& params);

  const ir::Tensor* input(int i) const override {
    const auto it = host_.find(i);
    return it != host_.end() ? it->second : inner().input(i);
  }

 private:
  std::map<int, const ir::Tensor*> host_;
  std::map<int, ir::Tensor> owned_;
};

/// A kernel argument: a device tensor's buffer and its offset in elements, or a plain value.
struct TensorArg {
  cl_mem mem;
  cl_ulong offset;  // elements
};
/// The buffer and element offset of device tensor `t`.
absl::StatusOr<TensorArg> ArgOf(const ir::Tensor& t, const std::string& what);

/// Sets the arguments of `k` in order (TensorArg as two: the buffer, then the offset).
absl::Status SetArgs(Device& device, cl_kernel k, const std::string& what, int first,
                     const TensorArg& a);
template <typename T>
absl::Status SetArgs(Device& device, cl_kernel k, const std::string& what, int first, const T& v) {
  return ClStatus(device.cl().clSetKernelArg(k, first, sizeof(T), &v), what);
}
template <typename A, typename B, typename... Rest>
absl::Status SetArgs(Device& device, cl_kernel k, const std::string& what, int first, const A& a,
                     const B& b, const Rest&... rest) {
  RETURN_IF_ERROR(SetArgs(device, k, what, first, a));
  const int next = first + (std::is_same_v<A, TensorArg> ? 2 : 1);
  return SetArgs(device, k, what, next, b, rest...);
}

/// Queues `k` over `n` work items (a 1-D range rounded up to whole groups; the kernel checks
/// its index against n). Nothing for n == 0.
absl::Status Launch1D(Device& device, cl_kernel k, uint64_t n, const std::string& what);

}  // namespace kiln::kernels::opencl
