// The GPU the CUDA backend would use, for front ends that report on it
// without including a backend header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nt {

struct GpuSummary {
  std::string name;
  uint64_t free_bytes = 0;
};

// nullopt with `why` set when there is no usable GPU or this build has no CUDA.
std::optional<GpuSummary> find_gpu(std::string* why);

// Pinned host-to-device copy speed of GPU 0 in GB/s (best of a few 256 MiB copies).
double measure_h2d_gbps();

}  // namespace nt
