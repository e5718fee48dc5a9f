#include "engine/gpu_probe.h"

#include "core/error.h"
#ifdef NT_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace nt {

std::optional<GpuSummary> find_gpu(std::string* why) {
#ifdef NT_HAVE_CUDA
  if (const auto d = probe_cuda_device(0, why)) return GpuSummary{d->name, d->free_memory};
#else
  *why = "this build has no CUDA backend";
#endif
  return std::nullopt;
}

double measure_h2d_gbps() {
#ifdef NT_HAVE_CUDA
  return measure_pinned_h2d_gbps(0);
#else
  fail("this build has no CUDA backend to measure the host-to-device speed of");
#endif
}

}  // namespace nt
