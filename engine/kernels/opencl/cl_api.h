// The OpenCL API, loaded at run time. Kiln built with KILN_WITH_OPENCL does not link the ICD
// loader: a machine without OpenCL runs every CPU engine, and asking for an OpenCL device there
// is a clear error naming what is missing (the loader library, a platform, a device) instead of
// a binary that the dynamic linker refuses to start.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <string>

#include "absl/status/statusor.h"

namespace kiln::kernels::opencl {

// The entry points Kiln calls (OpenCL 1.2: the version every driver it targets has).
#define KILN_CL_FUNCTIONS(X)   \
  X(clGetPlatformIDs)          \
  X(clGetPlatformInfo)         \
  X(clGetDeviceIDs)            \
  X(clGetDeviceInfo)           \
  X(clCreateContext)           \
  X(clReleaseContext)          \
  X(clCreateCommandQueue)      \
  X(clReleaseCommandQueue)     \
  X(clCreateBuffer)            \
  X(clReleaseMemObject)        \
  X(clCreateProgramWithSource) \
  X(clCreateProgramWithBinary) \
  X(clBuildProgram)            \
  X(clGetProgramBuildInfo)     \
  X(clGetProgramInfo)          \
  X(clReleaseProgram)          \
  X(clCreateKernel)            \
  X(clReleaseKernel)           \
  X(clSetKernelArg)            \
  X(clGetKernelWorkGroupInfo)  \
  X(clEnqueueNDRangeKernel)    \
  X(clGetKernelInfo)           \
  X(clGetEventProfilingInfo)   \
  X(clReleaseEvent)            \
  X(clEnqueueReadBuffer)       \
  X(clEnqueueWriteBuffer)      \
  X(clEnqueueCopyBuffer)       \
  X(clEnqueueFillBuffer)       \
  X(clFinish)                  \
  X(clFlush)

/// The loaded entry points.
struct ClApi {
#define KILN_CL_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CL_FUNCTIONS(KILN_CL_MEMBER)
#undef KILN_CL_MEMBER
};

/// The OpenCL API of this process: libOpenCL.so.1 (or the library KILN_OPENCL_LIBRARY names)
/// loaded once. Unavailable (with what to install) when the library or an entry point is missing;
/// the same answer on every call.
absl::StatusOr<const ClApi*> Cl();

/// "CL_OUT_OF_RESOURCES (-5)" for an OpenCL error code.
std::string ClErrorName(cl_int code);

/// OK for CL_SUCCESS, else an error saying `what` failed with the code's name: ResourceExhausted
/// for exhausted memory or resources, Unavailable for a missing device or compiler, Internal
/// otherwise.
absl::Status ClStatus(cl_int code, const std::string& what);

}  // namespace kiln::kernels::opencl
