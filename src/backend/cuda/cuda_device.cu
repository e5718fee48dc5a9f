#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels/launch.cuh"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/tuning.h"

namespace nt {

std::optional<CudaDeviceInfo> probe_cuda_device(int index, std::string* why) {
  CudaDeviceInfo info;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver && info.driver_version == 0) {
    *why = "the NVIDIA driver is not installed";
    return std::nullopt;
  }
  if (err == cudaErrorInsufficientDriver) {
    *why = fmt::format("the NVIDIA driver supports CUDA {}.{} but this build needs {}.{}; update the driver",
                       info.driver_version / 1000, info.driver_version % 1000 / 10, info.runtime_version / 1000,
                       info.runtime_version % 1000 / 10);
    return std::nullopt;
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    *why = "no CUDA GPU found";
    return std::nullopt;
  }
  if (err != cudaSuccess) {
    *why = fmt::format("CUDA is unavailable: {} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
    return std::nullopt;
  }
  if (index < 0 || index >= count) {
    *why = fmt::format("GPU {} requested but only {} present", index, count);
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    *why = fmt::format("cannot query GPU {}", index);
    return std::nullopt;
  }
  info.index = index;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = uint64_t(prop.l2CacheSize);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info.free_memory = free_bytes;
  }
  return info;
}

CudaDeviceInfo require_cuda_device(int index) {
  std::string why;
  if (auto info = probe_cuda_device(index, &why)) return *info;
  fail("{}", why);
}

namespace {

// 256 MiB of pinned host memory and as much on device `index`, for link probes.
class LinkProbeBuffers {
 public:
  static constexpr size_t kBytes = 256ull << 20;
  explicit LinkProbeBuffers(int index) {
    NT_CUDA_CHECK(cudaSetDevice(index));
    if (cudaMallocHost(&host_, kBytes) != cudaSuccess || cudaMalloc(&device_, kBytes) != cudaSuccess) {
      cudaGetLastError();
      release();
      fail("cannot allocate {} MiB to measure the host-to-device speed of GPU {}; pass --h2d-gbps", kBytes >> 20, index);
    }
  }
  ~LinkProbeBuffers() { release(); }
  LinkProbeBuffers(const LinkProbeBuffers&) = delete;
  LinkProbeBuffers& operator=(const LinkProbeBuffers&) = delete;
  // One copy's seconds; throws on a failed copy.
  double copy() const {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMemcpy(device_, host_, kBytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) fail("host-to-device copy failed: {}", cudaGetErrorString(e));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Copies back to back on `stream` until `done`, the thread sleeping while
  // each runs (a spinning wait would take a core from the work beside it);
  // returns the bytes and the copies' device seconds.
  std::pair<uint64_t, double> copy_until(const std::atomic<bool>& done, cudaStream_t stream) const {
    cudaEvent_t begin = nullptr, end = nullptr;
    NT_CUDA_CHECK(cudaEventCreate(&begin));
    NT_CUDA_CHECK(cudaEventCreate(&end));
    uint64_t bytes = 0;
    double seconds = 0;
    cudaError_t e = cudaSuccess;
    while (e == cudaSuccess && !done.load()) {
      e = cudaEventRecord(begin, stream);
      if (e == cudaSuccess) e = cudaMemcpyAsync(device_, host_, kBytes, cudaMemcpyHostToDevice, stream);
      if (e == cudaSuccess) e = cudaEventRecord(end, stream);
      if (e != cudaSuccess) break;
      while ((e = cudaEventQuery(end)) == cudaErrorNotReady) std::this_thread::sleep_for(std::chrono::microseconds(100));
      float ms = 0;
      if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, begin, end);
      bytes += kBytes;
      seconds += ms * 1e-3;
    }
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    if (e != cudaSuccess) fail("host-to-device copy failed: {}", cudaGetErrorString(e));
    return {bytes, seconds};
  }

 private:
  void release() {
    if (device_) cudaFree(device_);
    if (host_) cudaFreeHost(host_);
    device_ = host_ = nullptr;
  }
  void* host_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace

double measure_pinned_h2d_gbps(int index) {
  const LinkProbeBuffers buffers(index);
  buffers.copy();  // warms up the path
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, double(LinkProbeBuffers::kBytes) / buffers.copy() / 1e9);
  return best;
}

double measure_pinned_h2d_gbps_beside(int index, const std::function<void()>& work) {
  const LinkProbeBuffers buffers(index);
  buffers.copy();  // warms up the path
  cudaStream_t stream = nullptr;
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::atomic<bool> done{false};
  std::pair<uint64_t, double> copied{0, 0.0};
  std::string error;
  std::thread link([&] {
    try {
      NT_CUDA_CHECK(cudaSetDevice(index));
      copied = buffers.copy_until(done, stream);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const auto finish = [&] {
    done = true;
    link.join();
    cudaStreamDestroy(stream);
  };
  try {
    work();
  } catch (...) {
    finish();
    throw;
  }
  finish();
  if (!error.empty()) fail("{}", error);
  // The last copy may end after `work`; it overlapped it for most of its time.
  return copied.second > 0 ? double(copied.first) / copied.second / 1e9 : 0.0;
}

double measure_device_memory_gbps(int index) {
  constexpr size_t kBytes = 512ull << 20;
  NT_CUDA_CHECK(cudaSetDevice(index));
  void *from = nullptr, *to = nullptr;
  if (cudaMalloc(&from, kBytes) != cudaSuccess || cudaMalloc(&to, kBytes) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(from);
    fail("cannot allocate 2 x {} MiB on GPU {} to measure its memory rate; pass --gpu-gbps", kBytes >> 20, index);
  }
  cudaEvent_t begin = nullptr, end = nullptr;
  NT_CUDA_CHECK(cudaEventCreate(&begin));
  NT_CUDA_CHECK(cudaEventCreate(&end));
  double best = 0;
  for (int i = 0; i < 4; ++i) {  // the first warms up
    NT_CUDA_CHECK(cudaEventRecord(begin));
    NT_CUDA_CHECK(cudaMemcpyAsync(to, from, kBytes, cudaMemcpyDeviceToDevice));
    NT_CUDA_CHECK(cudaEventRecord(end));
    NT_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    NT_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    if (i > 0) best = std::max(best, 2.0 * double(kBytes) / (double(ms) * 1e-3) / 1e9);  // each byte read and written
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaFree(from);
  cudaFree(to);
  return best;
}

}  // namespace nt

namespace nt::cuda {

bool device_is_hopper_or_newer() {
  static const bool hopper = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9;
  }();
  return hopper;
}

bool programmatic_launch_enabled() {
  static const bool enabled = [] {
    return tuning().cuda_pdl && device_is_hopper_or_newer();
  }();
  return enabled;
}

size_t max_access_policy_window_bytes() {
  static const size_t bytes = [] {
    int device = 0, value = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&value, cudaDevAttrMaxAccessPolicyWindowSize, device) != cudaSuccess) {
      return size_t(0);
    }
    return size_t(value);
  }();
  return bytes;
}

}  // namespace nt::cuda
