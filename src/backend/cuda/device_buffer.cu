#include "backend/cuda/device_buffer.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/align.h"

namespace nt {

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    int gpu = -1;  // named, since with several GPUs the one that ran out matters
    cudaGetDevice(&gpu);
    fail("out of GPU memory on GPU {} allocating {}: {:.1f} MiB needed, {:.1f} MiB free of {:.1f} MiB ({})", gpu, what,
         double(bytes) / (1 << 20), double(free_bytes) / (1 << 20), double(total_bytes) / (1 << 20),
         cudaGetErrorName(err));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

// Pinned buffers are anonymous mappings registered with the driver, so each
// is page aligned: O_DIRECT reads land in staging slots of any size (a small
// model's disk layers took cudaMallocHost memory at 512-byte alignment, which
// io_uring refused). Large ones are backed by transparent huge pages: on the
// H200 host that pins at 4.7 GB/s against 2.4 GB/s for cudaMallocHost, which
// is most of the load time of a model whose RAM tier holds tens of GB
// (docs/PERFORMANCE.md, load times).
PinnedBuffer::PinnedBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const auto cannot = [&](const char* why) {
    fail("cannot allocate {:.1f} MiB of pinned host memory for {} ({})", double(bytes) / (1 << 20), what, why);
  };
  const size_t granule = bytes < kHugePage ? kPage : kHugePage;
  mapped_ = align_up(bytes, granule);
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) cannot(std::strerror(errno));
  if (granule == kHugePage) madvise(p, mapped_, MADV_HUGEPAGE);  // best effort: without huge pages it pins at the 4 KiB rate
  // Portable: the GPUs of a pipeline copy through it as pinned memory, not only the current one.
  const cudaError_t err = cudaHostRegister(p, mapped_, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    munmap(p, mapped_);
    cannot(cudaGetErrorName(err));
  }
  ptr_ = p;
}

void* PinnedBuffer::device_pointer() const {
  void* device = nullptr;
  if (ptr_) NT_CUDA_CHECK(cudaHostGetDevicePointer(&device, ptr_, 0));
  return device;
}

PinnedBuffer::~PinnedBuffer() {
  if (!ptr_) return;
  cudaHostUnregister(ptr_);
  munmap(ptr_, mapped_);
}

}  // namespace nt
