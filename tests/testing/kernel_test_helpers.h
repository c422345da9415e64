// Helpers shared by the tests that hold a fast kernel against the reference kernel: a
// KernelContext over given tensors, random inputs and their magnitudes (for summation-order
// bounds), the CPU-feature checks and the kernel Registry::Find picks for an op and a dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/cpu_features.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {

/// The CPU features of the AVX-512 kernels that also take bfloat16 (AVX-512 and AVX512_BF16).
inline uint64_t Avx512Bf16Features() {
  return kernels::IsaCpuFeatures(kernels::Isa::kAvx512) | kCpuAvx512Bf16;
}

/// Whether the running CPU has every one of `features`.
inline bool CpuHas(uint64_t features) { return (DetectCpuFeatures() & features) == features; }

/// Whether the running CPU has AVX-512 and AVX512_BF16 (Avx512Bf16Features).
inline bool HasAvx512Bf16() { return CpuHas(Avx512Bf16Features()); }

/// A KernelContext over `in` (an undefined tensor is an omitted input) with one output, in fresh
/// memory filled with 0x5a bytes so that an element the kernel does not write shows; or, with
/// `output_over` an input index, over that input's bytes (as the memory plan lays a FusedConv's
/// Y over its residual Z).
class TensorContext final : public kernels::KernelContext {
 public:
  explicit TensorContext(std::vector<ir::Tensor> in, int output_over = -1)
      : in_(std::move(in)), output_over_(output_over) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(in_.size()) && in_[i].defined() ? &in_[i] : nullptr;
  }
  int num_outputs() const override { return 1; }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (output_over_ >= 0) {
      const ir::Tensor& under = in_.at(output_over_);
      EXPECT_EQ(under.dims(), dims);
      EXPECT_EQ(under.dtype(), dtype);
      out_ = under;  // shares the bytes
      return &out_;
    }
    ASSIGN_OR_RETURN(out_, ir::Tensor::Allocate(dtype, std::move(dims)));
    std::memset(out_.raw_data(), 0x5a, out_.byte_size());
    return &out_;
  }
  bool output_requested(int i) const override { return true; }
  ir::Tensor& out() { return out_; }

 private:
  std::vector<ir::Tensor> in_;
  int output_over_;
  ir::Tensor out_;
};

/// A tensor of `dims` and `dt` (kF32, kF16 or kBF16) of standard normal values (rounded to dt).
inline ir::Tensor RandomNormal(const std::vector<int64_t>& dims, DataType dt, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  int64_t n = 1;
  for (int64_t v : dims) n *= v;
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  if (dt == DataType::kF16) return MakeHalf(dims, v);
  return dt == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

/// |t| as fp32 (bf16 and fp16 values convert exactly).
inline ir::Tensor AbsToFloat(const ir::Tensor& t) {
  std::vector<float> v = ToFloats(t);
  for (float& f : v) f = std::fabs(f);
  return MakeFloat(t.dims(), v);
}

/// The kernel Registry::Find picks, on a CPU with `features`, for a node `op` whose only input
/// is of `dtype`.
inline absl::StatusOr<const kernels::KernelDef*> FindKernelFor(ir::OpType op, DataType dtype,
                                                               uint64_t features) {
  ir::Graph g;
  ir::Node* n = g.AddNode(op, "pick");
  ASSIGN_OR_RETURN(ir::Value * v, g.AddValue("x"));
  v->dtype = dtype;
  n->inputs.push_back(v);
  return kernels::Registry::Default().Find(*n, features);
}

/// Runs `spec` on the kernel Registry::Find picks (twice: a kernel keeps nothing between runs it
/// should not) and on the reference kernel, and expects the same outputs, dtype, dims and bytes:
/// the check of the data-movement and selection kernels, which must give the reference's bits.
inline void ExpectSameBytesAsReference(NodeSpec spec, const std::string& what) {
  SCOPED_TRACE(what);
  spec.runs = 2;
  spec.cpu_features = std::nullopt;
  auto fast = RunNode(spec);
  spec.cpu_features = 0;
  auto ref = RunNode(spec);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_EQ(fast->size(), ref->size());
  for (size_t i = 0; i < ref->size(); ++i) {
    const ir::Tensor& a = (*fast)[i];
    const ir::Tensor& b = (*ref)[i];
    ASSERT_EQ(a.defined(), b.defined()) << "output " << i;
    if (!b.defined()) continue;
    ASSERT_EQ(a.dtype(), b.dtype()) << "output " << i;
    ASSERT_EQ(a.dims(), b.dims()) << "output " << i;
    ASSERT_EQ(a.byte_size(), b.byte_size());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0) << "output " << i;
  }
}

}  // namespace kiln::testing
