// Kernel launches with optional programmatic dependent launch (Hopper and
// newer): a kernel may start while the previous one in the stream finishes,
// run its prologue (a mat-vec prefetches its weights, which no kernel
// writes), and wait in wait_for_inputs() until the previous kernel's results
// are visible. Every kernel launched through launch_kernel calls
// wait_for_inputs() before reading or writing activations.
// On by default (NT_CUDA_PDL=0 turns it off for A/B runs): on an H200 it gained
// 9% in 8B decode (a kernel's loads overlap the previous one's tail) and 3% in
// prefill (bench/cuda_NOTES.md).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#ifdef NT_BLOCK_TRACE
#include "backend/cuda/block_trace.cuh"
#else
#define NT_TRACE_BLOCK(kind)
#define NT_TRACE_MID()
#define NT_TRACE_WAITED()
#endif

namespace nt::cuda {

// Lets the next kernel in the stream begin launching.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Blocks until the previous kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  NT_TRACE_WAITED();
}

// The current device is sm_90 or newer and NT_CUDA_PDL is not "0".
bool programmatic_launch_enabled();

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch_enabled() ? 1 : 0;
  NT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace nt::cuda
