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
#include "backend/cuda/cuda_device.h"
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

// Launches `kernel` in clusters of `cluster` blocks along x (1: none; more
// needs device_is_hopper_or_newer()), with programmatic launch where enabled.
template <typename... Params, typename... Args>
void launch_cluster_kernel(void (*kernel)(Params...), unsigned cluster, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned n = 0;
  if (programmatic_launch_enabled()) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = n;
  NT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  launch_cluster_kernel(kernel, 1, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace nt::cuda
