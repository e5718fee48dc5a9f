// The GPU the CUDA backend would use, for front ends that report on it
// without including a backend header.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace nt {

struct GpuSummary {
  std::string name;
  uint64_t free_bytes = 0;
  int multiprocessors = 0;
};

// nullopt with `why` set when there is no usable GPU or this build has no CUDA.
std::optional<GpuSummary> find_gpu(std::string* why);

// Each of `ids` (--gpus), or nt::Error naming the first that is absent and why.
std::vector<GpuSummary> find_gpus(const std::vector<int>& ids);

// Pinned host-to-device copy speed of `gpu` in GB/s (best of a few 256 MiB copies).
double measure_h2d_gbps(int gpu = 0);

// The same copies back to back while `work` runs on the calling thread: the
// link's GB/s while the host's memory serves both.
double measure_h2d_gbps_beside(const std::function<void()>& work, int gpu = 0);

// The memory rate of `gpu`: device-to-device copies, each byte read and
// written (best of a few 256 MiB copies).
double measure_gpu_copy_gbps(int gpu = 0);

// A layer's GPU compute rate, in GB/s of its weights: measure_gpu_copy_gbps
// at the share the H200's resident 70B Q4_K_M decode reached of it
// (kGpuLayerShareOfCopy).
double measure_gpu_layer_gbps(int gpu = 0);
inline constexpr double kGpuLayerShareOfCopy = 0.79;

// GB/s of device-to-device copies from `from` to `to`: peer to peer where
// the GPUs reach each other, else staged through host memory.
double measure_gpu_to_gpu_gbps(int from, int to);

}  // namespace nt
