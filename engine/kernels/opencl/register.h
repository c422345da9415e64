// The OpenCL backend's kernel families, registered with the one registry (registry.cc) when
// Kiln is built with KILN_WITH_OPENCL.
#pragma once

#include "engine/kernels/registry.h"

namespace kiln::kernels::opencl {

/// Elementwise unary, activation and broadcasting binary ops (elementwise.cc).
void RegisterElementwise(Registry& r);

/// Every OpenCL family.
void RegisterOpenCl(Registry& r);

}  // namespace kiln::kernels::opencl
