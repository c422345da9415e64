// The explicit list of oneDNN-backed kernel families. oneDNN picks its own code path (AVX2,
// AVX-512, AMX) at run time; Registry::Find picks these kernels over the reference ones when the
// running CPU has the features of Isa::kDnnl (and KernelDef::cpu_features) and their `supports`
// predicate accepts the node. oneDNN runs on the same OpenMP runtime as the engine (Debian's
// libdnnl is built with DNNL_CPU_RUNTIME=OMP), so the engine's thread count applies to it.
#pragma once

#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::dnnl {

void RegisterConv(Registry& r);  // conv_dnnl.cc: 2-D Conv and FusedConv on float and bfloat16

/// Registers every oneDNN kernel.
inline void RegisterDnnl(Registry& r) { RegisterConv(r); }

}  // namespace kiln::kernels::cpu::dnnl
