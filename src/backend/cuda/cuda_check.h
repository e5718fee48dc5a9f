// Every CUDA call and launch is checked; failures name the call, file and line.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define NT_CUDA_CHECK(expr)                                                                                \
  do {                                                                                                     \
    const cudaError_t nt_err_ = (expr);                                                                    \
    if (nt_err_ != cudaSuccess) {                                                                          \
      ::nt::fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(nt_err_), cudaGetErrorString(nt_err_), \
                 #expr, __FILE__, __LINE__);                                                               \
    }                                                                                                      \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately.
#define NT_CUDA_CHECK_LAUNCH() NT_CUDA_CHECK(cudaGetLastError())
