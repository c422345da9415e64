#include "engine/kernels/opencl/cl_api.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kiln::kernels::opencl {
namespace {

absl::StatusOr<const ClApi*> Load() {
  const char* env = std::getenv("KILN_OPENCL_LIBRARY");
  const std::string lib = env != nullptr && *env != '\0' ? env : "libOpenCL.so.1";
  // RTLD_LOCAL: the loader's symbols stay out of the process namespace (CLBlast, loaded later,
  // resolves its own through the same library, which dlopen returns again).
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrCat(
        "OpenCL is not available on this machine: cannot load the OpenCL ICD loader '", lib, "' (",
        why != nullptr ? why : "unknown error",
        "); install one (Debian: ocl-icd-libopencl1) and a driver for the device, or set "
        "KILN_OPENCL_LIBRARY to the loader's path"));
  }
  static ClApi api;
#define KILN_CL_LOAD(name)                                                                    \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name));                      \
  if (api.name == nullptr) {                                                                  \
    return absl::UnavailableError(absl::StrCat("the OpenCL library '", lib, "' lacks " #name, \
                                               " (an OpenCL 1.2 loader is needed)"));         \
  }
  KILN_CL_FUNCTIONS(KILN_CL_LOAD)
#undef KILN_CL_LOAD
  return &api;
}

}  // namespace

absl::StatusOr<const ClApi*> Cl() {
  static const absl::StatusOr<const ClApi*> api = Load();
  return api;
}

std::string ClErrorName(cl_int code) {
  const char* name = nullptr;
  switch (code) {
#define KILN_CL_ERR(c) \
  case c:              \
    name = #c;         \
    break;
    KILN_CL_ERR(CL_SUCCESS)
    KILN_CL_ERR(CL_DEVICE_NOT_FOUND)
    KILN_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
    KILN_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
    KILN_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    KILN_CL_ERR(CL_OUT_OF_RESOURCES)
    KILN_CL_ERR(CL_OUT_OF_HOST_MEMORY)
    KILN_CL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
    KILN_CL_ERR(CL_MEM_COPY_OVERLAP)
    KILN_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
    KILN_CL_ERR(CL_MAP_FAILURE)
    KILN_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    KILN_CL_ERR(CL_COMPILE_PROGRAM_FAILURE)
    KILN_CL_ERR(CL_LINK_PROGRAM_FAILURE)
    KILN_CL_ERR(CL_INVALID_VALUE)
    KILN_CL_ERR(CL_INVALID_DEVICE_TYPE)
    KILN_CL_ERR(CL_INVALID_PLATFORM)
    KILN_CL_ERR(CL_INVALID_DEVICE)
    KILN_CL_ERR(CL_INVALID_CONTEXT)
    KILN_CL_ERR(CL_INVALID_QUEUE_PROPERTIES)
    KILN_CL_ERR(CL_INVALID_COMMAND_QUEUE)
    KILN_CL_ERR(CL_INVALID_HOST_PTR)
    KILN_CL_ERR(CL_INVALID_MEM_OBJECT)
    KILN_CL_ERR(CL_INVALID_BINARY)
    KILN_CL_ERR(CL_INVALID_BUILD_OPTIONS)
    KILN_CL_ERR(CL_INVALID_PROGRAM)
    KILN_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
    KILN_CL_ERR(CL_INVALID_KERNEL_NAME)
    KILN_CL_ERR(CL_INVALID_KERNEL)
    KILN_CL_ERR(CL_INVALID_ARG_INDEX)
    KILN_CL_ERR(CL_INVALID_ARG_VALUE)
    KILN_CL_ERR(CL_INVALID_ARG_SIZE)
    KILN_CL_ERR(CL_INVALID_KERNEL_ARGS)
    KILN_CL_ERR(CL_INVALID_WORK_DIMENSION)
    KILN_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
    KILN_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    KILN_CL_ERR(CL_INVALID_GLOBAL_OFFSET)
    KILN_CL_ERR(CL_INVALID_EVENT_WAIT_LIST)
    KILN_CL_ERR(CL_INVALID_OPERATION)
    KILN_CL_ERR(CL_INVALID_BUFFER_SIZE)
    KILN_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
#undef KILN_CL_ERR
    case -1001:  // CL_PLATFORM_NOT_FOUND_KHR (cl_khr_icd): the loader found no platform
      name = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
    default:
      break;
  }
  return absl::StrCat(name != nullptr ? name : "OpenCL error", " (", code, ")");
}

absl::Status ClStatus(cl_int code, const std::string& what) {
  if (code == CL_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, " failed: ", ClErrorName(code));
  switch (code) {
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return absl::ResourceExhaustedError(msg);
    case CL_DEVICE_NOT_AVAILABLE:
    case CL_DEVICE_NOT_FOUND:
    case CL_COMPILER_NOT_AVAILABLE:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace kiln::kernels::opencl
