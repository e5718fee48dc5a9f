#include "engine/gpu_probe.h"

#include "core/error.h"
#ifdef NT_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/multi_gpu/gpu_set.h"
#endif

namespace nt {

std::optional<GpuSummary> find_gpu(std::string* why) {
#ifdef NT_HAVE_CUDA
  if (const auto d = probe_cuda_device(0, why)) return GpuSummary{d->name, d->free_memory, d->multiprocessors};
#else
  *why = "this build has no CUDA backend";
#endif
  return std::nullopt;
}

std::vector<GpuSummary> find_gpus(const std::vector<int>& ids) {
#ifdef NT_HAVE_CUDA
  std::vector<GpuSummary> gpus;
  for (const auto& d : require_gpus(ids)) gpus.push_back({d.name, d.free_memory, d.multiprocessors});
  return gpus;
#else
  fail("this build has no CUDA backend to find the {} GPUs of --gpus with", ids.size());
#endif
}

double measure_h2d_gbps(int gpu) {
#ifdef NT_HAVE_CUDA
  return measure_pinned_h2d_gbps(gpu);
#else
  fail("this build has no CUDA backend to measure the host-to-device speed of GPU {} with", gpu);
#endif
}

double measure_h2d_gbps_beside(const std::function<void()>& work, int gpu) {
#ifdef NT_HAVE_CUDA
  return measure_pinned_h2d_gbps_beside(gpu, work);
#else
  (void)work;
  fail("this build has no CUDA backend to measure the host-to-device speed of GPU {} with", gpu);
#endif
}

double measure_gpu_copy_gbps(int gpu) {
#ifdef NT_HAVE_CUDA
  return measure_device_memory_gbps(gpu);
#else
  fail("this build has no CUDA backend to measure GPU {} with", gpu);
#endif
}

double measure_gpu_layer_gbps(int gpu) { return kGpuLayerShareOfCopy * measure_gpu_copy_gbps(gpu); }

double measure_gpu_to_gpu_gbps(int from, int to) {
#ifdef NT_HAVE_CUDA
  return measure_peer_gbps(from, to);
#else
  fail("this build has no CUDA backend to measure copies from GPU {} to GPU {} with", from, to);
#endif
}

}  // namespace nt
