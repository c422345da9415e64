// The oneDNN helpers shared by the convolution and deconvolution kernels (dnnl_common.h).
#include "engine/kernels/cpu/dnnl/dnnl_common.h"

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/gemm.h"

namespace kiln::kernels::cpu::dnnl {

absl::StatusOr<dn::engine*> CpuEngine() {
  static dn::engine* engine = []() -> dn::engine* {
    try {
      return new dn::engine(dn::engine::kind::cpu, 0);
    } catch (const dn::error&) {
      return nullptr;
    }
  }();
  if (engine == nullptr) return absl::InternalError("oneDNN has no CPU engine");
  return engine;
}

dn::memory::data_type DnnlType(DataType t) {
  return t == DataType::kBF16 ? dn::memory::data_type::bf16 : dn::memory::data_type::f32;
}

bool Bf16Allowed(const ir::Tensor& t) {
  return avx512::Bf16DotPathAllowed(t.data<uint16_t>(), t.num_elements());
}

const float* BiasAsF32(const ir::Tensor* b, std::vector<float>& scratch) {
  if (b == nullptr) return nullptr;
  if (b->dtype() == DataType::kF32) return b->data<float>();
  scratch.resize(b->num_elements());
  avx512::ConvertArray(b->dtype(), DataType::kF32, b->raw_data(), scratch.data(),
                       b->num_elements());
  return scratch.data();
}

dn::memory ReorderedWeights(const ir::Tensor& w, const dn::memory::desc& user,
                            const dn::memory::desc& want, dn::engine& engine) {
  dn::memory weights(want, engine);
  std::vector<float> w_f32;
  if (w.dtype() == DataType::kF16) {
    w_f32.resize(w.num_elements());
    avx512::ConvertArray(DataType::kF16, DataType::kF32, w.raw_data(), w_f32.data(),
                         w.num_elements());
  }
  dn::memory plain(user, engine, w_f32.empty() ? const_cast<void*>(w.raw_data()) : w_f32.data());
  dn::stream stream(engine);
  dn::reorder(plain, weights).execute(stream, plain, weights);
  stream.wait();
  return weights;
}

void PrimitiveRun::Connect(const dn::primitive_desc_base& pd, const dn::memory::desc& src,
                           const dn::memory::desc& dst, const dn::memory::desc* bias,
                           dn::engine& engine) {
  if (pd.src_desc() != src) {
    src_blocked = dn::memory(pd.src_desc(), engine);
    to_blocked = dn::reorder(dn::reorder::primitive_desc(engine, src, engine, pd.src_desc()));
  }
  if (pd.dst_desc() != dst) {
    dst_blocked = dn::memory(pd.dst_desc(), engine);
    from_blocked = dn::reorder(dn::reorder::primitive_desc(engine, pd.dst_desc(), engine, dst));
  }
  stream = dn::stream(engine);
  src_mem = dn::memory(src, engine, DNNL_MEMORY_NONE);
  dst_mem = dn::memory(dst, engine, DNNL_MEMORY_NONE);
  args = {{DNNL_ARG_SRC, to_blocked ? src_blocked : src_mem},
          {DNNL_ARG_WEIGHTS, weights},
          {DNNL_ARG_DST, from_blocked ? dst_blocked : dst_mem}};
  if (bias != nullptr) {
    bias_mem = dn::memory(*bias, engine, DNNL_MEMORY_NONE);
    args.emplace(DNNL_ARG_BIAS, bias_mem);
  }
  if (to_blocked) to_args = {{DNNL_ARG_FROM, src_mem}, {DNNL_ARG_TO, src_blocked}};
  if (from_blocked) from_args = {{DNNL_ARG_FROM, dst_blocked}, {DNNL_ARG_TO, dst_mem}};
}

absl::Status PrimitiveRun::Execute(const ir::Node& node, const char* what, const void* src,
                                   void* dst, const float* bias) {
  try {
    src_mem.set_data_handle(const_cast<void*>(src));
    dst_mem.set_data_handle(dst);
    if (bias != nullptr) bias_mem.set_data_handle(const_cast<float*>(bias));
    if (to_blocked) to_blocked.execute(stream, to_args);
    primitive.execute(stream, args);
    if (from_blocked) from_blocked.execute(stream, from_args);
    stream.wait();
  } catch (const dn::error& e) {
    return absl::InternalError(absl::StrCat(node.Label(), " oneDNN ", what, " failed: ", e.what()));
  }
  return absl::OkStatus();
}

void AddF32Bf16F16(Registry& r, KernelDef def) {
  def.dtypes = {DataType::kF32};
  def.cpu_features = 0;
  r.Add(def);
  def.dtypes = {DataType::kBF16};
  def.cpu_features = IsaCpuFeatures(Isa::kAvx512) | kCpuAvx512Bf16;
  r.Add(def);
  def.dtypes = {DataType::kF16};
  def.cpu_features = IsaCpuFeatures(Isa::kAvx512);
  r.Add(def);
}

}  // namespace kiln::kernels::cpu::dnnl
