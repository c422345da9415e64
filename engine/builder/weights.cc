#include "engine/builder/weights.h"

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/dnnl/register.h"

namespace kiln::builder {

// Stores the constant bf16, fp16 or fp32 B of each MatMul / FusedMatMul / Gemm (B as Gemm reads
// it, transB applied) that runs on the AVX-512 GEMM packed as that GEMM reads it (kernel.h,
// kPackedBAttr), so no run gathers a weight's column strips out of row-major memory again: that was
// ~16% of a BERT-base bf16 run and ~20% of an fp32 GEMM at its shapes (an fp16 strip is still
// widened to fp32 per run, but from contiguous memory). Only a B read by that node alone; a bf16
// one only when free of subnormal values (it then always takes the dot-product path, whose numbers
// packing does not change; fp32 and fp16 B feed the fp32 kernels, packed or not, the same values).
// An fp32 weight, shared with the import (and so with the report's reference), is packed only as
// the blob is written (`encodings`): the graph keeps it plain, and the node's kPackedBAttr is
// taken off again for runs in memory. Returns the CPU features the packed engine requires.
absl::StatusOr<uint64_t> PackWeights(const std::vector<ir::Node*>& live,
                                     const std::vector<const kernels::KernelDef*>& defs, bool f32,
                                     std::map<int, plan::WeightEncoding>& encodings,
                                     std::vector<ir::Node*>& packed_at_write, BuildSummary& sum,
                                     spdlog::logger& logger) {
  uint64_t required = 0;
  int fp32 = 0, fp16 = 0;
  for (ir::Node* n : live) {
    if (n->op != ir::OpType::kMatMul && n->op != ir::OpType::kFusedMatMul &&
        n->op != ir::OpType::kGemm) {
      continue;
    }
    const kernels::KernelDef* def = defs[n->id];
    ir::Value* b = n->inputs.size() > 1 ? n->inputs[1] : nullptr;
    const DataType t = b ? b->dtype : DataType::kUndefined;
    if (!def || def->isa != kernels::Isa::kAvx512 || !b || !b->constant ||
        (t != DataType::kBF16 && t != DataType::kF32 && t != DataType::kF16) ||
        n->inputs[0] == nullptr || n->inputs[0]->dtype != t || b->constant->rank() != 2 ||
        b->consumers.size() != 1 || b->is_graph_output || b->is_graph_input ||
        (t == DataType::kF32 && !f32)) {
      continue;
    }
    const ir::Tensor& w = *b->constant;
    if (t == DataType::kBF16 &&
        !kernels::cpu::avx512::Bf16DotPathAllowed(w.data<uint16_t>(), w.num_elements())) {
      continue;
    }
    // Gemm's transB reads B [N, K]: element (i, j) of the logical [K, N] at j * K + i.
    const bool trans = n->op == ir::OpType::kGemm && n->GetInt("transB", 0) != 0;
    const int64_t k = trans ? w.dim(1) : w.dim(0), nn = trans ? w.dim(0) : w.dim(1);
    const int64_t rs = trans ? 1 : nn, cs = trans ? k : 1;
    const int64_t strips = (nn + 63) / 64;
    if (t == DataType::kF32) {
      const int64_t strip = kernels::cpu::avx512::PackedBStripElemsF32(k);
      plan::WeightEncoding e;
      e.dims = {strips, strip};
      e.bytes = static_cast<uint64_t>(strips * strip) * sizeof(float);
      e.write = [w, k, nn, rs, cs](char* dst) {
        kernels::cpu::avx512::PackBF32Strided(w.data<float>(), k, nn, rs, cs,
                                              reinterpret_cast<float*>(dst));
      };
      encodings[b->id] = std::move(e);
      packed_at_write.push_back(n);
      ++fp32;
    } else {
      const bool half = t == DataType::kF16;
      const int64_t strip = half ? kernels::cpu::avx512::PackedBStripElemsF32(k)
                                 : kernels::cpu::avx512::PackedBStripElems(k);
      ASSIGN_OR_RETURN(ir::Tensor packed, ir::Tensor::AllocateUninitialized(t, {strips, strip}));
      if (half) {
        kernels::cpu::avx512::PackBHalfStrided(w.data<uint16_t>(), k, nn, rs, cs,
                                               packed.data<uint16_t>());
        ++fp16;
      } else {
        kernels::cpu::avx512::PackBBf16Strided(w.data<uint16_t>(), k, nn, rs, cs,
                                               packed.data<uint16_t>());
      }
      b->constant = std::move(packed);
      b->shape = ir::Shape::Of({strips, strip});
    }
    n->attrs[kernels::kPackedBAttr] = ir::Attribute::Ints({k, nn});
    required |= kernels::IsaCpuFeatures(def->isa) | def->cpu_features;
    ++sum.packed_weights;
  }
  if (sum.packed_weights > 0) {
    logger.info(
        "weights: {} GEMM weight(s) stored packed for the AVX-512 GEMM ({} bf16, {} fp16, {} fp32)",
        sum.packed_weights, sum.packed_weights - fp32 - fp16, fp16, fp32);
  }
  return required;
}

// Stores the W of each convolution the oneDNN kernel runs also in the layout its kernel chooses
// on this machine (kernels/cpu/dnnl/register.h, PrepackConvWeights: oneDNN's blocked layout, or
// the GEMM path's strips), as a constant the node reads beside W: a run whose kernel chooses that
// layout reads it from the blob instead of laying W out in memory of its own at its first run
// (ResNet-50 fp32: first run 164 -> 77 ms; 70 with its Gemm packed by PackWeights). W itself stays
// (the reference kernel reads it, and runs on another CPU lay it out as before). Returns how many
// were stored.
absl::StatusOr<int> PrepackConvolutions(ir::Graph& g, const std::vector<ir::Node*>& live,
                                        const std::vector<const kernels::KernelDef*>& defs,
                                        spdlog::logger& logger) {
  int count = 0;
  uint64_t bytes = 0;
  for (ir::Node* n : live) {
    const kernels::KernelDef* def = defs[n->id];
    if ((n->op != ir::OpType::kConv && n->op != ir::OpType::kFusedConv) || !def ||
        def->isa != kernels::Isa::kDnnl) {
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<kernels::cpu::dnnl::PrepackedConvWeights> pre,
                     kernels::cpu::dnnl::PrepackConvWeights(*n, *def));
    if (!pre) continue;
    ASSIGN_OR_RETURN(ir::Value * v,
                     g.AddValue(absl::StrCat(n->name, "/W laid out for its kernel")));
    v->dtype = DataType::kU8;
    v->shape = ir::Shape::Of(pre->bytes.dims());
    bytes += pre->bytes.byte_size();
    v->constant = std::move(pre->bytes);
    n->inputs.resize(kernels::cpu::dnnl::kPrepackedWeightsInput, nullptr);
    n->inputs.push_back(v);
    n->attrs[kernels::cpu::dnnl::kPrepackedWeightsAttr] = ir::Attribute::Ints(std::move(pre->desc));
    ++count;
  }
  if (count > 0) {
    g.RebuildEdges();
    logger.info(
        "weights: {} convolution weight(s) also stored as their kernels lay them out ({} bytes)",
        count, bytes);
  }
  return count;
}

}  // namespace kiln::builder
