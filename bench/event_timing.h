// GPU time of enqueued work, measured with CUDA events (the CUDA benchmarks).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace nt::bench {

// Milliseconds between events recorded on `stream` before and after `body`
// enqueues its work; waits for it.
template <class Body>
float event_ms(cudaStream_t stream, const Body& body) {
  cudaEvent_t start, stop;
  NT_CUDA_CHECK(cudaEventCreate(&start));
  NT_CUDA_CHECK(cudaEventCreate(&stop));
  NT_CUDA_CHECK(cudaEventRecord(start, stream));
  body();
  NT_CUDA_CHECK(cudaEventRecord(stop, stream));
  NT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  NT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace nt::bench
