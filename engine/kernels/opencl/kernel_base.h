// What every OpenCL kernel of kernels/opencl shares: the storage types' loads and stores in
// OpenCL C, a program function built at a kernel's first run on its device, and launches.
//
// Precision (DESIGN.md §5, the same on every device): a kernel reads its inputs from their
// storage type into float, computes in fp32, and rounds each output once to its storage type:
// fp16 with vstore_half (round to nearest even; no cl_khr_fp16 needed), bf16 as 16-bit words
// rounded to nearest even as engine/common/half.h rounds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/common/status.h"
#include "engine/ir/graph.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
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

/// OpenCL C of the tiled GEMM main loop, to be placed in a kernel body that declares
/// `reqd_work_group_size(16, 16, 1)`, uint M, N, K and uint row0, col0 (the 64 x 64 tile's
/// origin), and defines the macros A_AT(r, k) and B_AT(k, c) (uint arguments, each in range) as
/// the float values of A and B. It declares `float acc[4][4]`, the outputs (row0 + ty + 16 i,
/// col0 + tx + 16 j) of work item (tx, ty) = local ids (0, 1), and fills them with acc = 0, then
/// acc = fma(A(r, k), B(k, c), acc) for k = 0 .. K-1 in order: the fp32 order of the AVX-512
/// GEMM (cpu/avx512/gemm.h). A and B are staged 16-deep in local memory.
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
