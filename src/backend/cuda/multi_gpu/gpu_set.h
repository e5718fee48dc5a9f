// The GPUs of a multi-GPU run (--gpus): each must be present, and the hidden
// state or an all-reduce moves between them peer to peer where the hardware
// allows, through host memory otherwise. Messages name the GPU at fault.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"

namespace nt {

// Every listed GPU, described; throws nt::Error naming the first one that is
// absent, with the GPUs this process sees (and CUDA_VISIBLE_DEVICES when
// set, since it renumbers them), or why CUDA is unavailable.
std::vector<CudaDeviceInfo> require_gpus(const std::vector<int>& ids);

// Lets `from` read and write `to`'s memory directly. False with `why` set
// when the pair cannot (no P2P path: copies then bounce through the host);
// throws naming both GPUs when the driver refuses a pair it reports able.
bool enable_peer_access(int from, int to, std::string* why);

// GB/s of 64 MiB device-to-device copies from `from` to `to`, best of a few:
// the peer-to-peer rate where enable_peer_access succeeded, else the runtime
// stages the copy through host memory and this is the bounce rate.
double measure_peer_gbps(int from, int to);

}  // namespace nt
