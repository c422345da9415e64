#include "engine/builder/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/runtime/device_record.h"

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

// The elements of `v` per unit of its symbolic dims (each counted as 1: a dynamic batch scales
// every node alike, so shares of the total stay right); 0 for an unknown rank.
double Elements(const ir::Value* v) {
  if (v == nullptr || !v->shape.rank_known) return 0;
  double n = 1;
  for (const ir::Dim& d : v->shape.dims) n *= d.is_static() ? static_cast<double>(d.value) : 1.0;
  return n;
}

}  // namespace

double NodeFlops(const ir::Node& n) {
  using ir::OpType;
  const ir::Value* y = n.outputs.empty() ? nullptr : n.outputs[0];
  switch (n.op) {
    case OpType::kConv:
    case OpType::kFusedConv: {
      // Each output element: C/group * window multiply-adds; W is [M, C/group, window...].
      const ir::Value* w = n.input(1);
      if (w == nullptr || !w->shape.rank_known || !w->shape.is_static()) return 0;
      const std::vector<int64_t> wd = w->shape.StaticDims();
      double per = 1;
      for (size_t i = 1; i < wd.size(); ++i) per *= static_cast<double>(wd[i]);
      return 2 * per * Elements(y);
    }
    case OpType::kMatMul:
    case OpType::kGemm:
    case OpType::kFusedMatMul: {
      // Each output element: K multiply-adds, K from A's last dim (its first for Gemm's transA).
      const ir::Value* a = n.input(0);
      if (a == nullptr || !a->shape.rank_known || a->shape.rank() == 0) return 0;
      const bool trans = n.op == OpType::kGemm && n.GetInt("transA", 0) != 0;
      const ir::Dim& k = trans ? a->shape.dims.front() : a->shape.dims.back();
      return k.is_static() ? 2 * static_cast<double>(k.value) * Elements(y) : Elements(y);
    }
    case OpType::kAttention: {
      // Q K^T and P V: 2 * 2 * Sq * Skv * D per head; Y holds Sq * D per head, so 4 * Skv per
      // element of Y, Skv from K's second-to-last dim.
      const ir::Value* k = n.input(1);
      if (k == nullptr || !k->shape.rank_known || k->shape.rank() < 2) return 0;
      const ir::Dim& s = k->shape.dims[k->shape.rank() - 2];
      return 4 * (s.is_static() ? static_cast<double>(s.value) : 1.0) * Elements(y);
    }
    case OpType::kLSTM:
    case OpType::kLSTMQuantizedR:
    case OpType::kGRU:
    case OpType::kRNN: {
      // Each step, direction and batch entry: the gates' X W^T and H R^T, 2 * gates * hidden *
      // (input + hidden) flops; W is [dirs, gates * hidden, input], X holds steps * batch * input.
      const ir::Value* x = n.input(0);
      const ir::Value* w = n.input(1);
      if (x == nullptr || w == nullptr || !w->shape.rank_known || w->shape.rank() != 3 ||
          !w->shape.is_static()) {
        return Elements(y);
      }
      const std::vector<int64_t> wd = w->shape.StaticDims();
      const int gates = n.op == OpType::kRNN ? 1 : n.op == OpType::kGRU ? 3 : 4;
      const double hidden = static_cast<double>(wd[1]) / gates;
      const double steps_batch = wd[2] > 0 ? Elements(x) / static_cast<double>(wd[2]) : 0;
      return 2 * static_cast<double>(wd[0]) * static_cast<double>(wd[1]) *
             (static_cast<double>(wd[2]) + hidden) * steps_batch;
    }
    default:
      return Elements(y);
  }
}

absl::StatusOr<Placement> PlaceKernels(ir::Graph& g, const std::vector<ir::Node*>& live,
                                       std::vector<const kernels::KernelDef*>& defs,
                                       const kernels::DeviceDescription& device, bool no_fallback,
                                       const Placement& subgraphs, spdlog::logger& log) {
  Placement p;
  p.device = device;
  p.on_device.assign(g.nodes().size(), false);
  p.fallback.assign(g.nodes().size(), "");
  if (!device.opencl) return p;
  const kernels::Registry& reg = kernels::Registry::Default();
  std::vector<std::string> refused;
  for (ir::Node* n : live) {
    const double flops = NodeFlops(*n);
    p.flops += flops;
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
          p.device_flops += flops;
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
  // Where each node runs, for the build log (and a remote client's stream): the device unless
  // listed here.
  constexpr size_t kListed = 50;
  for (size_t i = 0; i < refused.size() && i < kListed; ++i) {
    log.info("placement: on the CPU: {}", refused[i]);
  }
  if (refused.size() > kListed) {
    log.info("placement: on the CPU: {} more node(s) (kiln inspect lists them all)",
             refused.size() - kListed);
  }
  p.device_kernels += subgraphs.device_kernels;
  p.cpu_kernels += subgraphs.cpu_kernels;
  p.transfers += subgraphs.transfers;
  p.flops += subgraphs.flops;
  p.device_flops += subgraphs.device_flops;
  p.subgraphs = subgraphs.subgraphs;
  log.info(
      "placement: {} kernel(s) on {} ({:.1f}% of the estimated {:.3g} FLOPs per run), {} on the "
      "CPU, {} tensor(s) copied between them per run{}",
      p.device_kernels, device.Describe(), p.flops > 0 ? 100.0 * p.device_flops / p.flops : 100.0,
      p.flops, p.cpu_kernels, p.transfers,
      p.subgraphs > 0 ? absl::StrCat(" (", p.subgraphs, " subgraph(s) included)") : "");
  return p;
}

void FillDevice(const Placement& p, v1::Device& out) {
  runtime::RecordDevice(p.device, out);
  if (!p.device.opencl) return;
  out.set_device_kernels(p.device_kernels);
  out.set_cpu_kernels(p.cpu_kernels);
  out.set_transfers(p.transfers);
  out.set_flops(p.flops);
  out.set_device_flops(p.device_flops);
}

}  // namespace kiln::builder
