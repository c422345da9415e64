#include "engine/kernels/registry.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/cpu/ref/register.h"
#if KILN_WITH_OPENCL
#include "engine/kernels/opencl/register.h"
#endif

namespace kiln::kernels {

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kOpenCl:
      return "opencl";
  }
  return "?";
}

const char* IsaName(Isa i) {
  switch (i) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kDnnl:
      return "dnnl";
    case Isa::kOpenClC:
      return "opencl-c";
    case Isa::kClBlast:
      return "clblast";
  }
  return "?";
}

uint64_t IsaCpuFeatures(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return 0;
    case Isa::kAvx512:
      return kCpuAvx512F | kCpuAvx512Bw | kCpuAvx512Vl | kCpuAvx512Dq | kCpuFma | kCpuF16c;
    case Isa::kDnnl:
      return kCpuSse42;
    case Isa::kOpenClC:
    case Isa::kClBlast:
      return 0;  // the device's, checked when it opens
  }
  return ~0ull;
}

bool CpuHasIsa(Isa isa) {
  const uint64_t need = IsaCpuFeatures(isa);
  return (DetectCpuFeatures() & need) == need;
}

void Registry::Add(KernelDef def) {
  if (def.isa == Isa::kDnnl) def.openmp_regions = true;
  defs_.push_back(std::move(def));
}

void Registry::AddRef(ir::OpType op, std::vector<DataType> dtypes, KernelFactory factory,
                      int type_source) {
  Add(KernelDef{op, std::move(dtypes), type_source, Backend::kCpu, Isa::kRef, factory});
}

DataType KernelKeyType(const ir::Node& node, int type_source) {
  const ir::Value* v = nullptr;
  if (type_source == kOutputType) {
    v = node.outputs.empty() ? nullptr : node.outputs[0];
  } else {
    v = node.input(type_source);
  }
  return v ? v->dtype : DataType::kUndefined;
}

Backend BackendOf(const ir::Node& node) {
  const auto it = node.attrs.find(kBackendAttr);
  return it != node.attrs.end() && it->second.s == "opencl" ? Backend::kOpenCl : Backend::kCpu;
}

absl::StatusOr<const KernelDef*> Registry::Find(const ir::Node& node) const {
  return Find(node, DetectCpuFeatures());
}

absl::StatusOr<const KernelDef*> Registry::Find(const ir::Node& node, uint64_t cpu_features) const {
  return FindOn(node, BackendOf(node), cpu_features);
}

absl::StatusOr<const KernelDef*> Registry::FindOn(const ir::Node& node, Backend backend,
                                                  uint64_t cpu_features) const {
  bool any = false;
  DataType seen = DataType::kUndefined;
  const KernelDef* best = nullptr;
  for (const KernelDef& d : defs_) {
    if (d.op != node.op || d.backend != backend) continue;
    any = true;
    DataType t = KernelKeyType(node, d.type_source);
    seen = t;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), t) == d.dtypes.end()) continue;
    const uint64_t need = IsaCpuFeatures(d.isa) | d.cpu_features;
    if ((cpu_features & need) != need) continue;
    if (d.supports != nullptr && !d.supports(node)) continue;
    if (best == nullptr || std::pair(d.preferred, d.isa) > std::pair(best->preferred, best->isa)) {
      best = &d;
    }
  }
  if (best != nullptr) return best;
  const char* on = backend == Backend::kCpu ? "" : " on OpenCL";
  if (!any) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " unsupported op: no kernel for ", ir::OpName(node.op), on));
  }
  return absl::UnimplementedError(absl::StrCat(node.Label(), " unsupported dtype ",
                                               DataTypeOnnxName(seen), " for ", ir::OpName(node.op),
                                               on));
}

const Registry& Registry::Default() {
  static const Registry* reg = [] {
    auto* r = new Registry();
    cpu::ref::RegisterAll(*r);
    cpu::avx512::RegisterAvx512(*r);
    cpu::dnnl::RegisterDnnl(*r);
#if KILN_WITH_OPENCL
    opencl::RegisterOpenCl(*r);
#endif
    return r;
  }();
  return *reg;
}

absl::StatusOr<std::unique_ptr<Kernel>> ReferenceKernel(const ir::Node& node) {
  ASSIGN_OR_RETURN(const KernelDef* def, Registry::Default().FindOn(node, Backend::kCpu, 0));
  return def->factory(node);
}

}  // namespace kiln::kernels
