#include "backend/cuda/multi_gpu/gpu_set.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/error.h"

namespace nt {

std::vector<CudaDeviceInfo> require_gpus(const std::vector<int>& ids) {
  std::vector<CudaDeviceInfo> gpus;
  for (int id : ids) {
    std::string why;
    const auto info = probe_cuda_device(id, &why);
    if (!info) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      fail("GPU {} is not usable: {}{}", id, why,
           visible ? fmt::format(" (CUDA_VISIBLE_DEVICES={} renumbers the GPUs from 0)", visible) : std::string());
    }
    gpus.push_back(*info);
  }
  return gpus;
}

bool enable_peer_access(int from, int to, std::string* why) {
  int can = 0;
  NT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  if (!can) {
    *why = fmt::format("GPU {} cannot reach GPU {} peer to peer: copies between them go through host memory", from, to);
    return false;
  }
  NT_CUDA_CHECK(cudaSetDevice(from));
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // not an error: a previous call enabled it
    return true;
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("GPU {} reports peer access to GPU {} but enabling it failed: {} ({})", from, to, cudaGetErrorName(err),
         cudaGetErrorString(err));
  }
  return true;
}

double measure_peer_gbps(int from, int to) {
  constexpr size_t kBytes = 64ull << 20;
  NT_CUDA_CHECK(cudaSetDevice(to));
  DeviceBuffer destination(kBytes, fmt::format("the peer copy test on GPU {}", to).c_str());
  NT_CUDA_CHECK(cudaSetDevice(from));
  DeviceBuffer source(kBytes, fmt::format("the peer copy test on GPU {}", from).c_str());
  double best = 0;
  for (int i = 0; i < 4; ++i) {  // the first is a warm-up that maps the path
    const auto t0 = std::chrono::steady_clock::now();
    NT_CUDA_CHECK(cudaMemcpyPeer(destination.get(), to, source.get(), from, kBytes));
    NT_CUDA_CHECK(cudaDeviceSynchronize());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, double(kBytes) / seconds / 1e9);
  }
  return best;
}

}  // namespace nt
