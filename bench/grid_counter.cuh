// A grid-wide dependency through a counter in global memory: the persistent
// kernel's alternative to a kernel boundary (cuda_sync_bench.cu,
// cuda_chain_bench.cu). Each block's thread 0 counts the block once its work
// is done and spins until the count reaches the grid's target; the callers
// place the block barriers around it.
#pragma once

#include <cuda_runtime.h>

namespace nt::cuda {

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0: the block's writes, ordered before by a barrier, become visible
// device-wide before the block is counted.
__device__ __forceinline__ void count_block_done(unsigned* counter) {
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
  }
}

// Thread 0: waits until `counter` reaches `target`, polling every `sleep_ns`.
__device__ __forceinline__ void wait_for_count(const unsigned* counter, unsigned target, unsigned sleep_ns) {
  if (threadIdx.x == 0) {
    while (load_acquire(counter) < target) __nanosleep(sleep_ns);
  }
}

}  // namespace nt::cuda
