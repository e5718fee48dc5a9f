#include "backend/cuda/device_buffer.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace nt {

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("out of GPU memory allocating {}: {:.1f} MiB needed, {:.1f} MiB free of {:.1f} MiB ({})", what,
         double(bytes) / (1 << 20), double(free_bytes) / (1 << 20), double(total_bytes) / (1 << 20),
         cudaGetErrorName(err));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

PinnedBuffer::PinnedBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMallocHost(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("cannot allocate {:.1f} MiB of pinned host memory for {} ({})", double(bytes) / (1 << 20), what,
         cudaGetErrorName(err));
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

}  // namespace nt
