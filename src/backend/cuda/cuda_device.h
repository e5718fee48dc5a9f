// Finding and describing the GPU, with clear messages when there is none
// or the driver is too old for this build.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace nt {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;
  uint64_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;
};

// The device, or nullopt with `why` set (no GPU, no driver, driver too old).
std::optional<CudaDeviceInfo> probe_cuda_device(int index, std::string* why);

// Like probe_cuda_device but throws nt::Error with the reason.
CudaDeviceInfo require_cuda_device(int index);

// Pinned host -> device copies of 256 MiB on device `index`, best of a few
// after a warm-up: the link's speed in GB/s.
double measure_pinned_h2d_gbps(int index);

// The same copies back to back, from another thread, while `work` runs on
// this one: the link's GB/s while the host's memory also serves `work` (the
// CPU layers of a hybrid split read it while the link copies from it).
double measure_pinned_h2d_gbps_beside(int index, const std::function<void()>& work);

// Device-to-device copies of 512 MiB on device `index`, best of a few after a
// warm-up, counting each byte read and written: its memory rate in GB/s.
double measure_device_memory_gbps(int index);

namespace cuda {
// The current device is sm_90 or newer (programmatic launch, thread-block
// clusters); the answer of the first call.
bool device_is_hopper_or_newer();
}  // namespace cuda

}  // namespace nt
