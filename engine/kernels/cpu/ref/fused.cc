#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

void RegisterFused(Registry& r) {}

}  // namespace kiln::kernels::cpu::ref
