// Kernel registry. Kernels are keyed {op, dtype, backend, isa}; families register through
// explicit RegisterXxx(Registry&) calls listed in one place (register_all.cc), never through
// static initialisers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels {

/// Where a kernel runs: the CPU, or an OpenCL device (kernels/opencl; DESIGN.md §12).
enum class Backend { kCpu, kOpenCl };
/// Instruction sets, slowest first: `Find` prefers the highest one the CPU supports. kDnnl is
/// oneDNN, which chooses its own instructions at run time. kOpenClC: OpenCL C programs of
/// kernels/opencl, compiled for the device; kClBlast: CLBlast's tuned kernels.
enum class Isa { kRef, kAvx512, kDnnl, kOpenClC, kClBlast };

/// The node attribute that puts a node on a device: "opencl" (the placement pass sets it; absent:
/// the CPU).
inline constexpr char kBackendAttr[] = "kiln_backend";

/// The backend `node` is placed on (kBackendAttr).
Backend BackendOf(const ir::Node& node);

const char* BackendName(Backend b);
const char* IsaName(Isa i);

/// The CPU features (CpuFeature bits) every kernel of `isa` needs: 0 for kRef; AVX-512
/// F/BW/VL/DQ with FMA and F16C for kAvx512; SSE4.2 for kDnnl (oneDNN's floor is SSE4.1). A
/// kernel may need more (KernelDef::cpu_features).
uint64_t IsaCpuFeatures(Isa isa);

/// Whether the running CPU (DetectCpuFeatures) has every feature of `isa`.
bool CpuHasIsa(Isa isa);

/// Which tensor's dtype selects the kernel: an input index, or `kOutputType` for output 0
/// (ops whose dtype comes from an attribute, like Constant or Cast's target).
constexpr int kOutputType = -1;

/// One registered kernel.
struct KernelDef {
  ir::OpType op;
  std::vector<DataType> dtypes;  // the dtype of `type_source` must be one of these
  int type_source = 0;
  Backend backend = Backend::kCpu;
  Isa isa = Isa::kRef;
  KernelFactory factory = nullptr;
  /// CPU features this kernel needs beyond IsaCpuFeatures(isa) (e.g. kCpuAvx512Bf16).
  uint64_t cpu_features = 0;
  /// Optional narrower test than `dtypes` (e.g. a fast Cast only for some dtype pairs); a kernel
  /// whose `supports` says no is skipped by Find.
  bool (*supports)(const ir::Node& node) = nullptr;
  /// A specialised kernel chosen, for the nodes it supports, over kernels of a higher Isa (a
  /// depthwise convolution of its own, faster than oneDNN's general convolution).
  bool preferred = false;
  /// The kernel runs OpenMP parallel regions (set for every kDnnl kernel by Registry::Add:
  /// oneDNN's primitives; and for the recurrent kernels' teams, which synchronise every time
  /// step), where the other kernels' loops run on kernels/cpu/parallel.h's pool.
  bool openmp_regions = false;
};

/// The registry; `Default()` holds every kernel of the build.
class Registry {
 public:
  void Add(KernelDef def);
  /// Convenience: a reference CPU kernel for `op` over `dtypes`, keyed by input `type_source`.
  void AddRef(ir::OpType op, std::vector<DataType> dtypes, KernelFactory factory,
              int type_source = 0);

  /// The kernel for `node` on its backend (BackendOf) given its value dtypes: of those taking
  /// the dtype whose features the running CPU has (DetectCpuFeatures), a preferred one, else the
  /// one of the highest Isa; on the CPU the reference kernel is the fallback. Errors:
  /// Unimplemented "unsupported op" when the op has no kernel at all on that backend,
  /// Unimplemented "unsupported dtype" when none takes the dtype (or supports the node).
  absl::StatusOr<const KernelDef*> Find(const ir::Node& node) const;
  /// As above for a CPU with `cpu_features` (tests pass 0 to get the reference kernel).
  absl::StatusOr<const KernelDef*> Find(const ir::Node& node, uint64_t cpu_features) const;
  /// As above on `backend`, whatever the node's own placement (the placement pass asks).
  absl::StatusOr<const KernelDef*> FindOn(const ir::Node& node, Backend backend,
                                          uint64_t cpu_features) const;

  const std::vector<KernelDef>& defs() const { return defs_; }

  /// The registry with every kernel family of this build.
  static const Registry& Default();

 private:
  std::vector<KernelDef> defs_;
};

/// The reference kernel of `node` (Registry::Default().FindOn(node, kCpu, 0)), for a fast kernel
/// to run what it does not cover.
absl::StatusOr<std::unique_ptr<Kernel>> ReferenceKernel(const ir::Node& node);

/// The dtype that keys `node`'s kernel under `type_source` (kUndefined when not known).
DataType KernelKeyType(const ir::Node& node, int type_source);

}  // namespace kiln::kernels
