#include "engine/kernels/registry.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels {

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kCpu:
      return "cpu";
  }
  return "?";
}

const char* IsaName(Isa i) {
  switch (i) {
    case Isa::kRef:
      return "ref";
  }
  return "?";
}

void Registry::Add(KernelDef def) { defs_.push_back(std::move(def)); }

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

absl::StatusOr<const KernelDef*> Registry::Find(const ir::Node& node) const {
  bool any = false;
  DataType seen = DataType::kUndefined;
  for (const KernelDef& d : defs_) {
    if (d.op != node.op) continue;
    any = true;
    DataType t = KernelKeyType(node, d.type_source);
    seen = t;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), t) != d.dtypes.end()) return &d;
  }
  if (!any) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " unsupported op: no kernel for ", ir::OpName(node.op)));
  }
  return absl::UnimplementedError(absl::StrCat(
      node.Label(), " unsupported dtype ", DataTypeOnnxName(seen), " for ", ir::OpName(node.op)));
}

const Registry& Registry::Default() {
  static const Registry* reg = [] {
    auto* r = new Registry();
    cpu::ref::RegisterAll(*r);
    return r;
  }();
  return *reg;
}

}  // namespace kiln::kernels
