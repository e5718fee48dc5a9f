// Kernel launches with optional programmatic dependent launch (Hopper and
// newer): a kernel may start while the previous one in the stream finishes,
// run its prologue (a mat-vec prefetches its weights, which no kernel
// writes), and wait in wait_for_inputs() until the previous kernel's results
// are visible. Every kernel launched through launch_kernel calls
// wait_for_inputs() before reading or writing activations.
// On by default (Tuning::cuda_pdl, NT_CUDA_PDL=0, turns it off for A/B runs): on an H200 it gained
// 9% in 8B decode (a kernel's loads overlap the previous one's tail) and 3% in
// prefill (bench/cuda_NOTES.md).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "core/align.h"
#ifdef NT_BLOCK_TRACE
#include "backend/cuda/kernels/block_trace.cuh"
#else
#define NT_TRACE_BLOCK(kind)
#define NT_TRACE_MID()
#define NT_TRACE_WAITED()
#endif

namespace nt::cuda {

// Blocks of `threads` threads covering n items, one a thread.
inline unsigned blocks_for(int64_t n, int threads) { return unsigned(ceil_div(n, threads)); }

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

// The current device is sm_90 or newer and Tuning::cuda_pdl is on.
bool programmatic_launch_enabled();

// Opts `kernel` into `bytes` of dynamic shared memory on the current GPU the
// first time it launches there: the attribute holds for the device it was
// set on (a pipeline's stages use several). `configured` is the kernel's own
// set of devices done, a bit per device index.
template <typename Kernel>
void allow_dynamic_shared_memory(Kernel kernel, size_t bytes, std::atomic<uint64_t>& configured) {
  int device = 0;
  NT_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit && (configured.load() & bit)) return;
  NT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  configured.fetch_or(bit);
}

// The largest L2 access-policy window the device takes (0: none).
size_t max_access_policy_window_bytes();

// Bytes a launch reads once per decode step: its weights. The launch marks
// them streaming in L2 so that they do not push out what the next launches
// reuse (activations, the KV cache, kernel code): +0.7-1.6% 8B decode on the
// H200 (bench/cuda_NOTES.md). A window longer than the device allows is cut.
struct StreamedBytes {
  const void* base = nullptr;
  size_t bytes = 0;
};

// Launches `kernel` in clusters of `cluster` blocks along x (1: none; more
// needs device_is_hopper_or_newer()), with programmatic launch where enabled
// and `streamed` marked as streaming in L2.
template <typename... Params, typename... Args>
void launch_kernel_with(void (*kernel)(Params...), unsigned cluster, StreamedBytes streamed, dim3 grid, dim3 block,
                        size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[3]{};
  unsigned n = 0;
  if (programmatic_launch_enabled()) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n++].val.clusterDim = {cluster, 1, 1};
  }
  if (streamed.bytes && max_access_policy_window_bytes()) {
    attributes[n].id = cudaLaunchAttributeAccessPolicyWindow;
    cudaAccessPolicyWindow& window = attributes[n++].val.accessPolicyWindow;
    window.base_ptr = const_cast<void*>(streamed.base);
    window.num_bytes = std::min(streamed.bytes, max_access_policy_window_bytes());
    window.hitRatio = 1.0f;
    window.hitProp = cudaAccessPropertyStreaming;
    window.missProp = cudaAccessPropertyStreaming;
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
void launch_cluster_kernel(void (*kernel)(Params...), unsigned cluster, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, Args&&... args) {
  launch_kernel_with(kernel, cluster, StreamedBytes{}, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel_with(kernel, 1, StreamedBytes{}, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace nt::cuda
