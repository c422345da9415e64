#include "engine/builder/placement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace kiln::builder {
namespace {

bool IsFloat(DataType dt) {
  return dt == DataType::kF32 || dt == DataType::kF16 || dt == DataType::kBF16 ||
         dt == DataType::kF64;
}

// Why `n` stays on the CPU before any kernel is asked: "" when the device may take it.
std::string CpuOnly(const ir::Node& n) {
  if (n.HasSubgraphAttributes()) return "control flow runs on the CPU";
  if (n.TouchesContainers()) return "sequences and optionals run on the CPU";
  bool any_float = false;
  for (const ir::Value* v : n.outputs) any_float |= v != nullptr && IsFloat(v->dtype);
  if (!any_float) return "an integer or bool computation (shapes, indices) runs on the CPU";
  return "";
}

}  // namespace

absl::StatusOr<Placement> PlaceKernels(ir::Graph& g, const std::vector<ir::Node*>& live,
                                       std::vector<const kernels::KernelDef*>& defs,
                                       const kernels::DeviceDescription& device, bool no_fallback,
                                       spdlog::logger& log) {
  Placement p;
  p.device = device;
  p.on_device.assign(g.nodes().size(), false);
  p.fallback.assign(g.nodes().size(), "");
  if (!device.opencl) return p;
  const kernels::Registry& reg = kernels::Registry::Default();
  std::vector<std::string> refused;
  for (ir::Node* n : live) {
    std::string why = CpuOnly(*n);
    if (why.empty()) {
      absl::StatusOr<const kernels::KernelDef*> def = reg.FindOn(*n, kernels::Backend::kOpenCl, 0);
      if (def.ok()) {
        ir::Node copy = *n;
        copy.attrs[kernels::kBackendAttr] = ir::Attribute::String("opencl");
        absl::StatusOr<std::unique_ptr<kernels::Kernel>> k = (*def)->factory(copy);
        if (k.ok()) {
          n->attrs[kernels::kBackendAttr] = ir::Attribute::String("opencl");
          defs[n->id] = *def;
          p.on_device[n->id] = true;
          ++p.device_kernels;
          continue;
        }
        why = std::string(k.status().message());
      } else {
        // "[node 'x' (Op) #3] unsupported op: no kernel for Op on OpenCL" -> the reason alone.
        why = std::string(def.status().message());
        const size_t close = why.find("] ");
        if (why.rfind("[node", 0) == 0 && close != std::string::npos) why = why.substr(close + 2);
      }
    }
    p.fallback[n->id] = why;
    ++p.cpu_kernels;
    refused.push_back(absl::StrCat(n->Label(), ": ", why));
  }
  // Transfers: each tensor made on one side and read on the other (graph inputs come from the
  // host, graph outputs go back to it; constants count once per session, not here).
  for (const auto& v : g.values()) {
    if (v->constant) continue;
    const ir::Node* prod = v->producer;
    const bool made_on_device = prod != nullptr && p.on_device[prod->id];
    bool to_device = false, to_host = v->is_graph_output;
    for (const ir::Node* c : v->consumers) {
      (p.on_device[c->id] ? to_device : to_host) = true;
    }
    if ((made_on_device && to_host) || (!made_on_device && to_device)) ++p.transfers;
  }
  if (no_fallback && !refused.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(refused.size(), " node(s) cannot run on ", device.Describe(),
                     " and --no-fallback forbids the CPU: ", absl::StrJoin(refused, "; ")));
  }
  log.info("placement: {} kernel(s) on {}, {} on the CPU, {} tensor(s) copied between them per run",
           p.device_kernels, device.Describe(), p.cpu_kernels, p.transfers);
  return p;
}

void FillDevice(const Placement& p, v1::Device& out) {
  const kernels::DeviceDescription& d = p.device;
  out.set_kind(d.opencl ? "opencl" : "cpu");
  if (!d.opencl) return;
  out.set_platform(d.platform);
  out.set_device(d.device);
  out.set_platform_name(d.platform_name);
  out.set_platform_version(d.platform_version);
  out.set_name(d.name);
  out.set_vendor(d.vendor);
  out.set_version(d.version);
  out.set_driver_version(d.driver_version);
  out.set_opencl_c_version(d.opencl_c_version);
  out.set_type(d.type);
  for (const std::string& c : d.capabilities) out.add_capabilities(c);
  out.set_compute_units(d.compute_units);
  out.set_global_mem_bytes(d.global_mem_bytes);
  out.set_device_kernels(p.device_kernels);
  out.set_cpu_kernels(p.cpu_kernels);
  out.set_transfers(p.transfers);
}

}  // namespace kiln::builder
